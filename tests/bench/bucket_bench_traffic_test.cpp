// graphserve-bucket-bench's traffic mode (the end-to-end benchmark's ceiling), run as the benchmark
// script runs it, on the CPU: its JSON figures against the lengths recomputed here from the same
// seed and the load generator's distribution, binned here by the rule traffic.h states.
#include <gtest/gtest.h>

#include <algorithm>
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

TEST(BucketBenchTrafficTest, LengthBeyondTheGridIsRefused) {
  const ToolRun run = RunBench("--traffic-requests 3 --traffic-lengths fixed:100 --lengths 32,64",
                                "bucket_bench_refused.json");
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("request length 100"), std::string::npos) << run.output;
  EXPECT_TRUE(run.report.is_null());
}

}  // namespace
