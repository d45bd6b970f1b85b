// What plan-grid reads from a server, on synthetic answers: the grid from a ModelConfig (its
// parameters, or an older server's fields with a newer one's max_batch_tokens), one model's series
// from a scrape, the default metrics URL.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graphserve/client/plan_inputs.h"

namespace graphserve {
namespace {

inference::ModelConfig SequenceModelConfig() {
  inference::ModelConfig config;
  config.set_name("encoder");
  config.set_max_batch_size(32);
  config.set_max_sequence_length(512);
  for (int64_t size : {8, 1, 32}) config.mutable_buckets()->add_batch_sizes(size);
  for (int64_t length : {16, 512, 128}) config.mutable_buckets()->add_sequence_lengths(length);
  return config;
}

// As graphserve answers since its config follows Triton's schema: the grid in parameters.
TEST(PlanInputsTest, GridAndLimitsFromTheEffectiveConfigsParameters) {
  inference::ModelConfig config;
  config.set_name("encoder");
  config.set_max_batch_size(32);
  auto& parameters = *config.mutable_parameters();
  parameters["max_sequence_length"].set_string_value("512");
  parameters["bucket_batch_sizes"].set_string_value("8,1,32,64");
  parameters["bucket_sequence_lengths"].set_string_value("16,512,128");
  parameters["max_batch_tokens"].set_string_value("4096");
  planner::ModelLimits limits;
  planner::BucketGrid grid;
  std::string error;
  ASSERT_TRUE(GridFromConfig(config, &limits, &grid, &error)) << error;
  EXPECT_EQ(limits.max_batch_size, 32);
  EXPECT_EQ(limits.max_sequence_length, 512);
  EXPECT_EQ(grid.batch_sizes, (std::vector<int64_t>{1, 8, 32, 64}));
  EXPECT_EQ(grid.sequence_lengths, (std::vector<int64_t>{16, 128, 512}));
  EXPECT_EQ(grid.max_batch_tokens, 4096);

  parameters.erase("max_batch_tokens");
  ASSERT_TRUE(GridFromConfig(config, &limits, &grid, &error)) << error;
  EXPECT_EQ(grid.max_batch_tokens, 0);

  parameters["bucket_sequence_lengths"].set_string_value("16,x");
  EXPECT_FALSE(GridFromConfig(config, &limits, &grid, &error));
  EXPECT_NE(error.find("not lists of integers"), std::string::npos) << error;

  // A fixed-shape model: batch sizes only.
  parameters.erase("bucket_sequence_lengths");
  parameters.erase("max_sequence_length");
  EXPECT_FALSE(GridFromConfig(config, &limits, &grid, &error));
  EXPECT_NE(error.find("no variable dimension"), std::string::npos) << error;
}

// An older server's answer: graphserve's own fields.
TEST(PlanInputsTest, GridAndLimitsFromTheEffectiveConfig) {
  planner::ModelLimits limits;
  planner::BucketGrid grid;
  std::string error;
  ASSERT_TRUE(GridFromConfig(SequenceModelConfig(), &limits, &grid, &error)) << error;
  EXPECT_EQ(limits.max_batch_size, 32);
  EXPECT_EQ(limits.max_sequence_length, 512);
  EXPECT_EQ(grid.batch_sizes, (std::vector<int64_t>{1, 8, 32}));
  EXPECT_EQ(grid.sequence_lengths, (std::vector<int64_t>{16, 128, 512}));
  EXPECT_EQ(grid.max_batch_tokens, 0);
}

TEST(PlanInputsTest, MaxBatchTokensOfANewerServerArrivesAsFieldThree) {
  inference::ModelConfig config = SequenceModelConfig();
  // What a server whose BucketGrid has max_batch_tokens = 3 sends, decoded by this client's schema.
  config.mutable_buckets()->GetReflection()->MutableUnknownFields(config.mutable_buckets())->AddVarint(3, 8192);
  inference::ModelConfig decoded;
  ASSERT_TRUE(decoded.ParseFromString(config.SerializeAsString()));
  planner::ModelLimits limits;
  planner::BucketGrid grid;
  std::string error;
  ASSERT_TRUE(GridFromConfig(decoded, &limits, &grid, &error)) << error;
  EXPECT_EQ(grid.max_batch_tokens, 8192);
}

TEST(PlanInputsTest, AFixedShapeModelHasNoLengthsToPlan) {
  inference::ModelConfig config;
  config.set_name("resnet");
  config.set_max_batch_size(8);
  config.mutable_buckets()->add_batch_sizes(8);
  planner::ModelLimits limits;
  planner::BucketGrid grid;
  std::string error;
  EXPECT_FALSE(GridFromConfig(config, &limits, &grid, &error));
  EXPECT_NE(error.find("no variable dimension"), std::string::npos) << error;
}

constexpr const char* kScrape = R"(# TYPE graphserve_bucket_execution_seconds gauge
graphserve_bucket_execution_seconds{model="encoder",device="cpu",bucket="1x16"} 0.001
graphserve_bucket_execution_seconds{model="encoder",device="cuda:0",bucket="1x16"} 0.0001
graphserve_bucket_execution_seconds{model="encoder",device="cuda:0",bucket="32x512"} 0.004
graphserve_bucket_execution_seconds{model="resnet",device="cuda:0",bucket="8x-"} 0.002
graphserve_bucket_execution_seconds{model="resnet2",device="cuda:0",bucket="8x-"} 0.002
# TYPE graphserve_graph_pool_bytes gauge
graphserve_graph_pool_bytes{model="encoder",device="cpu"} 0
graphserve_graph_pool_bytes{model="encoder",device="cuda:0"} 1048576
# TYPE graphserve_request_length histogram
graphserve_request_length_bucket{model="encoder",le="16"} 3
graphserve_request_length_bucket{model="encoder",le="+Inf"} 4
graphserve_request_length_bucket{model="encoder2",le="+Inf"} 1
# TYPE graphserve_request_rows histogram
graphserve_request_rows_bucket{model="encoder",le="1"} 4
graphserve_request_rows_bucket{model="encoder",le="+Inf"} 4
)";

MetricsExposition Scrape() {
  MetricsExposition exposition;
  std::string error;
  EXPECT_TRUE(ParseMetricsText(kScrape, &exposition, &error)) << error;
  return exposition;
}

TEST(PlanInputsTest, OneModelsSeriesOnTheCudaDeviceByDefault) {
  ScrapedModel scraped;
  std::string error;
  ASSERT_TRUE(ReadScrapedModel(Scrape(), "encoder", "", &scraped, &error)) << error;
  EXPECT_EQ(scraped.device, "cuda:0");
  EXPECT_EQ(scraped.devices, (std::vector<std::string>{"cpu", "cuda:0"}));
  ASSERT_EQ(scraped.measured.size(), 2u);
  EXPECT_EQ(scraped.measured[0].shape, (planner::Shape{1, 16}));
  EXPECT_EQ(scraped.measured[0].seconds, 0.0001);
  EXPECT_EQ(scraped.measured[1].shape, (planner::Shape{32, 512}));
  EXPECT_EQ(scraped.graph_pool_bytes, 1048576);
  ASSERT_EQ(scraped.lengths.size(), 2u);
  EXPECT_EQ(scraped.lengths[1].count, 4);
  ASSERT_EQ(scraped.rows.size(), 2u);

  ASSERT_TRUE(ReadScrapedModel(Scrape(), "encoder", "cpu", &scraped, &error)) << error;
  EXPECT_EQ(scraped.device, "cpu");
  ASSERT_EQ(scraped.measured.size(), 1u);
  EXPECT_EQ(scraped.measured[0].seconds, 0.001);
  EXPECT_EQ(scraped.graph_pool_bytes, 0);
}

TEST(PlanInputsTest, AModelWithoutBucketTimesIsNamed) {
  ScrapedModel scraped;
  std::string error;
  EXPECT_FALSE(ReadScrapedModel(Scrape(), "missing", "", &scraped, &error));
  EXPECT_NE(error.find("no bucket times"), std::string::npos) << error;
  EXPECT_NE(error.find("'missing'"), std::string::npos) << error;
  EXPECT_FALSE(ReadScrapedModel(Scrape(), "encoder", "cuda:7", &scraped, &error));
  EXPECT_NE(error.find("cuda:7"), std::string::npos) << error;
}

TEST(PlanInputsTest, DefaultMetricsUrlIsTheGrpcHostOnPort8002) {
  EXPECT_EQ(DefaultMetricsUrl("localhost:8001", false), "http://localhost:8002/metrics");
  EXPECT_EQ(DefaultMetricsUrl("[::1]:9000", true), "https://[::1]:8002/metrics");
  EXPECT_EQ(DefaultMetricsUrl("unix:/run/graphserve.sock", false), "");
}

}  // namespace
}  // namespace graphserve
