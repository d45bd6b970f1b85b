#include "graphserve/server/config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "fixed_shape_config.h"

namespace graphserve {
namespace {

constexpr const char* kValidConfig = R"pb(
  name: "tiny"
  platform: "pytorch_libtorch"
  max_batch_size: 8
  max_sequence_length: 100
  input { name: "ids" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
  input { name: "mask" data_type: TYPE_INT64 dims: [ -1 ] }
  output { name: "hidden" data_type: TYPE_FP32 dims: [ -1, 8 ] }
  buckets { batch_sizes: [ 4, 1, 2, 2 ] sequence_lengths: [ 64, 16 ] }
  dynamic_batching { max_queue_delay_microseconds: 250 max_queue_size: 7 }
)pb";

config::ModelConfig Parse(const std::string& text) {
  config::ModelConfig config;
  Status status = ParseModelConfig(text, "test", &config);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return config;
}

TEST(ConfigTest, AotInductorPlatformIsServed) {
  config::ModelConfig config = Parse(kValidConfig);
  config.set_platform("torch_aoti");
  ModelSpec spec;
  Status status = ModelSpecFromConfig(config, &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(spec.platform, kPlatformAotInductor);
}

TEST(ConfigTest, UnknownPlatformNamesTheServedOnes) {
  config::ModelConfig config = Parse(kValidConfig);
  config.set_platform("onnxruntime_onnx");
  ModelSpec spec;
  Status status = ModelSpecFromConfig(config, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  for (const char* platform : {"'onnxruntime_onnx'", "'torch_aoti'", "'pytorch_libtorch'"}) {
    EXPECT_NE(status.message().find(platform), std::string::npos) << status.ToString();
  }
}

TEST(ConfigTest, ValidConfigBecomesSpec) {
  ModelSpec spec;
  Status status = ModelSpecFromConfig(Parse(kValidConfig), &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(spec.name, "tiny");
  EXPECT_EQ(spec.platform, kPlatformTorchScript);
  ASSERT_EQ(spec.inputs.size(), 2u);
  EXPECT_EQ(spec.inputs[0].dtype, DataType::kInt64);
  EXPECT_EQ(spec.inputs[0].variable_dim(), 0);
  ASSERT_EQ(spec.outputs.size(), 1u);
  EXPECT_EQ(spec.outputs[0].dims, (std::vector<int64_t>{-1, 8}));
  // Sorted and deduplicated, as given (no default filled in).
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(spec.bucket_lengths, (std::vector<int64_t>{16, 64}));

  const SchedulerOptions options = SchedulerOptionsFromConfig(Parse(kValidConfig));
  EXPECT_EQ(options.max_queue_delay_us, 250);
  EXPECT_EQ(options.max_queue_size, 7);
  EXPECT_EQ(options.policy, BatchingPolicy::kSizeBinned);
}

TEST(ConfigTest, BatchingPolicyFifoIsReadAndUnknownValuesAreRejected) {
  config::ModelConfig config = Parse(kValidConfig);
  config.mutable_dynamic_batching()->set_policy(config::DynamicBatching::FIFO);
  EXPECT_EQ(SchedulerOptionsFromConfig(config).policy, BatchingPolicy::kFifo);
  ModelSpec spec;
  EXPECT_TRUE(ModelSpecFromConfig(config, &spec).ok());

  config.mutable_dynamic_batching()->set_policy(static_cast<config::DynamicBatching::Policy>(7));
  const Status status = ModelSpecFromConfig(config, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("dynamic_batching.policy"), std::string::npos) << status.message();
}

TEST(ConfigTest, MissingGridGetsDefaultCappedByLimits) {
  config::ModelConfig config = Parse(kValidConfig);
  config.clear_buckets();
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.bucket_batch_sizes, DefaultBucketBatchSizes(8));
  EXPECT_EQ(spec.bucket_batch_sizes.back(), 8);
  EXPECT_EQ(spec.bucket_lengths, DefaultBucketLengths(100));
  EXPECT_EQ(spec.bucket_lengths.back(), 100);
}

TEST(ConfigTest, BuiltinEncoderConfigIsValid) {
  ModelSpec spec;
  Status status = ModelSpecFromConfig(BuiltinEncoderConfig(), &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(spec.name, "encoder");
  EXPECT_EQ(spec.platform, kPlatformBuiltinEncoder);
  EXPECT_EQ(spec.max_sequence_length, 512);
  ASSERT_EQ(spec.inputs.size(), 2u);
  EXPECT_EQ(spec.inputs[0].name, "input_ids");
  EXPECT_EQ(spec.inputs[1].name, "attention_mask");
  ASSERT_EQ(spec.outputs.size(), 2u);
  EXPECT_EQ(spec.outputs[0].dims, (std::vector<int64_t>{-1, 256}));
  EXPECT_EQ(spec.outputs[1].dims, (std::vector<int64_t>{256}));
}

// The serving modes deploy/bench/e2e_benchmark.py compares are plain configs of the built-in
// encoder: graphs off with the same grid, one max-size bucket, and no batching at all.
TEST(ConfigTest, ServingModesAreConfigs) {
  auto spec_and_options = [](const std::string& edit, ModelSpec* spec, SchedulerOptions* options) {
    config::ModelConfig config = BuiltinEncoderConfig();
    config::ModelConfig changes;
    ASSERT_TRUE(ParseModelConfig(edit, "edit", &changes).ok());
    config.MergeFrom(changes);
    const Status status = ModelSpecFromConfig(config, spec);
    ASSERT_TRUE(status.ok()) << edit << ": " << status.ToString();
    *options = SchedulerOptionsFromConfig(config);
  };
  ModelSpec grid, eager, single, unbatched;
  SchedulerOptions grid_options, eager_options, single_options, unbatched_options;
  spec_and_options("", &grid, &grid_options);
  spec_and_options("cuda_graphs { disable: true }", &eager, &eager_options);
  spec_and_options("buckets { batch_sizes: [ 32 ] sequence_lengths: [ 512 ] }", &single,
                   &single_options);
  spec_and_options("cuda_graphs { disable: true } dynamic_batching { disable: true }", &unbatched,
                   &unbatched_options);

  EXPECT_FALSE(grid.cuda_graphs_disabled);
  EXPECT_FALSE(grid_options.batching_disabled);
  EXPECT_EQ(grid_options.max_queue_delay_us, 500);
  EXPECT_TRUE(eager.cuda_graphs_disabled);
  EXPECT_EQ(eager.bucket_batch_sizes, grid.bucket_batch_sizes);
  EXPECT_EQ(eager.bucket_lengths, grid.bucket_lengths);
  EXPECT_FALSE(eager_options.batching_disabled);
  EXPECT_EQ(single.bucket_batch_sizes, (std::vector<int64_t>{32}));
  EXPECT_EQ(single.bucket_lengths, (std::vector<int64_t>{512}));
  EXPECT_FALSE(single.cuda_graphs_disabled);
  EXPECT_TRUE(unbatched.cuda_graphs_disabled);
  EXPECT_TRUE(unbatched_options.batching_disabled);
  EXPECT_EQ(unbatched_options.max_queue_delay_us, 0);
  EXPECT_EQ(unbatched_options.max_queue_size, 4096);  // the default still bounds the queue
}

// A config without dynamic_batching gets the queue size a SchedulerOptions has by default: there is
// one default, not one per place that builds options.
TEST(ConfigTest, DefaultQueueSizeIsSchedulerOptionsDefault) {
  config::ModelConfig config = BuiltinEncoderConfig();
  ASSERT_FALSE(config.has_dynamic_batching());
  EXPECT_EQ(SchedulerOptionsFromConfig(config).max_queue_size, SchedulerOptions{}.max_queue_size);
  EXPECT_EQ(SchedulerOptions{}.max_queue_size, 4096);  // what README.md documents
}

struct BadConfigCase {
  std::string edit;            // text appended to (and overriding) the valid config
  std::string expected_field;  // must appear in the error message
};

class BadConfigTest : public testing::TestWithParam<BadConfigCase> {};

TEST_P(BadConfigTest, NamesTheField) {
  config::ModelConfig config = Parse(kValidConfig);
  config::ModelConfig edit;
  ASSERT_TRUE(ParseModelConfig(GetParam().edit, "edit", &edit).ok());
  config.MergeFrom(edit);
  ModelSpec spec;
  Status status = ModelSpecFromConfig(config, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(GetParam().expected_field), std::string::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadConfigTest,
    testing::Values(BadConfigCase{"platform: \"onnx\"", "platform"},
                    BadConfigCase{"max_batch_size: -1", "max_batch_size"},
                    BadConfigCase{"max_sequence_length: -5", "max_sequence_length"},
                    BadConfigCase{"input { name: \"x\" data_type: TYPE_FP32 dims: [ -1, -1 ] }", "input[2].dims"},
                    BadConfigCase{"input { name: \"x\" dims: [ -1 ] }", "input[2].data_type"},
                    BadConfigCase{"input { name: \"ids\" data_type: TYPE_INT64 dims: [ -1 ] }", "appears twice"},
                    BadConfigCase{"output { name: \"y\" data_type: TYPE_FP32 dims: [ 0 ] }", "output[1].dims"},
                    BadConfigCase{"buckets { batch_sizes: [ 16 ] }", "buckets.batch_sizes"},
                    BadConfigCase{"buckets { sequence_lengths: [ 101 ] }", "buckets.sequence_lengths"},
                    BadConfigCase{"cuda_graphs { verify_rtol: -1 }", "cuda_graphs.verify_rtol"},
                    BadConfigCase{"dynamic_batching { max_queue_delay_microseconds: 60000000 }",
                                  "max_queue_delay"},
                    // kValidConfig's 250 µs delay would be ignored without batching: refused.
                    BadConfigCase{"dynamic_batching { disable: true }",
                                  "max_queue_delay_microseconds: 250 with disable"}));

TEST(ConfigTest, FixedShapeModelGetsABatchOnlyGrid) {
  ModelSpec spec;
  Status status = ModelSpecFromConfig(fixed_shape_test::CnnConfig(), &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_FALSE(spec.has_sequence_length());
  EXPECT_EQ(spec.inputs[0].dims, (std::vector<int64_t>{3, 224, 224}));
  EXPECT_EQ(spec.max_sequence_length, kFixedShapeLength);
  EXPECT_EQ(spec.bucket_lengths, (std::vector<int64_t>{kFixedShapeLength}));
  EXPECT_EQ(spec.bucket_batch_sizes, DefaultBucketBatchSizes(8));
  EXPECT_EQ(spec.BucketFor(3, kFixedShapeLength), (BucketShape{4, kFixedShapeLength}));
  EXPECT_EQ(spec.BucketLabel(BucketShape{4, kFixedShapeLength}), "4x-");

  status = ModelSpecFromConfig(fixed_shape_test::CnnConfig("buckets { batch_sizes: [ 8, 2 ] }"), &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(spec.bucket_lengths, (std::vector<int64_t>{kFixedShapeLength}));
}

TEST(ConfigTest, SequenceModelStillNeedsMaxSequenceLength) {
  config::ModelConfig config = Parse(kValidConfig);
  config.clear_max_sequence_length();
  ModelSpec spec;
  const Status status = ModelSpecFromConfig(config, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("max_sequence_length: must be at least 1"), std::string::npos)
      << status.message();
  EXPECT_EQ(spec.BucketLabel(BucketShape{4, 16}), "4x16");
}

class FixedShapeBadConfigTest : public testing::TestWithParam<BadConfigCase> {};

TEST_P(FixedShapeBadConfigTest, NamesTheField) {
  ModelSpec spec;
  const Status status = ModelSpecFromConfig(fixed_shape_test::CnnConfig(GetParam().edit), &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(GetParam().expected_field), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("model 'cnn'"), std::string::npos) << status.message();
}

// A length setting on a model without a length is most likely a sequence model missing its -1.
INSTANTIATE_TEST_SUITE_P(
    Fields, FixedShapeBadConfigTest,
    testing::Values(BadConfigCase{"max_sequence_length: 224", "max_sequence_length: no input has a -1"},
                    BadConfigCase{"buckets { sequence_lengths: [ 1 ] }",
                                  "buckets.sequence_lengths: no input has a -1"},
                    BadConfigCase{"output { name: \"map\" data_type: TYPE_FP32 dims: [ -1, 4 ] }",
                                  "output[1].dims: -1 in 'map'"}));

TEST(ConfigTest, ParseErrorNamesLine) {
  config::ModelConfig config;
  Status status = ParseModelConfig("name: \"x\"\nmax_batch_size: \"many\"\n", "cfg.pbtxt", &config);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cfg.pbtxt"), std::string::npos);
  EXPECT_NE(status.message().find("line 2"), std::string::npos) << status.message();
}

TEST(ConfigTest, LoadFromFileAndMissingFile) {
  // POSIX, not std::filesystem: see ListSubdirectories in model_repository.cpp.
  char dir[] = "/tmp/graphserve_config_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/config.pbtxt";
  std::ofstream(path) << kValidConfig;
  config::ModelConfig config;
  ASSERT_TRUE(LoadModelConfig(path, &config).ok());
  EXPECT_EQ(config.name(), "tiny");
  EXPECT_EQ(LoadModelConfig(std::string(dir) + "/absent.pbtxt", &config).code(), StatusCode::kNotFound);
  unlink(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace graphserve
