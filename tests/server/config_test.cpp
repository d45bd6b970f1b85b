#include "graphserve/server/config/config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "fixed_shape_config.h"
#include "graphserve/server/config/triton_config.h"

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

inference::ModelConfig Parse(const std::string& text) {
  inference::ModelConfig config;
  Status status = ParseModelConfig(text, "test", &config);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return config;
}

TEST(ConfigTest, AotInductorPlatformIsServed) {
  inference::ModelConfig config = Parse(kValidConfig);
  config.set_platform("torch_aoti");
  ModelSpec spec;
  Status status = ModelSpecFromConfig(config, &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(spec.platform, kPlatformAotInductor);
}

TEST(ConfigTest, UnknownPlatformNamesTheServedOnes) {
  inference::ModelConfig config = Parse(kValidConfig);
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
  // Sorted and deduplicated, as given (no default filled in), and no token budget with them.
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(spec.bucket_lengths, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(spec.max_batch_tokens, 0);

  const SchedulerOptions options = SchedulerOptionsFromConfig(Parse(kValidConfig));
  EXPECT_EQ(options.max_queue_delay_us, 250);
  EXPECT_EQ(options.max_queue_size, 7);
  EXPECT_EQ(options.policy, BatchingPolicy::kSizeBinned);
}

// Padding the length is allowed only where the config names the input that masks it.
TEST(ConfigTest, SequenceMaskInputDecidesWhetherLengthsArePadded) {
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(Parse(kValidConfig), &spec).ok());
  EXPECT_TRUE(spec.sequence_mask_input.empty());
  EXPECT_FALSE(spec.masks_padding());
  EXPECT_EQ(spec.BucketFor(1, 10), (BucketShape{1, 10}));  // exact: 10 is no bucket length
  EXPECT_EQ(spec.BucketFor(3, 16), (BucketShape{4, 16}));  // a bucket length: rows padded only

  inference::ModelConfig config = Parse(kValidConfig);
  config.set_sequence_mask_input("mask");
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.sequence_mask_input, "mask");
  EXPECT_TRUE(spec.masks_padding());
  EXPECT_EQ(spec.BucketFor(1, 10), (BucketShape{1, 16}));
}

TEST(ConfigTest, SequenceMaskInputMustBeAVaryingInputPaddedWithZero) {
  struct Case {
    const char* mask;
    const char* edit;  // appended to kValidConfig
    std::vector<std::string> mentions;
  };
  const Case cases[] = {
      {"segments", "", {"sequence_mask_input", "'segments'", "not one of the model's inputs"}},
      {"scale", "input { name: \"scale\" data_type: TYPE_FP32 dims: [ 1 ] }",
       {"sequence_mask_input", "'scale'", "input[2]", "no -1 dimension"}},
      {"flags", "input { name: \"flags\" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 1 }",
       {"input[2].pad_value", "'flags'", "0"}},
  };
  for (const Case& c : cases) {
    inference::ModelConfig config = Parse(std::string(kValidConfig) + c.edit);
    config.set_sequence_mask_input(c.mask);
    ModelSpec spec;
    const Status status = ModelSpecFromConfig(config, &spec);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.mask;
    for (const std::string& mention : c.mentions) {
      EXPECT_NE(status.message().find(mention), std::string::npos) << status.ToString();
    }
  }
  // A fixed-shape model pads no length: naming a mask there is a mistake.
  ModelSpec spec;
  const Status status =
      ModelSpecFromConfig(fixed_shape_test::CnnConfig("sequence_mask_input: \"image\""), &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("sequence_mask_input: no input has a -1 dimension"), std::string::npos)
      << status.ToString();
}

TEST(ConfigTest, TheBuiltInEncoderMasksWithItsAttentionMask) {
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(BuiltinEncoderConfig(), &spec).ok());
  EXPECT_EQ(spec.sequence_mask_input, "attention_mask");
  inference::ModelConfig config = BuiltinEncoderConfig();
  config.clear_sequence_mask_input();  // a user's config for the built-in platform may leave it out
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.sequence_mask_input, "attention_mask");
}

