#include "graphserve/server/config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

namespace graphserve {
namespace {

constexpr const char* kBuiltinEncoderConfig = R"pb(
  name: "encoder"
  platform: "graphserve_encoder"
  max_batch_size: 32
  max_sequence_length: 512
  input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
  input { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
  output { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 256 ] }
  output { name: "pooler_output" data_type: TYPE_FP32 dims: [ 256 ] }
  instance_group { count: 1 }
)pb";

// Collects the text parser's complaints so that the error names the line and column.
class ParseErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    text_ << " line " << line + 1 << ", column " << column + 1 << ": " << message << ";";
  }
  std::string str() const { return text_.str(); }

 private:
  std::ostringstream text_;
};

std::optional<DataType> FromConfigType(config::DataType type) {
  switch (type) {
    case config::TYPE_BOOL: return DataType::kBool;
    case config::TYPE_UINT8: return DataType::kUint8;
    case config::TYPE_INT8: return DataType::kInt8;
    case config::TYPE_INT16: return DataType::kInt16;
    case config::TYPE_INT32: return DataType::kInt32;
    case config::TYPE_INT64: return DataType::kInt64;
    case config::TYPE_FP16: return DataType::kFp16;
    case config::TYPE_BF16: return DataType::kBf16;
    case config::TYPE_FP32: return DataType::kFp32;
    case config::TYPE_FP64: return DataType::kFp64;
    default: return std::nullopt;
  }
}

template <typename Tensor>
Status TensorSpecFromConfig(const Tensor& tensor, const std::string& field, TensorSpec* spec) {
  if (tensor.name().empty()) return InvalidArgument(field + ".name: must not be empty");
  const std::optional<DataType> dtype = FromConfigType(tensor.data_type());
  if (!dtype) return InvalidArgument(field + ".data_type: missing or invalid for '" + tensor.name() + "'");
  spec->dims.assign(tensor.dims().begin(), tensor.dims().end());
  const Status dims = CheckTensorDims(tensor.name(), spec->dims);
  if (!dims.ok()) return InvalidArgument(field + ".dims: " + dims.message());
  spec->name = tensor.name();
  spec->dtype = *dtype;
  return Status::Ok();
}

// Ascending and deduplicated; every entry in [1, limit].
Status GridAxis(const google::protobuf::RepeatedField<int64_t>& values, int64_t limit,
                const std::string& field, const std::string& limit_name, std::vector<int64_t>* axis) {
  std::set<int64_t> sorted;
  for (int64_t value : values) {
    if (value < 1 || value > limit) {
      return InvalidArgument(field + ": " + std::to_string(value) + " is outside [1, " + limit_name +
                             " = " + std::to_string(limit) + "]");
    }
    sorted.insert(value);
  }
  axis->assign(sorted.begin(), sorted.end());
  return Status::Ok();
}

Status CheckUniqueNames(const std::vector<TensorSpec>& tensors, const std::string& field) {
  std::set<std::string> names;
  for (const TensorSpec& tensor : tensors) {
    if (!names.insert(tensor.name).second) {
      return InvalidArgument(field + ": name '" + tensor.name + "' appears twice");
    }
  }
  return Status::Ok();
}

// The model's identity and its batch limit, which the bucket checks below rely on.
Status HeaderFromConfig(const config::ModelConfig& config, ModelSpec* spec) {
  if (config.name().empty()) return InvalidArgument("name: must not be empty");
  if (config.platform() != kPlatformAotInductor && config.platform() != kPlatformTorchScript &&
      config.platform() != kPlatformBuiltinEncoder) {
    return InvalidArgument("platform: '" + config.platform() + "' is not served (use '" +
                           kPlatformAotInductor + "', '" + kPlatformTorchScript + "' or '" +
                           kPlatformBuiltinEncoder + "')");
  }
  if (config.max_batch_size() < 1) {
    return InvalidArgument("max_batch_size: must be at least 1, got " +
                           std::to_string(config.max_batch_size()));
  }
  spec->name = config.name();
  spec->platform = config.platform();
  spec->max_batch_size = config.max_batch_size();
  return Status::Ok();
}

