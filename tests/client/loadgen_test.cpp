// The load generator's arithmetic: nearest-rank percentiles, length distributions, Poisson arrivals,
// the answer check and the report's JSON.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graphserve/client/loadgen.h"

namespace graphserve::loadgen {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

int64_t Ns(milliseconds value) { return nanoseconds(value).count(); }

int64_t PercentileNs(const LatencyRecorder& recorder, double percent) {
  const auto value = recorder.Percentile(percent);
  EXPECT_TRUE(value.has_value());
  return value ? value->count() : -1;
}

// ---- Percentiles ----------------------------------------------------------------------------------

TEST(LatencyRecorderTest, NearestRankOfOneToHundred) {
  // Recorded shuffled: the order of arrival must not matter.
  std::vector<int64_t> values(100);
  std::iota(values.begin(), values.end(), 1);
  std::shuffle(values.begin(), values.end(), std::mt19937_64(7));
  LatencyRecorder recorder;
  for (int64_t value : values) recorder.Record(milliseconds(value));

  EXPECT_EQ(PercentileNs(recorder, 50), Ns(milliseconds(50)));
  EXPECT_EQ(PercentileNs(recorder, 90), Ns(milliseconds(90)));
  EXPECT_EQ(PercentileNs(recorder, 99), Ns(milliseconds(99)));
  EXPECT_EQ(PercentileNs(recorder, 100), Ns(milliseconds(100)));
  EXPECT_EQ(PercentileNs(recorder, 0), Ns(milliseconds(1)));
  EXPECT_EQ(PercentileNs(recorder, 99.5), Ns(milliseconds(100)));  // rank ceil(99.5) = 100
  EXPECT_EQ(PercentileNs(recorder, 0.5), Ns(milliseconds(1)));     // rank ceil(0.5) = 1

  const LatencySummary summary = Summarize(recorder);
  EXPECT_EQ(summary.count, 100);
  EXPECT_DOUBLE_EQ(summary.p50_ms, 50);
  EXPECT_DOUBLE_EQ(summary.p90_ms, 90);
  EXPECT_DOUBLE_EQ(summary.p99_ms, 99);
  EXPECT_DOUBLE_EQ(summary.max_ms, 100);
  EXPECT_DOUBLE_EQ(summary.min_ms, 1);
  EXPECT_DOUBLE_EQ(summary.mean_ms, 50.5);
}

TEST(LatencyRecorderTest, SmallCountsRoundTheRankUp) {
  LatencyRecorder recorder;
  for (int64_t value : {30, 10, 20}) recorder.Record(nanoseconds(value));
  EXPECT_EQ(PercentileNs(recorder, 50), 20);  // rank ceil(1.5) = 2
  EXPECT_EQ(PercentileNs(recorder, 33), 10);  // rank ceil(0.99) = 1
  EXPECT_EQ(PercentileNs(recorder, 34), 20);  // rank ceil(1.02) = 2
  EXPECT_EQ(PercentileNs(recorder, 90), 30);  // rank ceil(2.7) = 3
  LatencyRecorder ten;
  for (int64_t value = 1; value <= 10; ++value) ten.Record(nanoseconds(value));
  EXPECT_EQ(PercentileNs(ten, 90), 9);   // rank 9 exactly, not 10
  EXPECT_EQ(PercentileNs(ten, 99), 10);  // rank ceil(9.9) = 10
  EXPECT_EQ(PercentileNs(ten, 10), 1);
  EXPECT_EQ(PercentileNs(ten, 11), 2);
}

// The definition itself, checked by brute force on random samples with ties: the answer is the
// smallest recorded value v with #{x <= v} >= p/100 × n.
TEST(LatencyRecorderTest, MatchesTheDefinitionOnRandomSamples) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t n = 1 + rng() % 300;
    std::vector<int64_t> values(n);
    LatencyRecorder recorder;
    for (int64_t& value : values) {
      value = static_cast<int64_t>(rng() % 50);  // many ties
      recorder.Record(nanoseconds(value));
    }
    std::sort(values.begin(), values.end());
    for (int percent : {1, 10, 25, 50, 75, 90, 95, 99, 100}) {
      int64_t expected = -1;
      for (int64_t candidate : values) {
        const auto at_or_below = std::count_if(values.begin(), values.end(),
                                               [&](int64_t x) { return x <= candidate; });
        if (static_cast<int64_t>(at_or_below) * 100 >= static_cast<int64_t>(percent * n)) {
          expected = candidate;
          break;
        }
      }
      EXPECT_EQ(PercentileNs(recorder, percent), expected) << "n=" << n << " p" << percent;
    }
  }
}

