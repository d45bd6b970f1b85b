// Triton's config.pbtxt as graphserve reads it: what is used, what is warned about by name, what is
// refused by name, and the effective config the ModelConfig RPC answers.
#include "graphserve/server/config/triton_config.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace graphserve {
namespace {

// A Triton PyTorch-backend config as Triton's documentation and users write them.
constexpr const char* kTritonConfig = R"pb(
  name: "bert"
  backend: "pytorch"
  max_batch_size: 16
  input [
    { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
    { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
  ]
  output [ { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 768 ] } ]
  instance_group [ { name: "bert_gpu" count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
  dynamic_batching {
    preferred_batch_size: [ 4, 8, 16 ]
    max_queue_delay_microseconds: 100
    preserve_ordering: true
    default_queue_policy {
      max_queue_size: 64
      default_timeout_microseconds: 5000000
      timeout_action: REJECT
      allow_timeout_override: true
    }
  }
  parameters: { key: "INFERENCE_MODE" value: { string_value: "true" } }
  parameters: { key: "ENABLE_NVFUSER" value: { string_value: "false" } }
  parameters: { key: "max_sequence_length" value: { string_value: "256" } }
  model_warmup [
    {
      name: "warm"
      batch_size: 1
      inputs { key: "input_ids" value { data_type: TYPE_INT64 dims: [ 16 ] zero_data: true } }
    }
  ]
  response_cache { enable: true }
)pb";

// A model folder holding the given (empty) files, removed with the fixture.
class ModelFolder {
 public:
  explicit ModelFolder(const std::vector<std::string>& files) {
    // POSIX, not std::filesystem: see ListSubdirectories in model_repository.cpp.
    char dir[] = "/tmp/graphserve_triton_config_test_XXXXXX";
    if (mkdtemp(dir) != nullptr) path_ = dir;
    for (const std::string& file : files) {
      std::ofstream(path_ + "/" + file) << "weights";
      files_.push_back(path_ + "/" + file);
    }
  }
  ~ModelFolder() {
    for (const std::string& file : files_) unlink(file.c_str());
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

inference::ModelConfig Parse(const std::string& text, ConfigWarnings* warnings = nullptr) {
  inference::ModelConfig config;
  const Status status = ParseModelConfig(text, "test", &config, warnings);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return config;
}

// kTritonConfig with `edit` merged over it (a repeated field gains entries).
inference::ModelConfig TritonConfig(const std::string& edit = "") {
  inference::ModelConfig config = Parse(kTritonConfig);
  config.MergeFrom(Parse(edit));
  return config;
}

bool Mentions(const ConfigWarnings& warnings, const std::string& text) {
  return std::any_of(warnings.begin(), warnings.end(), [&](const std::string& warning) {
    return warning.find(text) != std::string::npos;
  });
}

std::string Joined(const ConfigWarnings& warnings) {
  std::string text;
  for (const std::string& warning : warnings) text += warning + "\n";
  return text;
}

template <typename Repeated>
std::vector<int64_t> Values(const Repeated& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

TEST(TritonConfigTest, TritonPyTorchConfigLoadsWithItsIgnoredFieldsNamed) {
  ModelFolder folder({"model.pt"});
  ConfigWarnings parse_warnings, warnings;
  inference::ModelConfig config = Parse(kTritonConfig, &parse_warnings);
  // Fields outside graphserve's schema are skipped, each named with its line.
  EXPECT_TRUE(Mentions(parse_warnings, "\"model_warmup\"")) << Joined(parse_warnings);
  EXPECT_TRUE(Mentions(parse_warnings, "\"response_cache\"")) << Joined(parse_warnings);
  EXPECT_TRUE(Mentions(parse_warnings, "test line ")) << Joined(parse_warnings);

  const Status status = ResolveModelConfig(folder.path(), &config, &warnings);
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (const char* ignored : {"dynamic_batching.preserve_ordering", "parameters[\"INFERENCE_MODE\"]",
                              "parameters[\"ENABLE_NVFUSER\"]"}) {
    EXPECT_TRUE(Mentions(warnings, ignored)) << ignored << " in\n" << Joined(warnings);
  }
  // Parsed for the scheduler's queue timeouts, which are wired elsewhere: no warning here.
  for (const char* unwarned : {"timeout", "max_sequence_length", "preferred_batch_size"}) {
    EXPECT_FALSE(Mentions(warnings, unwarned)) << unwarned << " in\n" << Joined(warnings);
  }
  EXPECT_EQ(warnings.size(), 3u) << Joined(warnings);

  EXPECT_EQ(config.platform(), kPlatformTorchScript);
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.max_sequence_length, 256);
  // preferred_batch_size and the default steps: a 1-row request is not padded to 4 rows.
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16}));
  EXPECT_EQ(spec.bucket_lengths, DefaultBucketLengths(256));
  const SchedulerOptions options = SchedulerOptionsFromConfig(config);
  EXPECT_EQ(options.max_queue_delay_us, 100);
  EXPECT_EQ(options.max_queue_size, 64);
  EXPECT_EQ(options.queue_policy.default_timeout_us, 5000000);
  EXPECT_TRUE(options.queue_policy.allow_timeout_override);

  std::vector<InstancePlacement> placements;
  ASSERT_TRUE(InstancePlacements(config, "cpu", &placements).ok());
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_EQ(placements[0].name, "bert_gpu");
  EXPECT_EQ(placements[0].count, 2);
  EXPECT_EQ(placements[0].devices, (std::vector<std::string>{"cuda:0", "cuda:1"}));
}

TEST(TritonConfigTest, ResolvingTwiceChangesNothing) {
  ModelFolder folder({"model.pt"});
  inference::ModelConfig config = TritonConfig(R"pb(
    optimization { cuda { graphs: false } }
  )pb");
  ASSERT_TRUE(ResolveModelConfig(folder.path(), &config, nullptr).ok());
  inference::ModelConfig again = config;
  ASSERT_TRUE(ResolveModelConfig(folder.path(), &again, nullptr).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(again, config))
      << again.DebugString() << "\nfirst:\n" << config.DebugString();
}

TEST(TritonConfigTest, BackendPyTorchTakesThePlatformFromTheModelFile) {
  struct Case {
    std::vector<std::string> files;
    std::string default_model_filename;
    std::string platform;
    bool warned;
  };
  for (const Case& test : {Case{{"model.pt2"}, "", kPlatformAotInductor, false},
                           Case{{"model.pt"}, "", kPlatformTorchScript, false},
                           Case{{"model.pt", "model.pt2"}, "", kPlatformAotInductor, true},
                           Case{{"traced.pt"}, "traced.pt", kPlatformTorchScript, false},
                           Case{{"exported.pt2"}, "exported.pt2", kPlatformAotInductor, false}}) {
    ModelFolder folder(test.files);
    inference::ModelConfig config = TritonConfig();
    config.set_default_model_filename(test.default_model_filename);
    ConfigWarnings warnings;
    const Status status = ResolveModelConfig(folder.path(), &config, &warnings);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(config.platform(), test.platform) << test.files[0];
    EXPECT_EQ(Mentions(warnings, "backend: both model.pt2 and model.pt"), test.warned) << Joined(warnings);
  }
  ModelFolder empty({});
  inference::ModelConfig config = TritonConfig();
  const Status status = ResolveModelConfig(empty.path(), &config, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_NE(status.message().find("model 'bert': backend: 'pytorch'"), std::string::npos)
      << status.ToString();
}

TEST(TritonConfigTest, ParametersCarryGraphserveSettings) {
  ModelFolder folder({"model.pt"});
  inference::ModelConfig config = TritonConfig(R"pb(
    parameters { key: "bucket_batch_sizes" value { string_value: "2, 8,16" } }
    parameters { key: "bucket_sequence_lengths" value { string_value: "64,128,256" } }
    parameters { key: "precision" value { string_value: "bf16" } }
    parameters { key: "batching_policy" value { string_value: "fifo" } }
    parameters { key: "my_own_key" value { string_value: "x" } }
  )pb");
  ConfigWarnings warnings;
  ASSERT_TRUE(ResolveModelConfig(folder.path(), &config, &warnings).ok());
  EXPECT_TRUE(Mentions(warnings, "parameters[\"my_own_key\"]: not a graphserve setting"))
      << Joined(warnings);
  // preferred_batch_size gives way to the grid the parameters set, and says so.
  EXPECT_TRUE(Mentions(warnings, "dynamic_batching.preferred_batch_size: [4, 8, 16] not used"))
      << Joined(warnings);
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.max_sequence_length, 256);
  EXPECT_EQ(spec.bucket_batch_sizes, (std::vector<int64_t>{2, 8, 16}));
  EXPECT_EQ(spec.bucket_lengths, (std::vector<int64_t>{64, 128, 256}));
  EXPECT_EQ(spec.precision, Precision::kBf16);
  EXPECT_EQ(SchedulerOptionsFromConfig(config).policy, BatchingPolicy::kFifo);
  EXPECT_EQ(SchedulerOptionsFromConfig(config).max_queue_delay_us, 100);

  // Without a dynamic_batching block the policy keeps the default delay.
  inference::ModelConfig bare = Parse(R"pb(
    name: "m" platform: "pytorch_libtorch" max_batch_size: 4
    input { name: "x" data_type: TYPE_FP32 dims: [ 8 ] }
    output { name: "y" data_type: TYPE_FP32 dims: [ 8 ] }
    parameters { key: "batching_policy" value { string_value: "fifo" } }
  )pb");
  ASSERT_TRUE(ResolveModelConfig("", &bare, nullptr).ok());
  EXPECT_EQ(SchedulerOptionsFromConfig(bare).max_queue_delay_us, kDefaultMaxQueueDelayUs);
  EXPECT_EQ(SchedulerOptionsFromConfig(bare).policy, BatchingPolicy::kFifo);
}

TEST(TritonConfigTest, GraphSpecsBecomeTheGrid) {
  ModelFolder folder({"model.pt"});
  std::string edit = "optimization { cuda { graphs: true ";
  for (int batch : {2, 8}) {
    for (int length : {32, 128}) {
      edit += "graph_spec { batch_size: " + std::to_string(batch) +
              " input { key: \"input_ids\" value { dim: [ " + std::to_string(length) +
              " ] } } input { key: \"attention_mask\" value { dim: [ " + std::to_string(length) +
              " ] } } } ";
    }
  }
  edit += "} }";
  inference::ModelConfig config = TritonConfig(edit);
  config.clear_parameters();                                       // no max_sequence_length
  config.mutable_dynamic_batching()->clear_preferred_batch_size();  // graph_spec alone
  ConfigWarnings warnings;
  const Status status = ResolveModelConfig(folder.path(), &config, &warnings);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Values(config.buckets().batch_sizes()), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(Values(config.buckets().sequence_lengths()), (std::vector<int64_t>{32, 128}));
  // The length limit defaults to the largest graph's length, with a warning.
  EXPECT_EQ(config.max_sequence_length(), 128);
  EXPECT_TRUE(Mentions(warnings, "max_sequence_length: not set")) << Joined(warnings);
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_FALSE(spec.cuda_graphs_disabled);
}

TEST(TritonConfigTest, FixedShapeGraphSpecsGiveBatchSizesOnly) {
  inference::ModelConfig config = Parse(R"pb(
    name: "cnn" platform: "pytorch_libtorch" max_batch_size: 8
    input { name: "image" data_type: TYPE_FP32 dims: [ 3, 4, 4 ] }
    output { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] }
    optimization { cuda {
      graph_spec { batch_size: 1 input { key: "image" value { dim: [ 3, 4, 4 ] } } }
      graph_spec { batch_size: 8 }
    } }
  )pb");
  ConfigWarnings warnings;
  ASSERT_TRUE(ResolveModelConfig("", &config, &warnings).ok());
  EXPECT_TRUE(warnings.empty()) << Joined(warnings);
  EXPECT_EQ(Values(config.buckets().batch_sizes()), (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(config.buckets().sequence_lengths_size(), 0);
  EXPECT_EQ(config.max_sequence_length(), 0);
  ModelSpec spec;
  EXPECT_TRUE(ModelSpecFromConfig(config, &spec).ok());
}

TEST(TritonConfigTest, CudaGraphsFalseDisablesGraphs) {
  ModelFolder folder({"model.pt"});
  inference::ModelConfig config = TritonConfig("optimization { cuda { graphs: false } }");
  ASSERT_TRUE(ResolveModelConfig(folder.path(), &config, nullptr).ok());
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_TRUE(spec.cuda_graphs_disabled);
}

TEST(TritonConfigTest, VariableLengthModelWithoutALimitGetsTheDefault) {
  ModelFolder folder({"model.pt"});
  inference::ModelConfig config = TritonConfig();
  config.clear_parameters();
  config.mutable_dynamic_batching()->clear_preferred_batch_size();
  ConfigWarnings warnings;
  ASSERT_TRUE(ResolveModelConfig(folder.path(), &config, &warnings).ok());
  EXPECT_EQ(config.max_sequence_length(), kDefaultMaxSequenceLength);
  EXPECT_TRUE(Mentions(warnings, "max_sequence_length: not set (nor parameters[\"max_sequence_length\"]); "
                                 "using 512"))
      << Joined(warnings);
}

TEST(TritonConfigTest, InstanceGroupsPlaceInstances) {
  inference::ModelConfig config = Parse(R"pb(
    instance_group { kind: KIND_GPU count: 2 }
    instance_group { kind: KIND_CPU }
    instance_group { kind: KIND_AUTO count: 3 }
    instance_group { count: 1 devices: [ "cuda:1", "cpu" ] }
    instance_group { gpus: [ 2 ] }
  )pb");
  std::vector<InstancePlacement> placements;
  ASSERT_TRUE(InstancePlacements(config, "cuda:3", &placements).ok());
  ASSERT_EQ(placements.size(), 5u);
  EXPECT_EQ(placements[0].devices, (std::vector<std::string>{"cuda:0"}));
  EXPECT_EQ(placements[0].count, 2);
  EXPECT_EQ(placements[1].devices, (std::vector<std::string>{"cpu"}));
  EXPECT_EQ(placements[1].count, 1);  // Triton's count 0 is one instance
  EXPECT_EQ(placements[2].devices, (std::vector<std::string>{"cuda:3"}));
  EXPECT_EQ(placements[2].count, 3);
  EXPECT_EQ(placements[3].devices, (std::vector<std::string>{"cuda:1", "cpu"}));
  EXPECT_EQ(placements[4].devices, (std::vector<std::string>{"cuda:2"}));

  ASSERT_TRUE(InstancePlacements(inference::ModelConfig(), "cpu", &placements).ok());
  ASSERT_EQ(placements.size(), 1u);
  EXPECT_EQ(placements[0].devices, (std::vector<std::string>{"cpu"}));
}

// Triton's "no batch dimension": graphserve serves batching models only. (Not a merge case: merging
// a proto3 zero changes nothing.)
TEST(TritonConfigTest, MaxBatchSizeZeroIsRefused) {
  ModelFolder folder({"model.pt"});
  inference::ModelConfig config = TritonConfig();
  config.set_max_batch_size(0);
  const Status status = ResolveModelConfig(folder.path(), &config, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("max_batch_size: 0 declares a model without a batch dimension"),
            std::string::npos)
      << status.message();
}

struct RefusedCase {
  std::string edit;   // merged over kTritonConfig
  std::string field;  // must appear in the INVALID_ARGUMENT message
};

// Names each case's test (ctest lists them) by the field it refuses, not by its bytes.
void PrintTo(const RefusedCase& refused, std::ostream* out) { *out << refused.field; }

class RefusedTritonSettingTest : public testing::TestWithParam<RefusedCase> {};

TEST_P(RefusedTritonSettingTest, IsInvalidArgumentNamingTheField) {
  ModelFolder folder({"model.pt"});
  inference::ModelConfig config = TritonConfig(GetParam().edit);
  const Status status = ResolveModelConfig(folder.path(), &config, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("model 'bert': " + GetParam().field), std::string::npos)
      << status.message();
}

// Each would change answers, or what a request means, if it were ignored.
INSTANTIATE_TEST_SUITE_P(
    ChangeAnswers, RefusedTritonSettingTest,
    testing::Values(
        RefusedCase{"input { name: \"x\" data_type: TYPE_FP32 dims: [ -1 ] optional: true }",
                    "input[2].optional"},
        RefusedCase{"input { name: \"x\" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, 2 ] } }",
                    "input[2].reshape"},
        RefusedCase{"input { name: \"x\" data_type: TYPE_INT32 dims: [ 1 ] is_shape_tensor: true }",
                    "input[2].is_shape_tensor"},
        RefusedCase{"output { name: \"y\" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ ] } }",
                    "output[1].reshape"},
        RefusedCase{"output { name: \"y\" data_type: TYPE_INT32 dims: [ 1 ] is_shape_tensor: true }",
                    "output[1].is_shape_tensor"},
        RefusedCase{"instance_group { kind: KIND_MODEL }", "instance_group[1].kind: KIND_MODEL"},
        RefusedCase{"instance_group { kind: KIND_CPU gpus: [ 0 ] }", "instance_group[1].gpus"},
        RefusedCase{"instance_group { kind: KIND_GPU devices: [ \"cuda:0\" ] }", "instance_group[1].devices"},
        RefusedCase{"version_policy { all { } }", "version_policy.all"},
        RefusedCase{"version_policy { latest { num_versions: 2 } }", "version_policy.latest.num_versions"},
        RefusedCase{"version_policy { specific { versions: [ 1, 3 ] } }", "version_policy.specific.versions"},
        RefusedCase{"sequence_batching { max_sequence_idle_microseconds: 1000 }", "sequence_batching"},
        RefusedCase{"model_transaction_policy { decoupled: true }", "model_transaction_policy.decoupled"},
        RefusedCase{"backend: \"onnxruntime\"", "backend: 'onnxruntime'"},
        RefusedCase{"dynamic_batching { default_queue_policy { timeout_action: DELAY } }",
                    "dynamic_batching.default_queue_policy.timeout_action: DELAY"}));

// Settings that contradict each other or are out of range: refused rather than one picked.
INSTANTIATE_TEST_SUITE_P(
    Contradictions, RefusedTritonSettingTest,
    testing::Values(
        RefusedCase{"max_sequence_length: 128", "parameters[\"max_sequence_length\"]: 256 contradicts"},
        RefusedCase{"parameters { key: \"max_sequence_length\" value { string_value: \"long\" } }",
                    "parameters[\"max_sequence_length\"]"},
        RefusedCase{"parameters { key: \"precision\" value { string_value: \"fp8\" } }",
                    "parameters[\"precision\"]: \"fp8\""},
        RefusedCase{"parameters { key: \"batching_policy\" value { string_value: \"lifo\" } }",
                    "parameters[\"batching_policy\"]"},
        RefusedCase{"buckets { batch_sizes: [ 1 ] } "
                    "parameters { key: \"bucket_batch_sizes\" value { string_value: \"1,2\" } }",
                    "parameters[\"bucket_batch_sizes\"]: [1, 2] contradicts buckets.batch_sizes: [1]"},
        RefusedCase{"buckets { max_batch_tokens: 64 } "
                    "parameters { key: \"max_batch_tokens\" value { string_value: \"128\" } }",
                    "parameters[\"max_batch_tokens\"]: 128 contradicts buckets.max_batch_tokens: 64"},
        RefusedCase{"dynamic_batching { max_queue_size: 10 }",
                    "dynamic_batching.default_queue_policy.max_queue_size: 64 contradicts"},
        RefusedCase{"parameters { key: \"pad_value:token_ids\" value { string_value: \"0\" } }",
                    "parameters[\"pad_value:token_ids\"]: the config has no input 'token_ids'"},
        RefusedCase{"parameters { key: \"min_value:input_ids\" value { string_value: \"zero\" } }",
                    "parameters[\"min_value:input_ids\"]: expected a number"},
        RefusedCase{"input { name: \"x\" data_type: TYPE_INT64 dims: [ -1 ] max_value: 9 } "
                    "parameters { key: \"max_value:x\" value { string_value: \"99\" } }",
                    "parameters[\"max_value:x\"]: 99 contradicts input[2].max_value"},
        RefusedCase{"parameters { key: \"batching_disabled\" value { string_value: \"yes\" } }",
                    "parameters[\"batching_disabled\"]: \"yes\" is not true or false"},
        RefusedCase{"dynamic_batching { disable: true max_queue_delay_microseconds: 0 } "
                    "parameters { key: \"batching_disabled\" value { string_value: \"false\" } }",
                    "parameters[\"batching_disabled\"]: \"false\" contradicts"},
        RefusedCase{"parameters { key: \"cuda_graph_verify_rtol\" value { string_value: \"0.01x\" } }",
                    "parameters[\"cuda_graph_verify_rtol\"]: expected a number"},
        RefusedCase{"dynamic_batching { preferred_batch_size: [ 32 ] }",
                    "dynamic_batching.preferred_batch_size: 32 is outside"},
        RefusedCase{"optimization { cuda { graphs: true } } cuda_graphs { disable: true }",
                    "optimization.cuda.graphs: true contradicts"},
        RefusedCase{"default_model_filename: \"../other/model.pt\"", "default_model_filename"},
        // Three of the four points of a 2 x 2 grid.
        RefusedCase{"optimization { cuda {"
                    " graph_spec { batch_size: 1 input { key: \"input_ids\" value { dim: [ 16 ] } } }"
                    " graph_spec { batch_size: 1 input { key: \"input_ids\" value { dim: [ 32 ] } } }"
                    " graph_spec { batch_size: 4 input { key: \"input_ids\" value { dim: [ 16 ] } } }"
                    " } }",
                    "optimization.cuda.graph_spec: not a full grid of batch sizes [1, 4] × lengths "
                    "[16, 32]; missing 4x32"},
        RefusedCase{"optimization { cuda {"
                    " graph_spec { batch_size: 2 input { key: \"input_ids\" value { dim: [ 16 ] } } }"
                    " } } buckets { sequence_lengths: [ 64 ] }",
                    "optimization.cuda.graph_spec lengths: [16] contradicts buckets.sequence_lengths"},
        RefusedCase{"optimization { cuda {"
                    " graph_spec { batch_size: 2 input { key: \"token_ids\" value { dim: [ 16 ] } } }"
                    " } }",
                    "optimization.cuda.graph_spec[0].input[\"token_ids\"]: no such input"},
        RefusedCase{"optimization { cuda {"
                    " graph_spec { batch_size: 2 input { key: \"input_ids\" value { dim: [ 16 ] } }"
                    " input { key: \"attention_mask\" value { dim: [ 32 ] } } } } }",
                    "optimization.cuda.graph_spec[0].input[\"input_ids\"]: length 16 differs"},
        RefusedCase{"optimization { cuda { graph_spec { batch_size: 0 } } }",
                    "optimization.cuda.graph_spec[0].batch_size: 0 is outside"}));

// Every field set in `message` and its sub-messages numbered from 1000 (graphserve's own), by name.
std::vector<std::string> OwnFieldsSet(const google::protobuf::Message& message) {
  std::vector<std::string> own;
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  const google::protobuf::Reflection& reflection = *message.GetReflection();
  reflection.ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->number() >= 1000) own.push_back(field->full_name());
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const int count = field->is_repeated() ? reflection.FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      const google::protobuf::Message& inner = field->is_repeated() ? reflection.GetRepeatedMessage(message, field, i)
                                                                    : reflection.GetMessage(message, field);
      for (std::string& name : OwnFieldsSet(inner)) own.push_back(std::move(name));
    }
  }
  return own;
}