Status InputsFromConfig(const config::ModelConfig& config, std::vector<TensorSpec>* inputs) {
  if (config.input_size() == 0) return InvalidArgument("input: the model declares no inputs");
  inputs->clear();
  for (int i = 0; i < config.input_size(); ++i) {
    TensorSpec tensor;
    const std::string field = "input[" + std::to_string(i) + "]";
    Status status = TensorSpecFromConfig(config.input(i), field, &tensor);
    if (!status.ok()) return status;
    tensor.pad_value = config.input(i).pad_value();
    inputs->push_back(std::move(tensor));
  }
  return Status::Ok();
}

Status OutputsFromConfig(const config::ModelConfig& config, std::vector<TensorSpec>* outputs) {
  if (config.output_size() == 0) return InvalidArgument("output: the model declares no outputs");
  outputs->clear();
  for (int i = 0; i < config.output_size(); ++i) {
    TensorSpec tensor;
    Status status = TensorSpecFromConfig(config.output(i), "output[" + std::to_string(i) + "]", &tensor);
    if (!status.ok()) return status;
    outputs->push_back(std::move(tensor));
  }
  return Status::Ok();
}

Status TensorsFromConfig(const config::ModelConfig& config, ModelSpec* spec) {
  Status status = InputsFromConfig(config, &spec->inputs);
  if (!status.ok()) return status;
  status = OutputsFromConfig(config, &spec->outputs);
  if (!status.ok()) return status;
  for (const auto& [tensors, field] : {std::pair{&spec->inputs, "input"}, {&spec->outputs, "output"}}) {
    status = CheckUniqueNames(*tensors, field);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

// The length limit of a model with a variable dimension; a fixed-shape model has none to configure,
// and its one length is kFixedShapeLength.
Status SequenceLimitFromConfig(const config::ModelConfig& config, ModelSpec* spec) {
  if (spec->has_sequence_length()) {
    if (config.max_sequence_length() < 1) {
      return InvalidArgument("max_sequence_length: must be at least 1, got " +
                             std::to_string(config.max_sequence_length()));
    }
    spec->max_sequence_length = config.max_sequence_length();
    return Status::Ok();
  }
  const char* fixed = ": no input has a -1 dimension, so there is no length to limit; leave it out";
  if (config.max_sequence_length() != 0) {
    return InvalidArgument(std::string("max_sequence_length") + fixed);
  }
  if (config.buckets().sequence_lengths_size() > 0) {
    return InvalidArgument(std::string("buckets.sequence_lengths") + fixed);
  }
  for (int i = 0; i < config.output_size(); ++i) {
    if (spec->outputs[i].variable_dim() >= 0) {
      return InvalidArgument("output[" + std::to_string(i) + "].dims: -1 in '" +
                             spec->outputs[i].name + "', but no input has a -1 dimension to follow");
    }
  }
  spec->max_sequence_length = kFixedShapeLength;
  return Status::Ok();
}

// The configured grid, or the default one along an axis the config leaves empty.
Status BucketGridFromConfig(const config::ModelConfig& config, ModelSpec* spec) {
  Status status = GridAxis(config.buckets().batch_sizes(), spec->max_batch_size, "buckets.batch_sizes",
                           "max_batch_size", &spec->bucket_batch_sizes);
  if (!status.ok()) return status;
  status = GridAxis(config.buckets().sequence_lengths(), spec->max_sequence_length,
                    "buckets.sequence_lengths", "max_sequence_length", &spec->bucket_lengths);
  if (!status.ok()) return status;
  if (spec->bucket_batch_sizes.empty()) {
    spec->bucket_batch_sizes = DefaultBucketBatchSizes(spec->max_batch_size);
  }
  if (spec->bucket_lengths.empty()) {
    // A fixed-shape model's max_sequence_length is kFixedShapeLength: the grid's one length.
    spec->bucket_lengths = DefaultBucketLengths(spec->max_sequence_length);
  }
  return Status::Ok();
}

Status ExecutionFromConfig(const config::ModelConfig& config, ModelSpec* spec) {
  switch (config.precision()) {
    case config::PRECISION_DEFAULT:
    case config::PRECISION_FP32: spec->precision = Precision::kFp32; break;
    case config::PRECISION_FP16: spec->precision = Precision::kFp16; break;
    case config::PRECISION_BF16: spec->precision = Precision::kBf16; break;
    default: return InvalidArgument("precision: unknown value");
  }
  spec->cuda_graphs_disabled = config.cuda_graphs().disable();
  if (config.cuda_graphs().verify_rtol() < 0) {
    return InvalidArgument("cuda_graphs.verify_rtol: must not be negative");
  }
  spec->verify_rtol = config.cuda_graphs().verify_rtol();
  return Status::Ok();
}

// Instance groups and batching live outside the spec; checked here so that a bad config fails at load.
Status CheckSchedulingConfig(const config::ModelConfig& config) {
  for (int i = 0; i < config.instance_group_size(); ++i) {
    if (config.instance_group(i).count() < 0) {
      return InvalidArgument("instance_group[" + std::to_string(i) + "].count: must not be negative");
    }
  }
  if (!config::DynamicBatching::Policy_IsValid(config.dynamic_batching().policy())) {
    return InvalidArgument("dynamic_batching.policy: unknown value " +
                           std::to_string(config.dynamic_batching().policy()) + " (SIZE_BINNED, FIFO)");
  }
  return SchedulerOptionsFromConfig(config).Validate();
}

// Stops at the first error, in this order: the grid step relies on the limits checked before it.
Status BuildSpec(const config::ModelConfig& config, ModelSpec* spec) {
  Status status = HeaderFromConfig(config, spec);
  if (status.ok()) status = TensorsFromConfig(config, spec);
  if (status.ok()) status = SequenceLimitFromConfig(config, spec);
  if (status.ok()) status = BucketGridFromConfig(config, spec);
  if (status.ok()) status = ExecutionFromConfig(config, spec);
  if (status.ok()) status = CheckSchedulingConfig(config);
  return status;
}

}  // namespace

Status ParseModelConfig(const std::string& text, const std::string& origin,
                        config::ModelConfig* config) {
  google::protobuf::TextFormat::Parser parser;
  ParseErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, config)) {
    return InvalidArgument(origin + ": not a valid ModelConfig:" + errors.str());
  }
  return Status::Ok();
}