TEST(LatencyRecorderTest, SingleSampleIsEveryPercentile) {
  LatencyRecorder recorder;
  recorder.Record(std::chrono::microseconds(1500));
  const LatencySummary summary = Summarize(recorder);
  EXPECT_EQ(summary.count, 1);
  for (double value : {summary.min_ms, summary.mean_ms, summary.p50_ms, summary.p90_ms,
                       summary.p99_ms, summary.max_ms}) {
    EXPECT_DOUBLE_EQ(value, 1.5);
  }
}

TEST(LatencyRecorderTest, EmptyHasNoPercentiles) {
  LatencyRecorder recorder;
  EXPECT_FALSE(recorder.Percentile(50).has_value());
  const LatencySummary summary = Summarize(recorder);
  EXPECT_EQ(summary.count, 0);
  EXPECT_EQ(summary.p99_ms, 0);
  EXPECT_EQ(summary.max_ms, 0);
}

// ---- Length distributions -------------------------------------------------------------------------

LengthDistribution Parsed(const std::string& text) {
  LengthDistribution distribution;
  const grpc::Status status = LengthDistribution::Parse(text, &distribution);
  EXPECT_TRUE(status.ok()) << text << ": " << status.error_message();
  return distribution;
}

std::vector<int64_t> Draw(const LengthDistribution& distribution, uint64_t seed, size_t count) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> values(count);
  for (int64_t& value : values) value = distribution.Sample(rng);
  return values;
}

TEST(LengthDistributionTest, FixedIsAlwaysItsLength) {
  const LengthDistribution fixed = Parsed("fixed:64");
  EXPECT_EQ(fixed.min(), 64);
  EXPECT_EQ(fixed.max(), 64);
  EXPECT_EQ(fixed.description(), "fixed:64");
  for (int64_t value : Draw(fixed, 1, 100)) EXPECT_EQ(value, 64);
}

TEST(LengthDistributionTest, UniformCoversItsRangeEvenly) {
  const LengthDistribution uniform = Parsed("uniform:8-12");
  EXPECT_EQ(uniform.min(), 8);
  EXPECT_EQ(uniform.max(), 12);
  std::map<int64_t, int> counts;
  for (int64_t value : Draw(uniform, 3, 50000)) ++counts[value];
  ASSERT_EQ(counts.size(), 5u);
  EXPECT_EQ(counts.begin()->first, 8);
  EXPECT_EQ(counts.rbegin()->first, 12);
  // Each value has probability 1/5: 10000 expected, standard deviation about 90.
  for (const auto& [value, count] : counts) EXPECT_NEAR(count, 10000, 500) << value;
}

TEST(LengthDistributionTest, SameSeedSameLengthsOtherSeedOthers) {
  for (const char* text : {"uniform:1-1000", "skewed", "lognormal:100,1.5,1-4096"}) {
    const LengthDistribution distribution = Parsed(text);
    EXPECT_EQ(Draw(distribution, 11, 1000), Draw(distribution, 11, 1000)) << text;
    EXPECT_NE(Draw(distribution, 11, 1000), Draw(distribution, 12, 1000)) << text;
  }
}