std::string Parameter(const inference::ModelConfig& config, const std::string& key) {
  const auto found = config.parameters().find(key);
  return found == config.parameters().end() ? "<absent>" : found->second.string_value();
}

// The answer of the ModelConfig RPC: Triton's fields filled from what is served, graphserve's own
// settings as parameters (Triton's schema has none of its fields); read back as a config, it serves
// the same model.
TEST(TritonConfigTest, EffectiveConfigDescribesWhatIsServed) {
  ModelFolder folder({"model.pt"});
  ServedModel served;
  served.config = TritonConfig("parameters { key: \"bucket_sequence_lengths\" value { string_value: \"64,256\" } }");
  ASSERT_TRUE(ResolveModelConfig(folder.path(), &served.config, nullptr).ok());
  ASSERT_TRUE(ModelSpecFromConfig(served.config, &served.spec).ok());
  served.scheduler = SchedulerOptionsFromConfig(served.config);
  served.placements = {InstancePlacement{"bert_gpu", 2, {"cuda:0", "cpu", "cuda:1"}}};
  served.graph_buckets = {BucketShape{4, 64}, BucketShape{16, 256}};

  const inference::ModelConfig effective = EffectiveModelConfig(served);
  EXPECT_EQ(effective.name(), "bert");
  EXPECT_EQ(effective.platform(), kPlatformTorchScript);
  EXPECT_EQ(effective.backend(), "pytorch");
  EXPECT_EQ(effective.default_model_filename(), "model.pt");
  EXPECT_EQ(effective.max_batch_size(), 16);
  ASSERT_EQ(effective.input_size(), 2);
  EXPECT_EQ(effective.input(1).name(), "attention_mask");
  EXPECT_EQ(effective.input(1).data_type(), inference::TYPE_INT64);
  EXPECT_EQ(Values(effective.output(0).dims()), (std::vector<int64_t>{-1, 768}));
  EXPECT_EQ(effective.output(0).data_type(), inference::TYPE_FP32);

  const inference::ModelDynamicBatching& batching = effective.dynamic_batching();
  EXPECT_EQ(Values(batching.preferred_batch_size()), (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16}));
  EXPECT_EQ(batching.max_queue_delay_microseconds(), 100u);
  EXPECT_EQ(batching.default_queue_policy().max_queue_size(), 64u);
  EXPECT_EQ(batching.default_queue_policy().default_timeout_microseconds(), 5000000u);

  // One group per kind: Triton's groups have a single kind.
  ASSERT_EQ(effective.instance_group_size(), 2);
  EXPECT_EQ(effective.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_GPU);
  EXPECT_EQ(effective.instance_group(0).count(), 2);
  EXPECT_EQ(Values(effective.instance_group(0).gpus()), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(effective.instance_group(1).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(effective.instance_group(1).name(), "bert_gpu");

  const inference::ModelOptimizationPolicy::Cuda& cuda = effective.optimization().cuda();
  EXPECT_TRUE(cuda.has_graphs() && cuda.graphs());
  ASSERT_EQ(cuda.graph_spec_size(), 2);
  EXPECT_EQ(cuda.graph_spec(1).batch_size(), 16);
  EXPECT_EQ(Values(cuda.graph_spec(1).input().at("input_ids").dim()), (std::vector<int64_t>{256}));

  EXPECT_EQ(OwnFieldsSet(effective), std::vector<std::string>{});
  EXPECT_EQ(Parameter(effective, "max_sequence_length"), "256");
  EXPECT_EQ(Parameter(effective, "bucket_sequence_lengths"), "64,256");
  EXPECT_EQ(Parameter(effective, "bucket_batch_sizes"), "1,2,3,4,6,8,12,16");
  EXPECT_EQ(Parameter(effective, "max_batch_tokens"), "<absent>");  // none: explicit batch sizes
  EXPECT_EQ(Parameter(effective, "precision"), "fp32");
  EXPECT_EQ(Parameter(effective, "batching_policy"), "size_binned");
  EXPECT_EQ(Parameter(effective, "batching_disabled"), "<absent>");
  EXPECT_EQ(Parameter(effective, "pad_value:input_ids"), "0");
  EXPECT_EQ(Parameter(effective, "min_value:input_ids"), "<absent>");
  // The config's own parameters for Triton's backend are not graphserve's settings: not repeated.
  EXPECT_EQ(Parameter(effective, "INFERENCE_MODE"), "<absent>");

  // Without graph buckets (a CPU, or graphs off) the answer says graphs: false and lists none.
  served.graph_buckets.clear();
  EXPECT_FALSE(EffectiveModelConfig(served).optimization().cuda().graphs());
  EXPECT_EQ(EffectiveModelConfig(served).optimization().cuda().graph_spec_size(), 0);
}

// On preferred_batch_size's grid, and on the default one, whose token budget takes batches of
// short requests beyond max_batch_size (Triton's preferred sizes stop at it).
TEST(TritonConfigTest, EffectiveConfigReadBackServesTheSameModel) {
  for (bool preferred : {true, false}) {
    SCOPED_TRACE(preferred ? "preferred_batch_size" : "default grid");
    ModelFolder folder({"model.pt"});
    ServedModel served;
    served.config = TritonConfig();
    if (!preferred) served.config.mutable_dynamic_batching()->clear_preferred_batch_size();
    ASSERT_TRUE(ResolveModelConfig(folder.path(), &served.config, nullptr).ok());
    ASSERT_TRUE(ModelSpecFromConfig(served.config, &served.spec).ok());
    served.scheduler = SchedulerOptionsFromConfig(served.config);
    ASSERT_TRUE(InstancePlacements(served.config, "cpu", &served.placements).ok());
    served.graph_buckets = served.spec.Buckets();

    inference::ModelConfig effective = EffectiveModelConfig(served);
    for (int32_t size : effective.dynamic_batching().preferred_batch_size()) {
      EXPECT_LE(size, effective.max_batch_size());
    }
    EXPECT_EQ(Parameter(effective, "max_batch_tokens"),
              preferred ? "<absent>" : std::to_string(kDefaultMaxBatchTokens));
    EXPECT_EQ(OwnFieldsSet(effective), std::vector<std::string>{});
    ConfigWarnings warnings;
    const Status status = ResolveModelConfig(folder.path(), &effective, &warnings);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_TRUE(warnings.empty()) << Joined(warnings);
    ModelSpec spec;
    ASSERT_TRUE(ModelSpecFromConfig(effective, &spec).ok());
    EXPECT_EQ(spec.bucket_batch_sizes, served.spec.bucket_batch_sizes);
    EXPECT_EQ(spec.bucket_lengths, served.spec.bucket_lengths);
    EXPECT_EQ(spec.max_batch_tokens, served.spec.max_batch_tokens);
    EXPECT_EQ(spec.Buckets(), served.spec.Buckets());
    EXPECT_EQ(spec.max_sequence_length, served.spec.max_sequence_length);
    EXPECT_EQ(SchedulerOptionsFromConfig(effective).max_queue_size, served.scheduler.max_queue_size);
    std::vector<InstancePlacement> placements;
    ASSERT_TRUE(InstancePlacements(effective, "cpu", &placements).ok());
    ASSERT_EQ(placements.size(), 1u);
    EXPECT_EQ(placements[0].devices, served.placements[0].devices);
  }
}

// graphserve's settings given in its own fields come back as parameters, and those read back as the
// same settings: the effective config of any model can be loaded as its config.pbtxt.
TEST(TritonConfigTest, OwnSettingsTravelAsParametersAndReadBackTheSame) {
  ModelFolder folder({"model.pt"});
  ServedModel served;
  served.config = TritonConfig(R"pb(
    sequence_mask_input: "attention_mask"
    precision: PRECISION_BF16
    cuda_graphs { verify_rtol: 0.025 }
    dynamic_batching { policy: FIFO disable: true }
  )pb");
  inference::ModelInput* ids = served.config.mutable_input(0);
  ids->set_pad_value(3);
  ids->set_min_value(0);
  ids->set_max_value(30521);
  served.config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(0);  // as disable needs
  ASSERT_TRUE(ResolveModelConfig(folder.path(), &served.config, nullptr).ok());
  ASSERT_TRUE(ModelSpecFromConfig(served.config, &served.spec).ok());
  served.scheduler = SchedulerOptionsFromConfig(served.config);
  ASSERT_TRUE(InstancePlacements(served.config, "cpu", &served.placements).ok());

  inference::ModelConfig effective = EffectiveModelConfig(served);
  EXPECT_EQ(OwnFieldsSet(effective), std::vector<std::string>{});
  EXPECT_EQ(Parameter(effective, "pad_value:input_ids"), "3");
  EXPECT_EQ(Parameter(effective, "min_value:input_ids"), "0");
  EXPECT_EQ(Parameter(effective, "max_value:input_ids"), "30521");
  EXPECT_EQ(Parameter(effective, "pad_value:attention_mask"), "0");
  EXPECT_EQ(Parameter(effective, "max_value:attention_mask"), "<absent>");
  EXPECT_EQ(Parameter(effective, "sequence_mask_input"), "attention_mask");
  EXPECT_EQ(Parameter(effective, "precision"), "bf16");
  EXPECT_EQ(Parameter(effective, "cuda_graph_verify_rtol"), "0.025");
  EXPECT_EQ(Parameter(effective, "batching_policy"), "fifo");
  EXPECT_EQ(Parameter(effective, "batching_disabled"), "true");

  ConfigWarnings warnings;
  const Status status = ResolveModelConfig(folder.path(), &effective, &warnings);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(warnings.empty()) << Joined(warnings);
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(effective, &spec).ok());
  EXPECT_EQ(spec.inputs[0].pad_value, 3);
  ASSERT_EQ(spec.input_ranges.size(), served.spec.input_ranges.size());
  EXPECT_EQ(spec.input_ranges[0].min, served.spec.input_ranges[0].min);
  EXPECT_EQ(spec.input_ranges[0].max, std::optional<double>(30521));
  EXPECT_EQ(spec.input_ranges[1].max, std::nullopt);
  EXPECT_EQ(spec.sequence_mask_input, "attention_mask");
  EXPECT_EQ(spec.precision, Precision::kBf16);
  EXPECT_EQ(spec.verify_rtol, 0.025);
  const SchedulerOptions scheduler = SchedulerOptionsFromConfig(effective);
  EXPECT_EQ(scheduler.policy, BatchingPolicy::kFifo);
  EXPECT_TRUE(scheduler.batching_disabled);
  EXPECT_EQ(scheduler.max_queue_delay_us, 0);
}