TEST(ConfigTest, PriorityLevelsAreReadAndChecked) {
  inference::ModelConfig config = Parse(kValidConfig);
  config.mutable_dynamic_batching()->set_priority_levels(3);
  config.mutable_dynamic_batching()->set_default_priority_level(2);
  SchedulerOptions options = SchedulerOptionsFromConfig(config);
  EXPECT_EQ(options.priority_levels, 3);
  EXPECT_EQ(options.default_priority_level, 2);
  EXPECT_TRUE(options.Validate().ok());
  config.mutable_dynamic_batching()->set_default_priority_level(0);
  const Status status = SchedulerOptionsFromConfig(config).Validate();
  EXPECT_NE(status.message().find("dynamic_batching.default_priority_level: 0 must be in [1, priority_levels 3]"),
            std::string::npos)
      << status.ToString();
}

TEST(ConfigTest, ValueBoundsAreReadAndContradictionsRefused) {
  inference::ModelConfig config = Parse(kValidConfig);
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_TRUE(spec.input_ranges.empty());

  config.mutable_input(0)->set_min_value(0);
  config.mutable_input(0)->set_max_value(30521);
  Status status = ModelSpecFromConfig(config, &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(spec.input_ranges.size(), 2u);
  EXPECT_EQ(spec.input_ranges[0].min, 0.0);
  EXPECT_EQ(spec.input_ranges[0].max, 30521.0);
  EXPECT_FALSE(spec.input_ranges[1].min.has_value());
  EXPECT_FALSE(spec.input_ranges[1].max.has_value());

  inference::ModelConfig inverted = config;
  inverted.mutable_input(0)->set_min_value(40000);
  status = ModelSpecFromConfig(inverted, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("input[0]: min_value 40000 is above max_value 30521"), std::string::npos)
      << status.message();

  inference::ModelConfig pad_outside = config;
  pad_outside.mutable_input(0)->set_min_value(1);
  status = ModelSpecFromConfig(pad_outside, &spec);
  EXPECT_NE(status.message().find("input[0]: pad_value 0 is outside"), std::string::npos) << status.message();

  inference::ModelConfig half = config;
  half.mutable_input(0)->set_data_type(inference::TYPE_FP16);
  status = ModelSpecFromConfig(half, &spec);
  EXPECT_NE(status.message().find("not supported for FP16 inputs"), std::string::npos) << status.message();
}

TEST(ConfigTest, BatchingPolicyFifoIsReadAndUnknownValuesAreRejected) {
  inference::ModelConfig config = Parse(kValidConfig);
  config.mutable_dynamic_batching()->set_policy(inference::ModelDynamicBatching::FIFO);
  EXPECT_EQ(SchedulerOptionsFromConfig(config).policy, BatchingPolicy::kFifo);
  ModelSpec spec;
  EXPECT_TRUE(ModelSpecFromConfig(config, &spec).ok());

  config.mutable_dynamic_batching()->set_policy(static_cast<inference::ModelDynamicBatching::Policy>(7));
  const Status status = ModelSpecFromConfig(config, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("dynamic_batching.policy"), std::string::npos) << status.message();
}

TEST(ConfigTest, MissingGridGetsDefaultCappedByLimits) {
  inference::ModelConfig config = Parse(kValidConfig);
  config.clear_buckets();
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.bucket_lengths, DefaultBucketLengths(100));
  EXPECT_EQ(spec.bucket_lengths.back(), 100);
  // Rows a request may carry at every length, and short batches up to the default token budget.
  EXPECT_EQ(spec.max_batch_tokens, kDefaultMaxBatchTokens);
  EXPECT_EQ(spec.bucket_batch_sizes,
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512}));
  EXPECT_EQ(spec.LargestBatchFor(16), 512);
  EXPECT_EQ(spec.LargestBatchFor(100), 128);
  EXPECT_EQ(spec.BucketFor(8, 100), (BucketShape{8, 100}));
  EXPECT_TRUE(spec.IsOversize(200, 100));

  // An explicit 0 keeps batches within max_batch_size: the grid of old.
  config.mutable_buckets()->set_max_batch_tokens(0);
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.max_batch_tokens, 0);
  EXPECT_EQ(spec.bucket_batch_sizes, DefaultBucketBatchSizes(8));
  EXPECT_EQ(spec.bucket_batch_sizes.back(), 8);

  // A budget of one's own: the default sizes that fit it at the shortest length.
  config.mutable_buckets()->set_max_batch_tokens(1024);
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.bucket_batch_sizes,
            (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}));
  EXPECT_EQ(spec.LargestBatchFor(100), 8);
}