TEST(LengthDistributionTest, SkewedMixHasMedian48AndStaysInItsClip) {
  const LengthDistribution skewed = Parsed("skewed");
  EXPECT_EQ(skewed.min(), 8);
  EXPECT_EQ(skewed.max(), 512);
  // The default-constructed distribution is the same mix.
  EXPECT_EQ(Draw(skewed, 5, 1000), Draw(LengthDistribution(), 5, 1000));

  std::vector<int64_t> values = Draw(skewed, 2024, 100000);
  for (int64_t value : values) {
    ASSERT_GE(value, 8);
    ASSERT_LE(value, 512);
  }
  std::sort(values.begin(), values.end());
  EXPECT_NEAR(values[values.size() / 2], 48, 2);
  // σ = 0.8: the 90th percentile is 48 × e^(0.8 × 1.2816) ≈ 134.
  EXPECT_NEAR(values[values.size() * 9 / 10], 134, 6);
  // Clipped, not redrawn: P(X < 8.5) = Φ(ln(8.5/48) / 0.8) ≈ 1.5% of the draws land on 8 exactly,
  // and P(X > 511.5) = 1 - Φ(ln(511.5/48) / 0.8) ≈ 0.15% on 512.
  const auto at_min = std::count(values.begin(), values.end(), 8);
  const auto at_max = std::count(values.begin(), values.end(), 512);
  EXPECT_NEAR(at_min, 1520, 250);
  EXPECT_NEAR(at_max, 155, 60);
  // Many short, few long.
  const auto short_ones = std::count_if(values.begin(), values.end(), [](int64_t v) { return v <= 64; });
  EXPECT_GT(short_ones, 60000);
}

TEST(LengthDistributionTest, FileValuesAreDrawnUniformly) {
  const std::string path = ::testing::TempDir() + "/loadgen_lengths.txt";
  {
    std::ofstream file(path);
    file << "# lengths seen in production\n8, 16\n\n32 # a long one\n16\n";
  }
  const LengthDistribution from_file = Parsed("file:" + path);
  EXPECT_EQ(from_file.min(), 8);
  EXPECT_EQ(from_file.max(), 32);
  EXPECT_NE(from_file.description().find("4 values"), std::string::npos) << from_file.description();
  std::map<int64_t, int> counts;
  for (int64_t value : Draw(from_file, 9, 40000)) ++counts[value];
  ASSERT_EQ(counts.size(), 3u);
  // 16 appears twice in four values.
  EXPECT_NEAR(counts[8], 10000, 500);
  EXPECT_NEAR(counts[16], 20000, 600);
  EXPECT_NEAR(counts[32], 10000, 500);
  std::remove(path.c_str());
}

TEST(LengthDistributionTest, RejectsBadSpecifications) {
  const std::string bad_file = ::testing::TempDir() + "/loadgen_bad_lengths.txt";
  { std::ofstream(bad_file) << "8 16 x\n"; }
  const std::string empty_file = ::testing::TempDir() + "/loadgen_empty_lengths.txt";
  { std::ofstream(empty_file) << "# nothing\n"; }
  for (const std::string& text : std::vector<std::string>{
           "", "fixed:0", "fixed:-3", "fixed:", "fixed:12x", "uniform:9-3", "uniform:0-4", "uniform:5",
        "uniform:a-b", "lognormal:48,0.8", "lognormal:0,0.8,8-512", "lognormal:48,-1,8-512",
        "lognormal:48,0.8,9-3", "skewed:1", "zipf:1.1", "file:", "file:" + bad_file,
        "file:" + empty_file}) {
    LengthDistribution distribution = Parsed("fixed:5");
    const grpc::Status status = LengthDistribution::Parse(text, &distribution);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "'" << text << "'";
    EXPECT_EQ(distribution.description(), "fixed:5") << "left untouched on error";
  }
  LengthDistribution distribution;
  EXPECT_EQ(LengthDistribution::Parse("file:/nonexistent/lengths", &distribution).error_code(),
            grpc::StatusCode::NOT_FOUND);
  std::remove(bad_file.c_str());
  std::remove(empty_file.c_str());
}

