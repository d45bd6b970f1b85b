// graphserve-bucket-bench's traffic mode (the end-to-end benchmark's ceiling), run as the benchmark
// script runs it, on the CPU: its JSON figures against the lengths recomputed here from the same
// seed and the load generator's distribution, binned here by the rule traffic.h states.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graphserve/client/loadgen.h"
#include "tool_run.h"

namespace {

using json = nlohmann::json;

using graphserve::testing::RunToolWithJsonReport;
using graphserve::testing::ToolRun;

// graphserve-bucket-bench on the CPU with `args`, its JSON report going to `json_name`.
ToolRun RunBench(const std::string& args, const std::string& json_name) {
  return RunToolWithJsonReport(std::string(BUCKET_BENCH) + " --device cpu " + args,
                               std::string(TEST_OUTPUT_DIR) + "/" + json_name);
}

TEST(BucketBenchTrafficTest, FiguresAreTheSampledRequestsBinnedIntoFullBatches) {
  // A mix and grid small enough for a CPU, with bins of one, of a partial and of several batches.
  constexpr int kRequests = 40;
  constexpr uint64_t kSeed = 7;
  const std::string mix = "lognormal:30,0.6,8-64";
  const std::vector<int64_t> grid_batches = {1, 4, 8};
  const std::vector<int64_t> grid_lengths = {16, 32, 64};
  const ToolRun run = RunBench("--traffic-requests " + std::to_string(kRequests) + " --seed " +
                                   std::to_string(kSeed) + " --traffic-lengths " + mix +
                                   " --batches 1,4,8 --lengths 16,32,64 --passes 2 "
                                   "--time-buckets 1x64 --iterations 2",
                               "bucket_bench_traffic.json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_TRUE(run.report.is_object()) << run.output;
  const json& report = run.report;

  // The first kRequests draws of mt19937_64(seed) from the load generator's distribution.
  graphserve::loadgen::LengthDistribution lengths;
  ASSERT_TRUE(graphserve::loadgen::LengthDistribution::Parse(mix, &lengths).ok());
  EXPECT_EQ(report["lengths"], lengths.description());
  std::mt19937_64 rng(kSeed);
  int64_t tokens = 0;
  std::map<int64_t, int64_t> per_bin;  // bucket length -> requests
  for (int i = 0; i < kRequests; ++i) {
    const int64_t length = lengths.Sample(rng);
    tokens += length;
    for (int64_t bin : grid_lengths) {
      if (length <= bin) {
        ++per_bin[bin];
        break;
      }
    }
  }
  // Full batches of 8, the rest in the smallest batch bucket holding it.
  std::map<std::string, int64_t> expected_batches;
  int64_t padded = 0;
  int64_t batch_count = 0;
  for (const auto& [length, count] : per_bin) {
    for (int64_t left = count; left > 0; left -= 8) {
      int64_t rows = 8;
      for (int64_t size : grid_batches) {
        if (size >= std::min<int64_t>(left, 8)) {
          rows = size;
          break;
        }
      }
      ++expected_batches[std::to_string(rows) + "x" + std::to_string(length)];
      padded += rows * length;
      ++batch_count;
    }
  }

  EXPECT_EQ(report["model"], "encoder");
  EXPECT_EQ(report["device"], "cpu");
  EXPECT_EQ(report["requests"], kRequests);
  EXPECT_EQ(report["tokens"], tokens);
  EXPECT_EQ(report["padded_tokens"], padded);
  EXPECT_DOUBLE_EQ(report["padding_ratio"].get<double>(), static_cast<double>(padded) / tokens);
  EXPECT_EQ(report["batches"], batch_count);
  using BatchCounts = std::map<std::string, int64_t>;
  EXPECT_EQ(report["batches_by_bucket"].get<BatchCounts>(), expected_batches);
  EXPECT_GT(expected_batches.size(), 3u) << "the draw no longer covers full and partial batches";
  // A CPU replays nothing: no replay-only time to report.
  EXPECT_EQ(report["graph_batches"], 0);
  EXPECT_TRUE(report["replay_s"].is_null());

  ASSERT_EQ(report["pass_s"].size(), 2u);
  const double execute_s = report["execute_s"].get<double>();
  EXPECT_GT(execute_s, 0.0);
  EXPECT_DOUBLE_EQ(report["tokens_per_s"].get<double>(), tokens / execute_s);
  EXPECT_DOUBLE_EQ(report["requests_per_s"].get<double>(), kRequests / execute_s);
  ASSERT_TRUE(report["timed_buckets"].contains("1x64")) << report.dump(2);
  EXPECT_GT(report["timed_buckets"]["1x64"]["execute_us"].get<double>(), 0.0);
  EXPECT_FALSE(report["timed_buckets"]["1x64"]["graph"].get<bool>());
}

// A ragged model (the graph engine's test model `ragged`, Triton's convention) in a repository of
// its own: 8 rows, token sizes 16 to 64, one row at most 16 tokens.
std::string RaggedRepository() {
  const std::string repository = std::string(TEST_OUTPUT_DIR) + "/ragged_repository";
  std::filesystem::create_directories(repository + "/ragged");
  std::filesystem::copy_file(std::string(TEST_MODELS_DIR) + "/ragged/model.pt",
                             repository + "/ragged/model.pt",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(repository + "/ragged/config.pbtxt") << R"(
name: "ragged"
backend: "pytorch"
max_batch_size: 8
input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "cu_seqlens"
                data_type: TYPE_INT32 source_input: "input_ids" } ]
output [ { name: "per_token" data_type: TYPE_FP32 dims: [ -1, 4 ] },
         { name: "pooled" data_type: TYPE_FP32 dims: [ 4 ] } ]
batch_output [ { target_name: "per_token" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "input_ids" } ]
parameters: { key: "max_sequence_length" value: { string_value: "16" } }
parameters: { key: "max_batch_tokens" value: { string_value: "64" } }
parameters: { key: "bucket_sequence_lengths" value: { string_value: "16,32,64" } }
parameters: { key: "bucket_batch_sizes" value: { string_value: "2,8" } }
)";
  return repository;
}