TEST(ConfigTest, BatchSizesBeyondMaxBatchSizeNeedATokenBudget) {
  inference::ModelConfig config = Parse(kValidConfig);
  config.mutable_buckets()->clear_batch_sizes();
  for (int64_t size : {1, 2, 4, 8, 16, 32}) config.mutable_buckets()->add_batch_sizes(size);
  ModelSpec spec;
  Status status = ModelSpecFromConfig(config, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("buckets.batch_sizes: 16 is outside [1, 8]"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("need buckets.max_batch_tokens"), std::string::npos)
      << status.message();

  // Lengths 16 and 64: 32 rows fit 512 tokens at 16 only.
  config.mutable_buckets()->set_max_batch_tokens(512);
  status = ModelSpecFromConfig(config, &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(spec.max_batch_tokens, 512);
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(spec.Buckets().size(), 6u + 4u);
  EXPECT_EQ(spec.BucketFor(20, 16), (BucketShape{32, 16}));
  EXPECT_TRUE(spec.IsOversize(9, 64));
  EXPECT_EQ(spec.BucketFor(8, 64), (BucketShape{8, 64}));

  // A size that fits the budget at no length is refused, naming the field and the budget.
  config.mutable_buckets()->add_batch_sizes(64);
  status = ModelSpecFromConfig(config, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("buckets.batch_sizes: 64 is outside [1, 32]"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("buckets.max_batch_tokens 512"), std::string::npos)
      << status.message();
}

TEST(ConfigTest, BuiltinEncoderGetsTheStaircaseGrid) {
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(BuiltinEncoderConfig(), &spec).ok());
  EXPECT_EQ(spec.max_batch_size, 32);
  EXPECT_EQ(spec.max_batch_tokens, 16384);
  EXPECT_EQ(spec.Buckets().size(), 284u);  // 200 with batch sizes up to 32 at each of 20 lengths
  EXPECT_EQ(spec.LargestBatchFor(16), 512);
  EXPECT_EQ(spec.LargestBatchFor(64), 256);
  EXPECT_EQ(spec.LargestBatchFor(512), 32);
  EXPECT_EQ(spec.LargestBucket().batch * spec.LargestBucket().length, 16384);
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
    inference::ModelConfig config = BuiltinEncoderConfig();
    inference::ModelConfig changes;
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
  inference::ModelConfig config = BuiltinEncoderConfig();
  ASSERT_FALSE(config.has_dynamic_batching());
  EXPECT_EQ(SchedulerOptionsFromConfig(config).max_queue_size, SchedulerOptions{}.max_queue_size);
  EXPECT_EQ(SchedulerOptions{}.max_queue_size, 4096);  // what docs/configuration.md documents
}

struct BadConfigCase {
  std::string edit;            // text appended to (and overriding) the valid config
  std::string expected_field;  // must appear in the error message
};

// Names each case's test (ctest lists them) by the field it names, not by its bytes.
void PrintTo(const BadConfigCase& bad, std::ostream* out) { *out << bad.expected_field; }

class BadConfigTest : public testing::TestWithParam<BadConfigCase> {};

// `base` with the case's edit merged over it must be refused, naming the case's field.
void ExpectRefusedNamingTheField(const char* base, const BadConfigCase& bad) {
  inference::ModelConfig config = Parse(base);
  inference::ModelConfig edit;
  ASSERT_TRUE(ParseModelConfig(bad.edit, "edit", &edit).ok());
  config.MergeFrom(edit);
  ModelSpec spec;
  Status status = ModelSpecFromConfig(config, &spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(bad.expected_field), std::string::npos) << status.message();
}

TEST_P(BadConfigTest, NamesTheField) { ExpectRefusedNamingTheField(kValidConfig, GetParam()); }

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
                    BadConfigCase{"buckets { max_batch_tokens: -1 }",
                                  "buckets.max_batch_tokens: must not be negative"},
                    BadConfigCase{"buckets { batch_sizes: [ 128 ] max_batch_tokens: 1024 }",
                                  "buckets.batch_sizes: 128 is outside [1, 64]"},
                    BadConfigCase{"cuda_graphs { verify_rtol: -1 }", "cuda_graphs.verify_rtol"},
                    // Element values of the input's type, finite; enum numbers the schema names.
                    BadConfigCase{"input { name: \"x\" data_type: TYPE_UINT8 dims: [ -1 ] pad_value: 300 }",
                                  "input[2].pad_value: 300 is not a UINT8 value"},
                    BadConfigCase{"input { name: \"x\" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0.5 }",
                                  "input[2].pad_value: 0.5 is not a INT64 value"},
                    BadConfigCase{"input { name: \"x\" data_type: TYPE_INT32 dims: [ -1 ] max_value: nan }",
                                  "input[2].max_value: nan is not a finite number"},
                    BadConfigCase{"input { name: \"x\" data_type: TYPE_FP16 dims: [ -1 ] pad_value: 1e6 }",
                                  "input[2].pad_value: 1e+06 is not a FP16 value"},
                    BadConfigCase{"instance_group { kind: 9 }", "instance_group[0].kind: unknown value 9"},
                    BadConfigCase{"dynamic_batching { default_queue_policy { timeout_action: 5 } }",
                                  "dynamic_batching.default_queue_policy.timeout_action: unknown value 5"},
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
  EXPECT_EQ(spec.max_batch_tokens, 0);  // no length, no token budget: batches stay within 8 rows
  EXPECT_EQ(spec.BucketFor(5, kFixedShapeLength), (BucketShape{6, kFixedShapeLength}));
  EXPECT_EQ(spec.BucketLabel(BucketShape{4, kFixedShapeLength}), "4x-");

  status = ModelSpecFromConfig(fixed_shape_test::CnnConfig("buckets { batch_sizes: [ 8, 2 ] }"), &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(spec.bucket_lengths, (std::vector<int64_t>{kFixedShapeLength}));
}

TEST(ConfigTest, SequenceModelStillNeedsMaxSequenceLength) {
  inference::ModelConfig config = Parse(kValidConfig);
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
                    BadConfigCase{"buckets { max_batch_tokens: 64 }",
                                  "buckets.max_batch_tokens: no input has a -1"},
                    BadConfigCase{"buckets { max_batch_tokens: 0 }",
                                  "buckets.max_batch_tokens: no input has a -1"},
                    BadConfigCase{"output { name: \"map\" data_type: TYPE_FP32 dims: [ -1, 4 ] }",
                                  "output[1].dims: -1 in 'map'"}));

TEST(ConfigTest, ParseErrorNamesLine) {
  inference::ModelConfig config;
  Status status = ParseModelConfig("name: \"x\"\nmax_batch_size: \"many\"\n", "cfg.pbtxt", &config);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cfg.pbtxt"), std::string::npos);
  EXPECT_NE(status.message().find("line 2"), std::string::npos) << status.message();
}

// Triton's fields that change no answer are skipped, each named in a warning with its line.
TEST(ConfigTest, TritonFieldsWithoutUseAreWarningsNamingThem) {
  inference::ModelConfig config;
  ConfigWarnings warnings;
  const Status status = ParseModelConfig(
      "name: \"x\"\nresponse_cache { enable: true }\ninstance_group { count: 1 rate_limiter { } }\n",
      "cfg.pbtxt", &config, &warnings);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(config.name(), "x");
  EXPECT_EQ(config.instance_group(0).count(), 1);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("cfg.pbtxt line 2"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("\"response_cache\""), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("\"rate_limiter\""), std::string::npos) << warnings[1];
}

// Any other field outside the schema is refused with its line: a misspelt one would otherwise
// leave its setting at the default (a typo in dynamic_batching loaded as a queue delay of 0), and a
// Triton feature graphserve does not serve would be dropped.
TEST(ConfigTest, MisspeltAndUnservedFieldsAreRefusedNamingThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"name: \"x\"\ndynamic_batching { max_queue_delay_microsecond: 100 }\n",
       "line 2: ModelDynamicBatching has no field \"max_queue_delay_microsecond\""},
      {"max_sequence_lenght: 64\n", "line 1: ModelConfig has no field \"max_sequence_lenght\""},
      {"input { name: \"a\" is_non_linear_format_io: true }\n",
       "ModelInput has no field \"is_non_linear_format_io\""},
      {"dynamic_batching { priority_queue_policy { key: 1 value { } } }\n",
       "ModelDynamicBatching has no field \"priority_queue_policy\""},
      {"ensemble_scheduling { step { model_name: \"a\" } }\n", "ModelConfig has no field \"ensemble_scheduling\""},
  };
  for (const auto& [text, expected] : cases) {
    inference::ModelConfig config;
    const Status status = ParseModelConfig(text, "cfg.pbtxt", &config, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  }
  // What a refused block holds is not looked at: the block's own refusal names it (triton_config).
  inference::ModelConfig config;
  EXPECT_TRUE(ParseModelConfig("sequence_batching { max_sequence_idle_microseconds: 1000 }", "cfg", &config,
                               nullptr).ok());
  EXPECT_TRUE(config.has_sequence_batching());
}