// ---- Poisson arrivals -----------------------------------------------------------------------------

TEST(PoissonArrivalsTest, GapsAreExponentialWithMeanOneOverRate) {
  constexpr double kRate = 250;  // mean gap 4 ms
  constexpr int kArrivals = 100000;
  PoissonArrivals arrivals(kRate, 17);
  std::vector<double> gaps_s;
  int64_t previous = 0;
  for (int i = 0; i < kArrivals; ++i) {
    const int64_t at = arrivals.Next().count();
    ASSERT_GE(at, previous);
    gaps_s.push_back((at - previous) / 1e9);
    previous = at;
  }
  const double mean = std::accumulate(gaps_s.begin(), gaps_s.end(), 0.0) / kArrivals;
  double variance = 0;
  for (double gap : gaps_s) variance += (gap - mean) * (gap - mean);
  variance /= kArrivals - 1;
  // The mean's standard error is 0.3% of 1/R; 1.5% is five of them.
  EXPECT_NEAR(mean, 1 / kRate, 0.015 / kRate);
  // An exponential's standard deviation equals its mean (a fixed-interval schedule would have none).
  EXPECT_NEAR(std::sqrt(variance), mean, 0.03 * mean);
  // P(gap < mean) = 1 - 1/e.
  const auto below = std::count_if(gaps_s.begin(), gaps_s.end(), [&](double g) { return g < mean; });
  EXPECT_NEAR(static_cast<double>(below) / kArrivals, 1 - std::exp(-1.0), 0.01);
  // 100000 arrivals at 250/s take about 400 s.
  EXPECT_NEAR(previous / 1e9, kArrivals / kRate, 0.015 * kArrivals / kRate);
}

TEST(PoissonArrivalsTest, SeededSchedulesRepeat) {
  PoissonArrivals first(1000, 3);
  PoissonArrivals second(1000, 3);
  PoissonArrivals other(1000, 4);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto at = first.Next();
    EXPECT_EQ(at, second.Next());
    differs = differs || at != other.Next();
  }
  EXPECT_TRUE(differs);
}

// ---- CheckAnswer ----------------------------------------------------------------------------------

inference::ModelMetadataResponse EncoderMetadata() {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("encoder");
  auto add = [&metadata](const char* name, std::vector<int64_t> shape) {
    auto* output = metadata.add_outputs();
    output->set_name(name);
    output->set_datatype("FP32");
    for (int64_t dim : shape) output->add_shape(dim);
  };
  add("last_hidden_state", {-1, -1, 8});
  add("pooler_output", {-1, 8});
  return metadata;
}

void AddOutput(inference::ModelInferResponse* response, const std::string& name,
               const std::string& datatype, std::vector<int64_t> shape, size_t bytes) {
  auto* output = response->add_outputs();
  output->set_name(name);
  output->set_datatype(datatype);
  for (int64_t dim : shape) output->add_shape(dim);
  response->add_raw_output_contents(std::string(bytes, '\0'));
}

inference::ModelInferResponse EncoderAnswer(int64_t rows, int64_t length) {
  inference::ModelInferResponse response;
  AddOutput(&response, "last_hidden_state", "FP32", {rows, length, 8},
            static_cast<size_t>(rows * length * 8 * 4));
  AddOutput(&response, "pooler_output", "FP32", {rows, 8}, static_cast<size_t>(rows * 8 * 4));
  return response;
}

TEST(CheckAnswerTest, AcceptsTheRightShapes) {
  EXPECT_TRUE(CheckAnswer(EncoderMetadata(), 3, 17, EncoderAnswer(3, 17)).ok());
}

