// TraceWriter: Triton's trace JSON, the stages' mapping onto its names, the bounded queue that drops
// and counts, rolling every log_frequency traces, the bound on a file's traces, and a file that
// cannot be written. The writer's
// thread is started only where the test waits for it to finish (Stop), so nothing depends on timing.
#include "graphserve/server/observability/trace_writer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace graphserve {
namespace {

using nlohmann::json;

std::string TestDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("trace_writer_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

json ReadJson(const std::string& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << path;
  std::stringstream text;
  text << file.rdbuf();
  return json::parse(text.str());
}

RequestTrace Trace(uint64_t id, const std::string& file, int64_t log_frequency = 0) {
  RequestTrace trace;
  trace.ticket = TraceTicket{id, file, log_frequency};
  trace.model_name = "m";
  trace.model_version = 1;
  trace.request_id = "r" + std::to_string(id);
  trace.timestamps = {{"REQUEST_START", 10}, {"REQUEST_END", 20}};
  return trace;
}

// The ids of the traces in a file's array (each trace is two objects with the same id).
std::vector<uint64_t> Ids(const json& traces) {
  std::vector<uint64_t> ids;
  for (const json& object : traces) {
    if (object.contains("model_name")) ids.push_back(object["id"].get<uint64_t>());
  }
  return ids;
}

TEST(TraceWriterTest, TraceJsonIsTritonsTwoObjects) {
  RequestTrace trace = Trace(7, "unused");
  const json objects = json::parse("[" + TraceJson(trace) + "]");
  EXPECT_EQ(objects, json::parse(R"([
      {"id": 7, "model_name": "m", "model_version": 1, "request_id": "r7", "parent_id": 0},
      {"id": 7, "timestamps": [{"name": "REQUEST_START", "ns": 10}, {"name": "REQUEST_END", "ns": 20}]}])"));
}

TEST(TraceWriterTest, TimestampsFollowTheRequestsStagesInTritonsNames) {
  RequestTiming timing;
  timing.enqueue_us = 105;
  timing.batch_start_us = 110;
  timing.batch_end_us = 150;
  timing.stages = BatchStageTimes{5000, 30000, 4000};
  const auto stamps = TraceTimestamps(100, timing, 160);
  const std::vector<std::pair<const char*, int64_t>> expected = {
      {"REQUEST_START", 100000},     {"QUEUE_START", 105000},          {"COMPUTE_START", 110000},
      {"COMPUTE_INPUT_END", 115000}, {"COMPUTE_OUTPUT_START", 145000}, {"COMPUTE_END", 150000},
      {"REQUEST_END", 160000},
  };
  ASSERT_EQ(stamps.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_STREQ(stamps[i].first, expected[i].first);
    EXPECT_EQ(stamps[i].second, expected[i].second) << expected[i].first;
  }

  // Stage times that overrun the batch's end are held to it; clocks read apart never go backwards.
  timing.stages = BatchStageTimes{60000, 1000, 0};
  const auto held = TraceTimestamps(100, timing, 140);
  EXPECT_EQ(held[3].second, 150000);      // COMPUTE_INPUT_END at COMPUTE_END
  EXPECT_EQ(held.back().second, 150000);  // REQUEST_END read before COMPUTE_END's clock
  for (size_t i = 1; i < held.size(); ++i) EXPECT_GE(held[i].second, held[i - 1].second);

  // Expired in the queue: never batched.
  RequestTiming queued;
  queued.enqueue_us = 105;
  const auto unrun = TraceTimestamps(100, queued, 300);
  ASSERT_EQ(unrun.size(), 3u);
  EXPECT_STREQ(unrun[1].first, "QUEUE_START");
  EXPECT_STREQ(unrun[2].first, "REQUEST_END");
}

TEST(TraceWriterTest, AFullQueueDropsAndCountsThenTheRestIsWritten) {
  const std::string file = TestDir("full") + "/trace.json";
  TraceWriter writer(2, 100);
  EXPECT_TRUE(writer.Submit(Trace(1, file)));
  EXPECT_TRUE(writer.Submit(Trace(2, file)));
  EXPECT_FALSE(writer.Submit(Trace(3, file)));  // not started: nothing drains the queue
  EXPECT_EQ(writer.Dropped(TraceDrop::kQueueFull), 1u);
  writer.Start();
  writer.Stop();
  EXPECT_EQ(writer.Written(), 2u);
  EXPECT_EQ(Ids(ReadJson(file)), (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(writer.Submit(Trace(4, file)));  // stopped
}

TEST(TraceWriterTest, LogFrequencyRollsToNumberedFiles) {
  const std::string file = TestDir("rolling") + "/trace.json";
  TraceWriter writer(16, 100);
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(writer.Submit(Trace(id, file, 2)));
  writer.Stop();
  EXPECT_EQ(Ids(ReadJson(file + ".0")), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Ids(ReadJson(file + ".1")), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(Ids(ReadJson(file + ".2")), (std::vector<uint64_t>{5}));
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_FALSE(std::filesystem::exists(file + ".3"));
}

TEST(TraceWriterTest, ATraceFileTakesAtMostItsBoundAcrossItsRolledFiles) {
  const std::string dir = TestDir("bounded");
  TraceWriter writer(16, 3);
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(writer.Submit(Trace(id, dir + "/trace.json", 2)));
  ASSERT_TRUE(writer.Submit(Trace(6, dir + "/other.json")));  // a file of its own
  writer.Stop();
  EXPECT_EQ(writer.Dropped(TraceDrop::kFileFull), 2u);
  EXPECT_EQ(Ids(ReadJson(dir + "/trace.json.0")), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Ids(ReadJson(dir + "/trace.json.1")), (std::vector<uint64_t>{3}));
  EXPECT_FALSE(std::filesystem::exists(dir + "/trace.json.2"));
  EXPECT_EQ(Ids(ReadJson(dir + "/other.json")), (std::vector<uint64_t>{6}));
}

TEST(TraceWriterTest, AFileThatCannotBeWrittenCountsItsTracesAsDropped) {
  const std::string missing = TestDir("failing") + "/no_such_dir/trace.json";
  const std::string good = TestDir("failing_good") + "/trace.json";
  TraceWriter writer(16, 100);
  ASSERT_TRUE(writer.Submit(Trace(1, missing)));
  ASSERT_TRUE(writer.Submit(Trace(2, good)));
  ASSERT_TRUE(writer.Submit(Trace(3, missing)));
  writer.Stop();
  EXPECT_EQ(writer.Dropped(TraceDrop::kWriteFailed), 2u);
  EXPECT_EQ(writer.Written(), 1u);
  EXPECT_EQ(Ids(ReadJson(good)), std::vector<uint64_t>{2});
}

}  // namespace
}  // namespace graphserve