// The configuration page's examples are valid, and the Triton one warns only about what it says it
// does.
TEST(ConfigTest, DocumentedExamplesParse) {
  std::ifstream file(std::string(SOURCE_DIR) + "/docs/configuration.md");
  ASSERT_TRUE(file) << "docs/configuration.md";
  const std::string page((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::string open = "```protobuf\n";
  int examples = 0;
  for (size_t start = page.find(open); start != std::string::npos; start = page.find(open, start)) {
    start += open.size();
    const std::string text = page.substr(start, page.find("```", start) - start);
    SCOPED_TRACE(text);
    inference::ModelConfig config;
    ConfigWarnings warnings;
    ASSERT_TRUE(ParseModelConfig(text, "docs/configuration.md", &config, &warnings).ok());
    if (config.backend().empty()) {
      EXPECT_TRUE(warnings.empty()) << warnings[0];
      ModelSpec spec;
      ASSERT_TRUE(ResolveModelConfig("", &config, &warnings).ok());
      const Status status = ModelSpecFromConfig(config, &spec);
      EXPECT_TRUE(status.ok()) << status.ToString();
    } else {
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_NE(warnings[0].find("\"model_warmup\""), std::string::npos) << warnings[0];
    }
    ++examples;
  }
  EXPECT_EQ(examples, 4);  // the ragged model's among them
}

TEST(ConfigTest, LoadFromFileAndMissingFile) {
  // POSIX, not std::filesystem: see ListSubdirectories in model_repository.cpp.
  char dir[] = "/tmp/graphserve_config_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/config.pbtxt";
  std::ofstream(path) << kValidConfig;
  inference::ModelConfig config;
  ASSERT_TRUE(LoadModelConfig(path, &config).ok());
  EXPECT_EQ(config.name(), "tiny");
  EXPECT_EQ(LoadModelConfig(std::string(dir) + "/absent.pbtxt", &config).code(), StatusCode::kNotFound);
  unlink(path.c_str());
  rmdir(dir);
}

// ---- ragged batching (Triton's allow_ragged_batch, batch_input, batch_output) -------------------

constexpr const char* kRaggedConfig = R"pb(
  name: "ragged"
  platform: "pytorch_libtorch"
  max_batch_size: 8
  max_sequence_length: 128
  input {
    name: "input_ids"
    data_type: TYPE_INT64
    dims: [ -1 ]
    allow_ragged_batch: true
  }
  batch_input {
    kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO
    target_name: "cu_seqlens"
    data_type: TYPE_INT32
    source_input: "input_ids"
  }
  output {
    name: "last_hidden_state"
    data_type: TYPE_FP32
    dims: [ -1, 4 ]
  }
  output {
    name: "pooled"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
  batch_output {
    target_name: "last_hidden_state"
    kind: BATCH_SCATTER_WITH_INPUT_SHAPE
    source_input: "input_ids"
  }
  buckets { max_batch_tokens: 1024 }
)pb";

TEST(RaggedConfigTest, TritonsRaggedConfigBecomesARaggedSpec) {
  ModelSpec spec;
  const Status status = ModelSpecFromConfig(Parse(kRaggedConfig), &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(spec.ragged);
  EXPECT_TRUE(spec.masks_padding());
  ASSERT_EQ(spec.inputs.size(), 1u);
  EXPECT_TRUE(spec.inputs[0].ragged);
  ASSERT_EQ(spec.batch_inputs.size(), 1u);
  EXPECT_EQ(spec.batch_inputs[0].name, "cu_seqlens");
  EXPECT_EQ(spec.batch_inputs[0].dtype, DataType::kInt32);
  EXPECT_EQ(spec.batch_inputs[0].batch_input_kind, BatchInputKind::kAccumulatedElementCountWithZero);
  EXPECT_TRUE(spec.outputs[0].ragged);
  EXPECT_FALSE(spec.outputs[1].ragged);
  // Default grid: max_batch_size 8 and a row spare for the tail's filler, the one row size below
  // 33; token sizes in steps ending at the budget.
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{9}));
  EXPECT_EQ(spec.bucket_lengths.front(), 16);
  EXPECT_EQ(spec.bucket_lengths.back(), 1024);
  EXPECT_EQ(spec.max_batch_tokens, 1024);
  EXPECT_TRUE(CheckModelSpec(spec).ok());
}

TEST(RaggedConfigTest, ManyRowsGetAFewRowSizesByDefault) {
  // FlashAttention works for every row of a bucket: a batch of few rows replays a bucket of few.
  for (const auto& [max_batch_size, rows] :
       std::vector<std::pair<int, std::vector<int64_t>>>{{4, {5}},
                                                         {8, {9}},
                                                         {16, {9, 17}},
                                                         {32, {9, 33}},
                                                         {256, {9, 33, 129, 257}},
                                                         {512, {9, 33, 129, 513}}}) {
    inference::ModelConfig config = Parse(kRaggedConfig);
    config.set_max_batch_size(max_batch_size);
    config.mutable_buckets()->set_max_batch_tokens(16384);
    ModelSpec spec;
    const Status status = ModelSpecFromConfig(config, &spec);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(spec.bucket_batch_sizes, rows) << "max_batch_size " << max_batch_size;
    EXPECT_TRUE(CheckModelSpec(spec).ok());
    // A batch of 3 rows of 10 tokens replays the smallest row size, its filler row included.
    EXPECT_EQ(spec.BucketFor(3, 30), (BucketShape{rows.front(), 32}));
  }
}

TEST(RaggedConfigTest, TheServedBatchInputKindsAreRead) {
  inference::ModelConfig config = Parse(kRaggedConfig);
  inference::ModelConfig edit;
  ASSERT_TRUE(ParseModelConfig(R"pb(
                                 batch_input {
                                   kind: BATCH_ELEMENT_COUNT
                                   target_name: "counts"
                                   data_type: TYPE_INT64
                                   source_input: "input_ids"
                                 }
                                 batch_input {
                                   kind: BATCH_ACCUMULATED_ELEMENT_COUNT
                                   target_name: "ends"
                                   data_type: TYPE_INT32
                                   source_input: "input_ids"
                                 }
                                 buckets {
                                   batch_sizes: [ 2, 8 ]
                                   sequence_lengths: [ 128, 512 ]
                                 }
                               )pb",
                               "edit", &edit)
                  .ok());
  config.MergeFrom(edit);
  ModelSpec spec;
  const Status status = ModelSpecFromConfig(config, &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(spec.batch_inputs.size(), 3u);
  EXPECT_EQ(spec.batch_inputs[1].batch_input_kind, BatchInputKind::kElementCount);
  EXPECT_EQ(spec.batch_inputs[2].batch_input_kind, BatchInputKind::kAccumulatedElementCount);
  // The configured rows, then max_batch_size + 1, whose spare row a full batch's tail needs.
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{2, 8, 9}));
  EXPECT_EQ(spec.bucket_lengths, (std::vector<int64_t>{128, 512}));
  EXPECT_TRUE(CheckModelSpec(spec).ok());
}