TEST(CheckAnswerTest, RejectsWrongShapesMissingOutputsAndBadSizes) {
  const auto metadata = EncoderMetadata();
  grpc::Status status = CheckAnswer(metadata, 3, 18, EncoderAnswer(3, 17));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(status.error_message().find("last_hidden_state"), std::string::npos);
  EXPECT_NE(status.error_message().find("[3, 18, 8]"), std::string::npos) << status.error_message();
  EXPECT_EQ(CheckAnswer(metadata, 2, 17, EncoderAnswer(3, 17)).error_code(),
            grpc::StatusCode::INTERNAL);

  inference::ModelInferResponse missing;
  AddOutput(&missing, "last_hidden_state", "FP32", {1, 4, 8}, 1 * 4 * 8 * 4);
  EXPECT_EQ(CheckAnswer(metadata, 1, 4, missing).error_code(), grpc::StatusCode::NOT_FOUND);

  inference::ModelInferResponse short_data;
  AddOutput(&short_data, "last_hidden_state", "FP32", {1, 4, 8}, 1 * 4 * 8 * 4 - 4);
  AddOutput(&short_data, "pooler_output", "FP32", {1, 8}, 8 * 4);
  EXPECT_EQ(CheckAnswer(metadata, 1, 4, short_data).error_code(), grpc::StatusCode::INTERNAL);

  inference::ModelInferResponse wrong_type;
  AddOutput(&wrong_type, "last_hidden_state", "FP64", {1, 4, 8}, 1 * 4 * 8 * 8);
  AddOutput(&wrong_type, "pooler_output", "FP32", {1, 8}, 8 * 4);
  status = CheckAnswer(metadata, 1, 4, wrong_type);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(status.error_message().find("FP64"), std::string::npos) << status.error_message();

  inference::ModelInferResponse wrong_rank;
  AddOutput(&wrong_rank, "last_hidden_state", "FP32", {4, 8}, 4 * 8 * 4);
  AddOutput(&wrong_rank, "pooler_output", "FP32", {1, 8}, 8 * 4);
  EXPECT_EQ(CheckAnswer(metadata, 1, 4, wrong_rank).error_code(), grpc::StatusCode::INTERNAL);
}