// graph_spec entries for (batch, length) at these points, both inputs of each.
std::string GraphSpecs(const std::vector<BucketShape>& points) {
  std::string edit = "optimization { cuda { graphs: true ";
  for (const BucketShape& point : points) {
    const std::string length = std::to_string(point.length);
    edit += "graph_spec { batch_size: " + std::to_string(point.batch) +
            " input { key: \"input_ids\" value { dim: [ " + length +
            " ] } } input { key: \"attention_mask\" value { dim: [ " + length + " ] } } } ";
  }
  return edit + "} }";
}

TEST(TritonConfigTest, TokenBudgetTravelsAsAParameterAndGraphSpecsFormItsStaircase) {
  ModelFolder folder({"model.pt"});
  inference::ModelConfig config = TritonConfig(R"pb(
    parameters { key: "max_batch_tokens" value { string_value: "1024" } }
    parameters { key: "bucket_batch_sizes" value { string_value: "4,8,16,32,64" } }
    parameters { key: "bucket_sequence_lengths" value { string_value: "16,32,64" } }
  )pb");
  ConfigWarnings warnings;
  Status status = ResolveModelConfig(folder.path(), &config, &warnings);
  ASSERT_TRUE(status.ok()) << status.ToString();
  // preferred_batch_size [4, 8, 16] is the grid's sizes up to max_batch_size 16: no warning.
  EXPECT_FALSE(Mentions(warnings, "preferred_batch_size")) << Joined(warnings);
  ModelSpec spec;
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.max_batch_tokens, 1024);
  EXPECT_EQ(spec.LargestBatchFor(16), 64);
  EXPECT_EQ(spec.LargestBatchFor(32), 32);
  EXPECT_EQ(spec.LargestBatchFor(64), 16);

  // graph_spec: 32 rows fit 512 tokens at length 16, not at 32; 4 rows at both.
  const std::string budget = R"pb(
    parameters { key: "max_batch_tokens" value { string_value: "512" } })pb";
  config = TritonConfig(budget + GraphSpecs({{4, 16}, {4, 32}, {32, 16}}));
  config.mutable_dynamic_batching()->clear_preferred_batch_size();
  status = ResolveModelConfig(folder.path(), &config, nullptr);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Values(config.buckets().batch_sizes()), (std::vector<int64_t>{4, 32}));
  ASSERT_TRUE(ModelSpecFromConfig(config, &spec).ok());
  EXPECT_EQ(spec.Buckets(), (std::vector<BucketShape>{{4, 16}, {4, 32}, {32, 16}}));

  config = TritonConfig(budget + GraphSpecs({{4, 16}, {4, 32}, {32, 16}, {32, 32}}));
  status = ResolveModelConfig(folder.path(), &config, nullptr);
  EXPECT_NE(status.message().find("graph_spec: 32x32 above max_batch_size exceed "
                                  "buckets.max_batch_tokens 512"),
            std::string::npos)
      << status.message();
  config = TritonConfig(budget + GraphSpecs({{4, 16}, {32, 16}, {16, 32}}));
  status = ResolveModelConfig(folder.path(), &config, nullptr);
  EXPECT_NE(status.message().find("within buckets.max_batch_tokens 512; missing 4x32, 16x16"),
            std::string::npos)
      << status.message();
  // Without a budget a graph above max_batch_size is refused, saying what would allow it.
  config = TritonConfig(GraphSpecs({{32, 16}}));
  status = ResolveModelConfig(folder.path(), &config, nullptr);
  EXPECT_NE(status.message().find("graph_spec[0].batch_size: 32 is outside [1, max_batch_size = "
                                  "16]; batches of more rows need buckets.max_batch_tokens"),
            std::string::npos)
      << status.message();
}

}  // namespace
}  // namespace graphserve