TEST(RaggedConfigTest, TheSpareRowMayBeConfiguredAndIsNotAddedTwice) {
  inference::ModelConfig config = Parse(kRaggedConfig);
  config.mutable_buckets()->add_batch_sizes(4);
  config.mutable_buckets()->add_batch_sizes(9);
  ModelSpec spec;
  const Status status = ModelSpecFromConfig(config, &spec);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{4, 9}));
  // A request of max_batch_size rows that leaves a tail has a bucket: the spare row takes the tail.
  EXPECT_FALSE(spec.IsOversize(8, 8 * 100));
  EXPECT_EQ(spec.BucketFor(8, 8 * 100).batch, 9);
}

class BadRaggedConfigTest : public testing::TestWithParam<BadConfigCase> {};

TEST_P(BadRaggedConfigTest, NamesTheField) { ExpectRefusedNamingTheField(kRaggedConfig, GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Fields, BadRaggedConfigTest,
    testing::Values(
        BadConfigCase{
            "batch_input { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: \"m\" data_type: TYPE_INT32 "
            "source_input: \"input_ids\" }",
            "batch_input[1].kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE is not served"},
        BadConfigCase{"batch_input { kind: BATCH_ITEM_SHAPE target_name: \"m\" data_type: TYPE_INT32 "
                      "source_input: \"input_ids\" }",
                      "batch_input[1].kind: BATCH_ITEM_SHAPE is not served"},
        BadConfigCase{"batch_input { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: \"m\" data_type: TYPE_INT32 "
                      "source_input: \"input_ids\" }",
                      "batch_input[1].kind: BATCH_ITEM_SHAPE_FLATTEN is not served"},
        BadConfigCase{"batch_input { kind: BATCH_ELEMENT_COUNT target_name: \"m\" data_type: TYPE_FP32 "
                      "source_input: \"input_ids\" }",
                      "batch_input[1].data_type: TYPE_FP32"},
        BadConfigCase{"batch_input { kind: BATCH_ELEMENT_COUNT target_name: \"m\" data_type: TYPE_INT32 "
                      "source_input: \"tokens\" }",
                      "batch_input[1].source_input: 'tokens'"},
        BadConfigCase{
            "batch_input { kind: BATCH_ELEMENT_COUNT target_name: \"input_ids\" data_type: TYPE_INT32 "
            "source_input: \"input_ids\" }",
            "batch_input[1].target_name: 'input_ids'"},
        BadConfigCase{
            "batch_input { kind: BATCH_ELEMENT_COUNT data_type: TYPE_INT32 source_input: \"input_ids\" }",
            "batch_input[1].target_name"},
        BadConfigCase{"input { name: \"mask\" data_type: TYPE_INT64 dims: [ -1 ] }",
                      "input[1].allow_ragged_batch"},
        BadConfigCase{
            "input { name: \"pairs\" data_type: TYPE_INT64 dims: [ -1, 2 ] allow_ragged_batch: true }",
            "input[1].dims: a ragged input is [ -1 ]"},
        BadConfigCase{"output { name: \"per_token\" data_type: TYPE_FP32 dims: [ -1 ] }",
                      "output[2].dims: -1 in 'per_token'"},
        BadConfigCase{"batch_output { target_name: \"nothing\" source_input: \"input_ids\" }",
                      "batch_output[1].target_name: 'nothing'"},
        BadConfigCase{"batch_output { target_name: \"pooled\" source_input: \"input_ids\" }",
                      "batch_output[1].target_name: 'pooled' must have dims [ -1, ... ]"},
        BadConfigCase{"batch_output { target_name: \"last_hidden_state\" source_input: \"x\" }",
                      "batch_output[1].source_input"},
        BadConfigCase{"buckets { max_batch_tokens: 64 }",
                      "buckets.max_batch_tokens: 64 is below max_sequence_length"},
        BadConfigCase{"buckets { sequence_lengths: [ 2048 ] }",
                      "buckets.sequence_lengths: 2048 is outside [1, 1024]"},
        BadConfigCase{"buckets { sequence_lengths: [ 64 ] }",
                      "buckets.sequence_lengths: the largest token size 64"},
        BadConfigCase{"buckets { batch_sizes: [ 16 ] }", "buckets.batch_sizes: 16 is outside [1, 9]"},
        BadConfigCase{"buckets { batch_sizes: [ 10 ] }",
                      "buckets.batch_sizes: 10 is outside [1, 9] (max_batch_size + 1"},
        BadConfigCase{"sequence_mask_input: \"input_ids\"", "sequence_mask_input: a ragged model"}));

TEST(RaggedConfigTest, BatchInputsAndOutputsNeedARaggedInput) {
  ExpectRefusedNamingTheField(kValidConfig, {"batch_input { kind: BATCH_ELEMENT_COUNT target_name: \"n\" "
                                             "data_type: TYPE_INT32 source_input: \"ids\" }",
                                             "batch_input: needs inputs with allow_ragged_batch"});
  ExpectRefusedNamingTheField(kValidConfig, {"batch_output { target_name: \"hidden\" source_input: \"ids\" }",
                                             "batch_output: needs inputs with allow_ragged_batch"});
}

}  // namespace
}  // namespace graphserve