TEST(CheckAnswerTest, OnlyTheWantedOutputsAreExpected) {
  const auto metadata = EncoderMetadata();
  inference::ModelInferResponse pooled_only;
  AddOutput(&pooled_only, "pooler_output", "FP32", {2, 8}, 2 * 8 * 4);
  EXPECT_TRUE(CheckAnswer(metadata, 2, 5, pooled_only, {"pooler_output"}).ok());
  // Without the list every declared output is expected; a wanted one still has to be right.
  EXPECT_EQ(CheckAnswer(metadata, 2, 5, pooled_only).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(CheckAnswer(metadata, 3, 5, pooled_only, {"pooler_output"}).error_code(),
            grpc::StatusCode::INTERNAL);
}

// ---- Report ---------------------------------------------------------------------------------------

Report SampleReport() {
  Report report;
  report.address = "127.0.0.1:1234";
  report.model = "encoder";
  report.mode = "closed";
  report.concurrency = 8;
  report.lengths = "uniform:8-64";
  report.rows = 2;
  report.warmup_s = 1;
  report.warmup_requests = 40;
  report.issued = 100;
  report.ok = 97;
  report.errors = {{"DEADLINE_EXCEEDED", 2}, {kBadAnswer, 1}};
  report.error_examples = {{"DEADLINE_EXCEEDED", "Deadline Exceeded"}};
  report.elapsed_s = 2;
  report.requests_per_s = 48.5;
  report.tokens = 6000;
  report.tokens_per_s = 3000;
  LatencyRecorder recorder;
  for (int64_t value = 1; value <= 100; ++value) recorder.Record(milliseconds(value));
  report.latency = Summarize(recorder);
  return report;
}

TEST(ReportTest, JsonHoldsEveryFigure) {
  const auto document = nlohmann::json::parse(ReportToJson(SampleReport()));
  EXPECT_EQ(document["address"], "127.0.0.1:1234");
  EXPECT_EQ(document["model"], "encoder");
  EXPECT_EQ(document["mode"], "closed");
  EXPECT_EQ(document["concurrency"], 8);
  EXPECT_TRUE(document["rate_rps"].is_null());
  EXPECT_EQ(document["lengths"], "uniform:8-64");
  EXPECT_EQ(document["rows"], 2);
  EXPECT_EQ(document["warmup_s"], 1.0);
  EXPECT_EQ(document["warmup_requests"], 40);
  EXPECT_EQ(document["issued"], 100);
  EXPECT_EQ(document["ok"], 97);
  EXPECT_EQ(document["error_count"], 3);
  EXPECT_EQ(document["errors"]["DEADLINE_EXCEEDED"], 2);
  EXPECT_EQ(document["errors"]["BAD_ANSWER"], 1);
  EXPECT_EQ(document["error_examples"]["DEADLINE_EXCEEDED"], "Deadline Exceeded");
  EXPECT_EQ(document["elapsed_s"], 2.0);
  EXPECT_EQ(document["requests_per_s"], 48.5);
  EXPECT_EQ(document["tokens"], 6000);
  EXPECT_EQ(document["tokens_per_s"], 3000.0);
  const auto& latency = document["latency_ms"];
  EXPECT_EQ(latency["count"], 100);
  EXPECT_DOUBLE_EQ(latency["p50"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(latency["p90"].get<double>(), 90);
  EXPECT_DOUBLE_EQ(latency["p99"].get<double>(), 99);
  EXPECT_DOUBLE_EQ(latency["max"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(latency["min"].get<double>(), 1);
  EXPECT_DOUBLE_EQ(latency["mean"].get<double>(), 50.5);
  // A closed loop sends each call when its caller is free: there is no schedule to be late for.
  EXPECT_TRUE(document["send_lag_ms"].is_null());
  // One line when asked.
  EXPECT_EQ(ReportToJson(SampleReport(), -1).find('\n'), std::string::npos);
}

TEST(ReportTest, OpenLoopReportsHowLateItSent) {
  Report report = SampleReport();
  report.mode = "open";
  report.rate_rps = 500;
  LatencyRecorder lags;
  for (int64_t value = 1; value <= 100; ++value) lags.Record(std::chrono::microseconds(10 * value));
  report.send_lag = Summarize(lags);
  const auto document = nlohmann::json::parse(ReportToJson(report));
  EXPECT_DOUBLE_EQ(document["send_lag_ms"]["p50"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(document["send_lag_ms"]["p99"].get<double>(), 0.99);
  EXPECT_DOUBLE_EQ(document["send_lag_ms"]["max"].get<double>(), 1.0);
  EXPECT_NE(FormatReport(report).find("sent late  ms p50 0.500  p99 0.990  max 1.000"), std::string::npos)
      << FormatReport(report);
}

TEST(ReportTest, OpenLoopWithoutAnswersHasNullLatencies) {
  Report report;
  report.mode = "open";
  report.rate_rps = 500;
  report.issued = 4;
  report.errors = {{"UNAVAILABLE", 4}};
  const auto document = nlohmann::json::parse(ReportToJson(report));
  EXPECT_TRUE(document["concurrency"].is_null());
  EXPECT_EQ(document["rate_rps"], 500.0);
  EXPECT_EQ(document["error_count"], 4);
  EXPECT_EQ(document["latency_ms"]["count"], 0);
  for (const char* key : {"min", "mean", "p50", "p90", "p99", "max"}) {
    EXPECT_TRUE(document["latency_ms"][key].is_null()) << key;
  }
  EXPECT_NE(FormatReport(report).find("no successful request"), std::string::npos);
}

TEST(ReportTest, TextNamesThroughputPercentilesAndErrors) {
  const std::string text = FormatReport(SampleReport());
  for (const char* part : {"closed loop, 8 callers", "100 issued, 97 ok, 3 errors", "48.5 requests/s",
                           "3000 tokens/s", "p50 50.00", "p90 90.00", "p99 99.00", "max 100.00",
                           "DEADLINE_EXCEEDED x2: Deadline Exceeded", "BAD_ANSWER x1"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
  }
}

}  // namespace
}  // namespace graphserve::loadgen