Status LoadModelConfig(const std::string& path, config::ModelConfig* config) {
  std::ifstream file(path);
  if (!file) return NotFound(path + ": cannot open the model's config.pbtxt");
  std::ostringstream text;
  text << file.rdbuf();
  return ParseModelConfig(text.str(), path, config);
}

Status ModelSpecFromConfig(const config::ModelConfig& config, ModelSpec* spec) {
  Status status = BuildSpec(config, spec);
  if (status.ok()) return status;
  return Status(status.code(), "model '" + config.name() + "': " + status.message());
}

config::ModelConfig BuiltinEncoderConfig() {
  config::ModelConfig config;
  // The text is part of the binary and covered by tests; failing to parse it is a build defect.
  Status status = ParseModelConfig(kBuiltinEncoderConfig, "built-in encoder config", &config);
  if (!status.ok()) std::abort();
  return config;
}

SchedulerOptions SchedulerOptionsFromConfig(const config::ModelConfig& config) {
  SchedulerOptions options;
  const config::DynamicBatching& batching = config.dynamic_batching();
  options.max_queue_delay_us = config.has_dynamic_batching()
                                   ? static_cast<int64_t>(batching.max_queue_delay_microseconds())
                                   : kDefaultMaxQueueDelayUs;
  options.batching_disabled = batching.disable();
  options.max_queue_size = batching.max_queue_size() > 0
                               ? static_cast<int64_t>(batching.max_queue_size())
                               : kDefaultMaxQueueSize;
  options.policy = batching.policy() == config::DynamicBatching::FIFO ? BatchingPolicy::kFifo
                                                                      : BatchingPolicy::kSizeBinned;
  return options;
}

}  // namespace graphserve
