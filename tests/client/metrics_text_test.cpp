// The Prometheus text reader of graphserve-cli plan-grid: the families it reads, label escapes,
// special values, histogram buckets and what it refuses.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graphserve/client/metrics_text.h"

namespace graphserve {
namespace {

MetricsExposition Parse(const std::string& text) {
  MetricsExposition exposition;
  std::string error;
  EXPECT_TRUE(ParseMetricsText(text, &exposition, &error)) << error;
  return exposition;
}

// What graphserve's /metrics writes for the families plan-grid reads (prometheus-cpp's serializer).
constexpr const char* kScrape = R"(# HELP graphserve_request_length Sequence length of each request
# TYPE graphserve_request_length histogram
graphserve_request_length_count{model="encoder"} 6
graphserve_request_length_sum{model="encoder"} 150
graphserve_request_length_bucket{model="encoder",le="8"} 1
graphserve_request_length_bucket{model="encoder",le="16"} 4
graphserve_request_length_bucket{model="encoder",le="+Inf"} 6
graphserve_request_length_bucket{model="other",le="8"} 9
graphserve_request_length_bucket{model="other",le="+Inf"} 9
# HELP graphserve_bucket_execution_seconds Each bucket's execution time
# TYPE graphserve_bucket_execution_seconds gauge
graphserve_bucket_execution_seconds{model="encoder",device="cpu",bucket="32x128"} 0.0125
graphserve_bucket_execution_seconds{model="encoder",device="cpu",bucket="1x16"} 1.5e-05
)";

TEST(MetricsTextTest, ReadsTypesSamplesAndLabels) {
  const MetricsExposition exposition = Parse(kScrape);
  EXPECT_EQ(exposition.types.at("graphserve_request_length"), "histogram");
  EXPECT_EQ(exposition.types.at("graphserve_bucket_execution_seconds"), "gauge");
  ASSERT_EQ(exposition.samples.size(), 9u);
  const std::vector<MetricSample> times = exposition.Find("graphserve_bucket_execution_seconds",
                                                          {{"model", "encoder"}, {"bucket", "32x128"}});
  ASSERT_EQ(times.size(), 1u);
  EXPECT_EQ(times[0].labels.at("device"), "cpu");
  EXPECT_DOUBLE_EQ(times[0].value, 0.0125);
  EXPECT_DOUBLE_EQ(exposition.Find("graphserve_bucket_execution_seconds", {{"bucket", "1x16"}})[0].value,
                   1.5e-05);
  EXPECT_EQ(exposition.Find("graphserve_request_length_count").size(), 1u);
  EXPECT_TRUE(exposition.Find("graphserve_request_length_bucket", {{"model", "nobody"}}).empty());
}

TEST(MetricsTextTest, HistogramBucketsAreOneSeriesSortedByLe) {
  const MetricsExposition exposition = Parse(kScrape);
  std::vector<HistogramBucket> buckets;
  std::string error;
  ASSERT_TRUE(HistogramBuckets(exposition, "graphserve_request_length", {{"model", "encoder"}}, &buckets, &error))
      << error;
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].le, 8);
  EXPECT_EQ(buckets[0].count, 1);
  EXPECT_EQ(buckets[1].le, 16);
  EXPECT_EQ(buckets[1].count, 4);
  EXPECT_TRUE(std::isinf(buckets[2].le));
  EXPECT_EQ(buckets[2].count, 6);

  // Without the model the labels pick two histograms: refused, not merged.
  EXPECT_FALSE(HistogramBuckets(exposition, "graphserve_request_length", {}, &buckets, &error));
  EXPECT_NE(error.find("do not pick one histogram"), std::string::npos) << error;
}

TEST(MetricsTextTest, LabelValuesKeepTheirEscapesAndPunctuation) {
  const MetricsExposition exposition =
      Parse("m{a=\"back\\\\slash\",b=\"say \\\"hi\\\"\",c=\"line\\nnext\",d=\"x,y=}{\"} 1\n"
            "m { e = \"spaced\" , } 2\n");
  ASSERT_EQ(exposition.samples.size(), 2u);
  const MetricLabels& labels = exposition.samples[0].labels;
  EXPECT_EQ(labels.at("a"), "back\\slash");
  EXPECT_EQ(labels.at("b"), "say \"hi\"");
  EXPECT_EQ(labels.at("c"), "line\nnext");
  EXPECT_EQ(labels.at("d"), "x,y=}{");
  EXPECT_EQ(exposition.samples[1].labels.at("e"), "spaced");
  EXPECT_EQ(exposition.samples[1].value, 2);
}

TEST(MetricsTextTest, SpecialValuesTimestampsAndLineEnds) {
  const MetricsExposition exposition =
      Parse("a +Inf\r\nb -Inf\nc NaN\nd 1.5e3 1700000000000\n\n   # a comment\ne{} -0.25\n");
  ASSERT_EQ(exposition.samples.size(), 5u);
  EXPECT_TRUE(std::isinf(exposition.samples[0].value) && exposition.samples[0].value > 0);
  EXPECT_TRUE(std::isinf(exposition.samples[1].value) && exposition.samples[1].value < 0);
  EXPECT_TRUE(std::isnan(exposition.samples[2].value));
  EXPECT_EQ(exposition.samples[3].value, 1500);
  EXPECT_EQ(exposition.samples[4].name, "e");
  EXPECT_EQ(exposition.samples[4].value, -0.25);
}

TEST(MetricsTextTest, MalformedLinesAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ok 1\nm{a=\"open} 1\n", "line 2: unterminated value of label a"},
      {"m{a=1} 1\n", "line 1: expected =\"...\" after label a"},
      {"m{a=\"\\t\"} 1\n", "line 1: unknown escape \\t in label a"},
      {"m{a=\"1\",a=\"2\"} 1\n", "line 1: label a twice"},
      {"m\n", "line 1: expected a value after m"},
      {"m one\n", "line 1: expected a value after m"},
      {"m 1 2 3\n", "line 1: unexpected text after the timestamp of m"},
      {"m 1 later\n", "line 1: unexpected text after the value of m"},
      {"{a=\"1\"} 1\n", "line 1: expected a metric name"},
  };
  for (const auto& [text, message] : cases) {
    MetricsExposition exposition;
    std::string error;
    EXPECT_FALSE(ParseMetricsText(text, &exposition, &error)) << text;
    EXPECT_EQ(error, message) << text;
  }
}

TEST(MetricsTextTest, HistogramBucketWithoutANumericLeIsRefused) {
  const MetricsExposition exposition = Parse("h_bucket{le=\"many\"} 1\n");
  std::vector<HistogramBucket> buckets;
  std::string error;
  EXPECT_FALSE(HistogramBuckets(exposition, "h", {}, &buckets, &error));
  EXPECT_NE(error.find("numeric le"), std::string::npos) << error;
}

}  // namespace
}  // namespace graphserve