TEST(BucketBenchTrafficTest, ARaggedModelsRequestsArePackedEndToEndWithOnlyTailsAsPadding) {
  constexpr int kRequests = 30;
  constexpr uint64_t kSeed = 3;
  const std::string mix = "uniform:1-16";
  const ToolRun run =
      RunBench("--model-repository " + RaggedRepository() + " --model ragged --traffic-requests " +
                   std::to_string(kRequests) + " --seed " + std::to_string(kSeed) + " --traffic-lengths " +
                   mix + " --passes 1 --time-lone-request 5",
               "bucket_bench_ragged.json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_TRUE(run.report.is_object()) << run.output;

  // Packed here by the rule traffic.h states: in arrival order, a batch closes when the next request
  // would need more than 64 tokens or more than 8 rows; its bucket counts a filler row when its
  // tokens fall short (row sizes 2, 8 and the grid's spare 9).
  graphserve::loadgen::LengthDistribution lengths;
  ASSERT_TRUE(graphserve::loadgen::LengthDistribution::Parse(mix, &lengths).ok());
  std::mt19937_64 rng(kSeed);
  const std::vector<int64_t> token_sizes = {16, 32, 64};
  auto bucket_of = [&](int64_t rows, int64_t tokens) {
    const int64_t size = *std::lower_bound(token_sizes.begin(), token_sizes.end(), tokens);
    const int64_t needed = tokens < size ? rows + 1 : rows;
    return std::to_string(needed <= 2 ? 2 : needed <= 8 ? 8 : 9) + "x" + std::to_string(size);
  };
  // At most max_batch_size real rows; the grid keeps a row beyond it for a tail's filler.
  auto fits = [](int64_t rows, int64_t tokens) { return tokens <= 64 && rows <= 8; };
  std::map<std::string, int64_t> expected_batches;
  int64_t rows = 0, tokens = 0, real_tokens = 0, computed_tokens = 0;
  auto close = [&]() {
    if (rows == 0) return;
    const std::string bucket = bucket_of(rows, tokens);
    ++expected_batches[bucket];
    computed_tokens += std::stoll(bucket.substr(bucket.find('x') + 1));
    rows = tokens = 0;
  };
  for (int i = 0; i < kRequests; ++i) {
    const int64_t length = lengths.Sample(rng);
    real_tokens += length;
    if (!fits(rows + 1, tokens + length)) close();
    ++rows;
    tokens += length;
  }
  close();

  EXPECT_EQ(run.report["tokens"].get<int64_t>(), real_tokens);
  EXPECT_EQ(run.report["padded_tokens"].get<int64_t>(), computed_tokens);
  std::map<std::string, int64_t> batches_by_bucket;
  for (const auto& [bucket, count] : run.report["batches_by_bucket"].items())
    batches_by_bucket[bucket] = count;
  EXPECT_EQ(batches_by_bucket, expected_batches) << run.report.dump(2);
  // A lone 5-token row goes into the smallest token size, with a filler row for the 11-token tail.
  EXPECT_EQ(run.report["lone_request"]["bucket"], "2x16") << run.report.dump(2);
  EXPECT_GT(run.report["lone_request"]["execute_us"].get<double>(), 0.0);
  // Padding is only each batch's tail: far below what padding every row to 16 tokens would cost.
  EXPECT_LT(run.report["padding_ratio"].get<double>(), 16.0 * kRequests / real_tokens);
}

TEST(BucketBenchTrafficTest, LengthBeyondTheGridIsRefused) {
  const ToolRun run = RunBench("--traffic-requests 3 --traffic-lengths fixed:100 --lengths 32,64",
                                "bucket_bench_refused.json");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("request length 100"), std::string::npos) << run.output;
  EXPECT_TRUE(run.report.is_null());
}

}  // namespace
