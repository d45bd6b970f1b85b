#include "graphserve/server/config/config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

namespace graphserve {
namespace {

constexpr const char* kBuiltinEncoderConfig = R"pb(
  name: "encoder"
  platform: "graphserve_encoder"
  max_batch_size: 32
  max_sequence_length: 512
  sequence_mask_input: "attention_mask"
  input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
  input { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
  output { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 256 ] }
  output { name: "pooler_output" data_type: TYPE_FP32 dims: [ 256 ] }
  instance_group { count: 1 }
)pb";

// Triton's fields that graphserve's schema leaves out but skips with a warning: without them every
// answer stays the same (warm-up samples, caching, metric labels, placement and scheduling hints).
// Any other field it lacks is refused: a misspelling (a typo in max_queue_delay_microseconds once
// loaded as a delay of 0), or a Triton feature graphserve does not serve, whose absence could change
// what a request means (ensembles, priority queues, custom op libraries, repository agents).
constexpr std::pair<std::string_view, std::string_view> kSkippedTritonFields[] = {
    {"ModelConfig", "runtime"},
    {"ModelConfig", "metric_tags"},
    {"ModelConfig", "model_warmup"},
    {"ModelConfig", "response_cache"},
    {"ModelConfig", "model_metrics"},
    {"ModelInstanceGroup", "rate_limiter"},
    {"ModelInstanceGroup", "host_policy"},
    {"ModelInstanceGroup", "profile"},
    {"ModelInstanceGroup", "passive"},
    {"ModelInstanceGroup", "secondary_devices"},
    {"ModelOptimizationPolicy", "graph"},
    {"ModelOptimizationPolicy", "priority"},
    {"ModelOptimizationPolicy", "input_pinned_memory"},
    {"ModelOptimizationPolicy", "output_pinned_memory"},
    {"ModelOptimizationPolicy", "gather_kernel_buffer_threshold"},
    {"ModelOptimizationPolicy", "eager_batching"},
    {"ModelOptimizationPolicy.Cuda", "busy_wait_events"},
    {"ModelOptimizationPolicy.Cuda", "output_copy_stream"},
};

// Messages declared empty only to be refused as a whole (model_config.proto): what they hold is
// not looked at.
constexpr std::string_view kRefusedWholeMessages[] = {"ModelSequenceBatching", "BatchInput", "BatchOutput"};

// Collects the text parser's complaints: errors so that the message names the line and column;
// unknown fields (which the parser reports as warnings) as warnings when kSkippedTritonFields has
// them, else as errors.
class ParseErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit ParseErrors(std::string origin) : origin_(std::move(origin)) {}

  void AddError(int line, int column, const std::string& message) override {
    errors_ << " line " << line + 1 << ", column " << column + 1 << ": " << message << ";";
  }
  void AddWarning(int line, int column, const std::string& message) override {
    std::string type, field;
    if (!UnknownField(message, &type, &field)) {
      warnings_.push_back(origin_ + " line " + std::to_string(line + 1) + ", column " +
                          std::to_string(column + 1) + ": " + message);
      return;
    }
    // The line only: the parser reports an unknown field's position after its value.
    const std::string where = " line " + std::to_string(line + 1);
    if (std::find(std::begin(kRefusedWholeMessages), std::end(kRefusedWholeMessages), type) !=
        std::end(kRefusedWholeMessages)) {
      return;
    }
    const std::pair<std::string_view, std::string_view> key{type, field};
    if (std::find(std::begin(kSkippedTritonFields), std::end(kSkippedTritonFields), key) !=
        std::end(kSkippedTritonFields)) {
      warnings_.push_back(origin_ + where + ": Triton's " + type + " field \"" + field +
                          "\" has no use in graphserve; ignored");
      return;
    }
    errors_ << where << ": " << type << " has no field \"" << field
            << "\" (misspelt, or a Triton setting graphserve does not serve);";
  }
  std::string errors() const { return errors_.str(); }
  const ConfigWarnings& warnings() const { return warnings_; }

 private:
  // protobuf's text parser words it `Message type "inference.X" has no field named "y".`
  static bool UnknownField(const std::string& message, std::string* type, std::string* field) {
    constexpr std::string_view kType = "Message type \"inference.";
    constexpr std::string_view kField = "\" has no field named \"";
    if (message.rfind(kType, 0) != 0) return false;
    const size_t type_end = message.find(kField, kType.size());
    if (type_end == std::string::npos) return false;
    const size_t field_begin = type_end + kField.size();
    const size_t field_end = message.find('"', field_begin);
    if (field_end == std::string::npos) return false;
    *type = message.substr(kType.size(), type_end - kType.size());
    *field = message.substr(field_begin, field_end - field_begin);
    return true;
  }

  const std::string origin_;
  std::ostringstream errors_;
  ConfigWarnings warnings_;
};

// The one table between the config's types and the engine's, read both ways.
constexpr std::pair<inference::DataType, DataType> kDataTypes[] = {
    {inference::TYPE_BOOL, DataType::kBool},   {inference::TYPE_UINT8, DataType::kUint8},
    {inference::TYPE_INT8, DataType::kInt8},   {inference::TYPE_INT16, DataType::kInt16},
    {inference::TYPE_INT32, DataType::kInt32}, {inference::TYPE_INT64, DataType::kInt64},
    {inference::TYPE_FP16, DataType::kFp16},   {inference::TYPE_BF16, DataType::kBf16},
    {inference::TYPE_FP32, DataType::kFp32},   {inference::TYPE_FP64, DataType::kFp64},
};

constexpr std::pair<inference::Precision, Precision> kPrecisions[] = {
    {inference::PRECISION_FP32, Precision::kFp32},
    {inference::PRECISION_FP16, Precision::kFp16},
    {inference::PRECISION_BF16, Precision::kBf16},
};

template <typename Tensor>
Status TensorSpecFromConfig(const Tensor& tensor, const std::string& field, TensorSpec* spec) {
  if (tensor.name().empty()) return InvalidArgument(field + ".name: must not be empty");
  const std::optional<DataType> dtype = DataTypeFromConfig(tensor.data_type());
  if (!dtype) {
    const std::string type = inference::DataType_Name(tensor.data_type());
    return InvalidArgument(field + ".data_type: " + (type.empty() ? "invalid" : type) + " for '" +
                           tensor.name() + "' is not served");
  }
  spec->dims.assign(tensor.dims().begin(), tensor.dims().end());
  const Status dims = CheckTensorDims(tensor.name(), spec->dims);
  if (!dims.ok()) return InvalidArgument(field + ".dims: " + dims.message());
  spec->name = tensor.name();
  spec->dtype = *dtype;
  return Status::Ok();
}

// Ascending and deduplicated; every entry in [1, limit]. `limit_name` says where the limit comes
// from.
Status GridAxis(const google::protobuf::RepeatedField<int64_t>& values, int64_t limit,
                const std::string& field, const std::string& limit_name, std::vector<int64_t>* axis) {
  std::set<int64_t> sorted;
  for (int64_t value : values) {
    if (value < 1 || value > limit) {
      return InvalidArgument(field + ": " + std::to_string(value) + " is outside [1, " +
                             std::to_string(limit) + "] (" + limit_name + ")");
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
Status HeaderFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
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

// 1023 rather than 1023.000000.
std::string FormatNumber(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// A value the config gives for an input's elements (pad_value, min_value, max_value) must be one of
// its type: padding converts it (300 into a UINT8 failed at warm-up, 0.5 into an INT64 became 0),
// and a NaN bound refused every request.
Status CheckElementValue(double value, const std::string& field, DataType dtype) {
  if (!std::isfinite(value)) {
    return InvalidArgument(field + ": " + FormatNumber(value) + " is not a finite number");
  }
  double lowest = 0, highest = 0;
  switch (dtype) {
    case DataType::kBool: lowest = 0, highest = 1; break;
    case DataType::kUint8: lowest = 0, highest = 255; break;
    case DataType::kInt8: lowest = -128, highest = 127; break;
    case DataType::kInt16: lowest = -32768, highest = 32767; break;
    case DataType::kInt32: lowest = -2147483648.0, highest = 2147483647.0; break;
    // 2^63 is a double; the largest int64 is not, and a double of 2^63 would overflow.
    case DataType::kInt64:
      lowest = -9223372036854775808.0, highest = std::nextafter(9223372036854775808.0, 0.0);
      break;
    case DataType::kFp16: lowest = -65504, highest = 65504; break;
    default: return Status::Ok();  // bf16, fp32, fp64 hold any finite double a config may reasonably give
  }
  const bool integral = dtype != DataType::kFp16;
  if (value < lowest || value > highest || (integral && value != std::floor(value))) {
    return InvalidArgument(field + ": " + FormatNumber(value) + " is not a " + DataTypeName(dtype) +
                           " value");
  }
  return Status::Ok();
}

Status ValueRangeFromConfig(const inference::ModelInput& input, const std::string& field,
                            const TensorSpec& tensor, ValueRange* range) {
  *range = ValueRange{};
  Status status = CheckElementValue(tensor.pad_value, field + ".pad_value", tensor.dtype);
  if (status.ok() && input.has_min_value()) {
    status = CheckElementValue(input.min_value(), field + ".min_value", tensor.dtype);
  }
  if (status.ok() && input.has_max_value()) {
    status = CheckElementValue(input.max_value(), field + ".max_value", tensor.dtype);
  }
  if (!status.ok()) return status;
  if (!input.has_min_value() && !input.has_max_value()) return Status::Ok();
  // The server reads these types' values as numbers; half floats it never decodes.
  switch (tensor.dtype) {
    case DataType::kFp16:
    case DataType::kBf16:
    case DataType::kBool:
      return InvalidArgument(field + ": min_value/max_value are not supported for " +
                             DataTypeName(tensor.dtype) + " inputs");
    default:
      break;
  }
  if (input.has_min_value()) range->min = input.min_value();
  if (input.has_max_value()) range->max = input.max_value();
  if (range->min && range->max && *range->min > *range->max) {
    return InvalidArgument(field + ": min_value " + FormatNumber(*range->min) + " is above max_value " +
                           FormatNumber(*range->max));
  }
  const double pad = tensor.pad_value;
  if ((range->min && pad < *range->min) || (range->max && pad > *range->max)) {
    return InvalidArgument(field + ": pad_value " + FormatNumber(pad) +
                           " is outside [min_value, max_value]: padding would feed the model what no "
                           "request may");
  }
  return Status::Ok();
}

Status InputsFromConfig(const inference::ModelConfig& config, std::vector<TensorSpec>* inputs,
                        std::vector<ValueRange>* ranges) {
  if (config.input_size() == 0) return InvalidArgument("input: the model declares no inputs");
  inputs->clear();
  ranges->clear();
  bool bounded = false;
  for (int i = 0; i < config.input_size(); ++i) {
    TensorSpec tensor;
    const std::string field = "input[" + std::to_string(i) + "]";
    Status status = TensorSpecFromConfig(config.input(i), field, &tensor);
    if (!status.ok()) return status;
    tensor.pad_value = config.input(i).pad_value();
    ValueRange range;
    status = ValueRangeFromConfig(config.input(i), field, tensor, &range);
    if (!status.ok()) return status;
    bounded = bounded || range.min || range.max;
    ranges->push_back(range);
    inputs->push_back(std::move(tensor));
  }
  if (!bounded) ranges->clear();
  return Status::Ok();
}

Status OutputsFromConfig(const inference::ModelConfig& config, std::vector<TensorSpec>* outputs) {
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

// ---- ragged batching (Triton's allow_ragged_batch, batch_input, batch_output) -------------------

bool AnyRaggedInput(const inference::ModelConfig& config) {
  return std::any_of(config.input().begin(), config.input().end(),
                     [](const inference::ModelInput& input) { return input.allow_ragged_batch(); });
}

// A batch_input or batch_output's one source input: a ragged input of the model.
Status RaggedSource(const google::protobuf::RepeatedPtrField<std::string>& sources, const std::string& field,
                    const ModelSpec& spec) {
  if (sources.size() != 1) {
    return InvalidArgument(field + ".source_input: names " + std::to_string(sources.size()) +
                           " inputs; graphserve takes exactly one");
  }
  const bool ragged = std::any_of(spec.inputs.begin(), spec.inputs.end(), [&](const TensorSpec& input) {
    return input.name == sources[0] && input.ragged;
  });
  if (!ragged) {
    return InvalidArgument(field + ".source_input: '" + sources[0] +
                           "' is not an input with allow_ragged_batch");
  }
  return Status::Ok();
}

// The kinds served: each a fixed-size buffer of a bucket's rows, which a CUDA graph can replay.
// BATCH_MAX_ELEMENT_COUNT_AS_SHAPE's shape would change with every batch (a graph fixes it) and the
// item-shape kinds describe requests, not rows.
Status BatchInputKindFromConfig(inference::BatchInput::Kind kind, const std::string& field,
                                BatchInputKind* served) {
  switch (kind) {
    case inference::BatchInput::BATCH_ELEMENT_COUNT:
      *served = BatchInputKind::kElementCount;
      return Status::Ok();
    case inference::BatchInput::BATCH_ACCUMULATED_ELEMENT_COUNT:
      *served = BatchInputKind::kAccumulatedElementCount;
      return Status::Ok();
    case inference::BatchInput::BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
      *served = BatchInputKind::kAccumulatedElementCountWithZero;
      return Status::Ok();
    default:
      break;
  }
  const std::string name = inference::BatchInput::Kind_Name(kind);
  return InvalidArgument(field + ".kind: " + (name.empty() ? "unknown value " + std::to_string(kind) : name) +
                         " is not served (BATCH_ELEMENT_COUNT, BATCH_ACCUMULATED_ELEMENT_COUNT and "
                         "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO are)");
}

Status BatchInputsFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  std::set<std::string> names;
  for (const TensorSpec& input : spec->inputs) names.insert(input.name);
  for (int i = 0; i < config.batch_input_size(); ++i) {
    const inference::BatchInput& batch_input = config.batch_input(i);
    const std::string field = "batch_input[" + std::to_string(i) + "]";
    TensorSpec tensor;
    Status status = BatchInputKindFromConfig(batch_input.kind(), field, &tensor.batch_input_kind);
    if (!status.ok()) return status;
    if (batch_input.target_name_size() != 1 || batch_input.target_name(0).empty()) {
      return InvalidArgument(field + ".target_name: names " + std::to_string(batch_input.target_name_size()) +
                             " tensors; graphserve takes exactly one");
    }
    tensor.name = batch_input.target_name(0);
    if (!names.insert(tensor.name).second) {
      return InvalidArgument(field + ".target_name: '" + tensor.name +
                             "' is already an input's or batch input's name");
    }
    if (batch_input.data_type() != inference::TYPE_INT32 &&
        batch_input.data_type() != inference::TYPE_INT64) {
      return InvalidArgument(field + ".data_type: " + inference::DataType_Name(batch_input.data_type()) +
                             " for '" + tensor.name + "' is not served (TYPE_INT32 or TYPE_INT64)");
    }
    tensor.dtype = *DataTypeFromConfig(batch_input.data_type());
    status = RaggedSource(batch_input.source_input(), field, *spec);
    if (!status.ok()) return status;
    spec->batch_inputs.push_back(std::move(tensor));
  }
  return Status::Ok();
}

Status BatchOutputsFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  for (int i = 0; i < config.batch_output_size(); ++i) {
    const inference::BatchOutput& batch_output = config.batch_output(i);
    const std::string field = "batch_output[" + std::to_string(i) + "]";
    if (batch_output.kind() != inference::BatchOutput::BATCH_SCATTER_WITH_INPUT_SHAPE) {
      return InvalidArgument(field + ".kind: unknown value " + std::to_string(batch_output.kind()) +
                             " (BATCH_SCATTER_WITH_INPUT_SHAPE is served)");
    }
    Status status = RaggedSource(batch_output.source_input(), field, *spec);
    if (!status.ok()) return status;
    if (batch_output.target_name_size() == 0) return InvalidArgument(field + ".target_name: names no output");
    for (const std::string& name : batch_output.target_name()) {
      const auto output = std::find_if(spec->outputs.begin(), spec->outputs.end(),
                                       [&](const TensorSpec& candidate) { return candidate.name == name; });
      if (output == spec->outputs.end()) {
        return InvalidArgument(field + ".target_name: '" + name + "' is not one of the model's outputs");
      }
      if (output->dims.empty() || output->dims.front() != -1) {
        return InvalidArgument(field + ".target_name: '" + name +
                               "' must have dims [ -1, ... ] (its tokens first)");
      }
      output->ragged = true;
    }
  }
  return Status::Ok();
}

// A ragged model: every input ragged and one token per position ([ -1 ]), so that a row's element
// count is its length; every output either scattered (its -1 first) or one per row (no -1).
Status RaggedFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  spec->ragged = AnyRaggedInput(config);
  spec->batch_inputs.clear();
  if (!spec->ragged) {
    if (config.batch_input_size() > 0) {
      return InvalidArgument("batch_input: needs inputs with allow_ragged_batch: true (ragged batching)");
    }
    if (config.batch_output_size() > 0) {
      return InvalidArgument("batch_output: needs inputs with allow_ragged_batch: true (ragged batching)");
    }
    return Status::Ok();
  }
  if (config.platform() == kPlatformBuiltinEncoder) {
    return InvalidArgument(std::string("input.allow_ragged_batch: the ") + kPlatformBuiltinEncoder +
                           " platform pads; ragged models are TorchScript or AOTInductor");
  }
  for (size_t i = 0; i < spec->inputs.size(); ++i) {
    const std::string field = "input[" + std::to_string(i) + "]";
    if (!config.input(static_cast<int>(i)).allow_ragged_batch()) {
      return InvalidArgument(field + ".allow_ragged_batch: '" + spec->inputs[i].name +
                             "' must be ragged too: in a ragged model every input is");
    }
    if (spec->inputs[i].dims != std::vector<int64_t>{-1}) {
      return InvalidArgument(field + ".dims: a ragged input is [ -1 ] (one element per token), '" +
                             spec->inputs[i].name + "' has " + ShapeToString(spec->inputs[i].dims));
    }
    spec->inputs[i].ragged = true;
  }
  if (!config.sequence_mask_input().empty()) {
    return InvalidArgument("sequence_mask_input: a ragged model pads nothing inside a row; leave it out");
  }
  Status status = BatchInputsFromConfig(config, spec);
  if (status.ok()) status = BatchOutputsFromConfig(config, spec);
  if (!status.ok()) return status;
  for (size_t i = 0; i < spec->outputs.size(); ++i) {
    if (spec->outputs[i].variable_dim() >= 0 && !spec->outputs[i].ragged) {
      return InvalidArgument("output[" + std::to_string(i) + "].dims: -1 in '" + spec->outputs[i].name +
                             "' of a ragged model needs a batch_output BATCH_SCATTER_WITH_INPUT_SHAPE");
    }
  }
  return Status::Ok();
}

Status TensorsFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  Status status = InputsFromConfig(config, &spec->inputs, &spec->input_ranges);
  if (!status.ok()) return status;
  status = OutputsFromConfig(config, &spec->outputs);
  if (!status.ok()) return status;
  for (const auto& [tensors, field] : {std::pair{&spec->inputs, "input"}, {&spec->outputs, "output"}}) {
    status = CheckUniqueNames(*tensors, field);
    if (!status.ok()) return status;
  }
  return RaggedFromConfig(config, spec);
}

// The length limit of a model with a variable dimension; a fixed-shape model has none to configure,
// and its one length is kFixedShapeLength.
Status SequenceLimitFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
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
  if (config.buckets().has_max_batch_tokens()) {
    return InvalidArgument(std::string("buckets.max_batch_tokens") + fixed);
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

// The mask input that makes padding the variable dimension safe (ModelSpec::sequence_mask_input):
// an input of the model that varies along that dimension, padded with 0, the value that marks a
// position as padding.
Status SequenceMaskFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  // The built-in encoder masks with its attention_mask input whatever its config says.
  const bool builtin = config.platform() == kPlatformBuiltinEncoder;
  const std::string name = config.sequence_mask_input().empty() && builtin ? std::string("attention_mask")
                                                                           : config.sequence_mask_input();
  spec->sequence_mask_input.clear();
  if (name.empty()) return Status::Ok();
  if (!spec->has_sequence_length()) {
    return InvalidArgument("sequence_mask_input: no input has a -1 dimension, so nothing is padded "
                           "along one; leave it out");
  }
  const auto mask = std::find_if(spec->inputs.begin(), spec->inputs.end(),
                                 [&](const TensorSpec& input) { return input.name == name; });
  if (mask == spec->inputs.end()) {
    return InvalidArgument("sequence_mask_input: '" + name + "' is not one of the model's inputs");
  }
  const std::string field = "input[" + std::to_string(mask - spec->inputs.begin()) + "]";
  if (mask->variable_dim() < 0) {
    return InvalidArgument("sequence_mask_input: '" + name + "' (" + field +
                           ") has no -1 dimension, so it cannot mark padded positions");
  }
  if (mask->pad_value != 0) {
    return InvalidArgument(field + ".pad_value: " + FormatNumber(mask->pad_value) + " for '" + name +
                           "', the sequence_mask_input; padding must write 0, which marks a position "
                           "as padding");
  }
  spec->sequence_mask_input = name;
  return Status::Ok();
}

// The configured grid, or the default one along an axis the config leaves empty. The token budget
// is the configured one, else the default where the batch sizes are the default too (a length-
// varying model's: a fixed-shape model has none); the batch sizes above max_batch_size must fit
// it at the shortest length, so that each is a point of the grid.
// A ragged model's grid: rows up to max_batch_size + 1 (the last always present), token sizes up
// to the token budget, which must hold one row of max_sequence_length; every pair a point.
Status RaggedGridFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  const inference::BucketGrid& buckets = config.buckets();
  spec->max_batch_tokens =
      buckets.has_max_batch_tokens() ? buckets.max_batch_tokens() : kDefaultMaxBatchTokens;
  if (spec->max_batch_tokens < spec->max_sequence_length) {
    return InvalidArgument("buckets.max_batch_tokens: " + std::to_string(spec->max_batch_tokens) +
                           " is below max_sequence_length " + std::to_string(spec->max_sequence_length) +
                           "; a ragged batch must hold one row of the longest length");
  }
  Status status = GridAxis(buckets.sequence_lengths(), spec->max_batch_tokens, "buckets.sequence_lengths",
                           "buckets.max_batch_tokens: a ragged model's token sizes", &spec->bucket_lengths);
  if (!status.ok()) return status;
  if (spec->bucket_lengths.empty()) {
    spec->bucket_lengths = DefaultRaggedTokenSizes(spec->max_sequence_length, spec->max_batch_tokens);
  }
  if (spec->bucket_lengths.back() < spec->max_sequence_length) {
    return InvalidArgument("buckets.sequence_lengths: the largest token size " +
                           std::to_string(spec->bucket_lengths.back()) + " is below max_sequence_length " +
                           std::to_string(spec->max_sequence_length) +
                           "; one row of the longest length must fit");
  }
  // The largest row size always has a spare row beyond max_batch_size for the tail's filler row
  // (RaggedLargestRows), or a full batch that leaves a tail would have no bucket and run eagerly.
  const int64_t largest_rows = RaggedLargestRows(spec->max_batch_size);
  if (buckets.batch_sizes().empty()) {
    // Rows are nearly free on the CPU (an offset and a pooled vector each), not on CUDA, where
    // FlashAttention launches work for every row of the bucket: a few row sizes by default.
    spec->bucket_batch_sizes = DefaultRaggedRowSizes(spec->max_batch_size);
    return Status::Ok();
  }
  status = GridAxis(buckets.batch_sizes(), largest_rows, "buckets.batch_sizes",
                    "max_batch_size + 1: a ragged bucket's rows, one spare for the tail",
                    &spec->bucket_batch_sizes);
  if (status.ok() && spec->bucket_batch_sizes.back() != largest_rows) {
    spec->bucket_batch_sizes.push_back(largest_rows);
  }
  return status;
}

Status BucketGridFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  if (spec->ragged) return RaggedGridFromConfig(config, spec);
  const inference::BucketGrid& buckets = config.buckets();
  Status status = GridAxis(buckets.sequence_lengths(), spec->max_sequence_length,
                           "buckets.sequence_lengths", "max_sequence_length", &spec->bucket_lengths);
  if (!status.ok()) return status;
  if (spec->bucket_lengths.empty()) {
    // A fixed-shape model's max_sequence_length is kFixedShapeLength: the grid's one length.
    spec->bucket_lengths = DefaultBucketLengths(spec->max_sequence_length);
  }
  if (buckets.max_batch_tokens() < 0) {
    return InvalidArgument("buckets.max_batch_tokens: must not be negative, got " +
                           std::to_string(buckets.max_batch_tokens()));
  }
  const bool default_sizes = buckets.batch_sizes().empty();
  spec->max_batch_tokens =
      buckets.has_max_batch_tokens() ? buckets.max_batch_tokens()
      : default_sizes && spec->has_sequence_length() ? kDefaultMaxBatchTokens
                                                     : 0;
  const int64_t shortest = spec->bucket_lengths.front();
  if (default_sizes) {
    spec->bucket_batch_sizes =
        DefaultBucketBatchSizes(spec->max_batch_size, spec->max_batch_tokens, shortest);
    return Status::Ok();
  }
  if (spec->max_batch_tokens == 0) {
    return GridAxis(buckets.batch_sizes(), spec->max_batch_size, "buckets.batch_sizes",
                    "max_batch_size; batches of more rows need buckets.max_batch_tokens",
                    &spec->bucket_batch_sizes);
  }
  const int64_t limit =
      std::max<int64_t>(spec->max_batch_size, spec->max_batch_tokens / shortest);
  return GridAxis(buckets.batch_sizes(), limit, "buckets.batch_sizes",
                  "max_batch_size " + std::to_string(spec->max_batch_size) +
                      ", or buckets.max_batch_tokens " + std::to_string(spec->max_batch_tokens) +
                      " / the shortest bucket length " + std::to_string(shortest),
                  &spec->bucket_batch_sizes);
}

Status ExecutionFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  spec->precision = Precision::kFp32;
  if (config.precision() != inference::PRECISION_DEFAULT) {
    const auto* found = std::find_if(std::begin(kPrecisions), std::end(kPrecisions),
                                     [&](const auto& entry) { return entry.first == config.precision(); });
    if (found == std::end(kPrecisions)) return InvalidArgument("precision: unknown value");
    spec->precision = found->second;
  }
  spec->cuda_graphs_disabled = config.cuda_graphs().disable();
  if (config.cuda_graphs().verify_rtol() < 0) {
    return InvalidArgument("cuda_graphs.verify_rtol: must not be negative");
  }
  spec->verify_rtol = config.cuda_graphs().verify_rtol();
  return Status::Ok();
}

// Batching lives outside the spec; checked here so that a bad config fails at load (instance groups
// are checked where they are placed: InstancePlacements).
Status CheckSchedulingConfig(const inference::ModelConfig& config) {
  return SchedulerOptionsFromConfig(config).Validate();
}

// protobuf keeps an enum number its schema does not name (`kind: 9`): refused, not read as the
// default.
Status CheckEnumValues(const inference::ModelConfig& config) {
  for (int i = 0; i < config.instance_group_size(); ++i) {
    if (!inference::ModelInstanceGroup::Kind_IsValid(config.instance_group(i).kind())) {
      return InvalidArgument("instance_group[" + std::to_string(i) + "].kind: unknown value " +
                             std::to_string(config.instance_group(i).kind()));
    }
  }
  for (int i = 0; i < config.input_size(); ++i) {
    if (!inference::ModelInput::Format_IsValid(config.input(i).format())) {
      return InvalidArgument("input[" + std::to_string(i) + "].format: unknown value " +
                             std::to_string(config.input(i).format()));
    }
  }
  const int action = config.dynamic_batching().default_queue_policy().timeout_action();
  if (!inference::ModelQueuePolicy::TimeoutAction_IsValid(action)) {
    return InvalidArgument("dynamic_batching.default_queue_policy.timeout_action: unknown value " +
                           std::to_string(action));
  }
  if (!inference::ModelDynamicBatching::Policy_IsValid(config.dynamic_batching().policy())) {
    return InvalidArgument("dynamic_batching.policy: unknown value " +
                           std::to_string(config.dynamic_batching().policy()) + " (SIZE_BINNED, FIFO)");
  }
  return Status::Ok();  // precision: ExecutionFromConfig refuses numbers kPrecisions lacks
}

// Stops at the first error, in this order: the grid step relies on the limits checked before it.
Status BuildSpec(const inference::ModelConfig& config, ModelSpec* spec) {
  Status status = CheckEnumValues(config);
  if (status.ok()) status = HeaderFromConfig(config, spec);
  if (status.ok()) status = TensorsFromConfig(config, spec);
  if (status.ok()) status = SequenceLimitFromConfig(config, spec);
  if (status.ok()) status = SequenceMaskFromConfig(config, spec);
  if (status.ok()) status = BucketGridFromConfig(config, spec);
  if (status.ok()) status = ExecutionFromConfig(config, spec);
  if (status.ok()) status = CheckSchedulingConfig(config);
  return status;
}

// The offset in `text` of `column` on the line starting at `line_start`, counted as protobuf's
// Tokenizer counts columns (a tab advances to the next multiple of 8).
size_t Offset(const std::string& text, size_t line_start, int column) {
  size_t offset = line_start;
  for (int at = 0; at < column && offset < text.size(); ++offset) {
    at = text[offset] == '\t' ? at + 8 - at % 8 : at + 1;
  }
  return offset;
}

// protobuf's text parser skips an unknown field written `name: [ {...} ]`, but fails on
// `name [ {...} ]`, the form Triton's configs use for model_warmup and other repeated blocks that
// graphserve does not declare. Returns `text` with a ':' after every field name that opens a list
// without one (known fields read both forms the same).
std::string ColonBeforeLists(const std::string& text) {
  class Silent : public google::protobuf::io::ErrorCollector {
    void AddError(int, int, const std::string&) override {}  // the parser reports them
  } silent;
  google::protobuf::io::ArrayInputStream input(text.data(), static_cast<int>(text.size()));
  google::protobuf::io::Tokenizer tokenizer(&input, &silent);
  tokenizer.set_comment_style(google::protobuf::io::Tokenizer::SH_COMMENT_STYLE);
  std::vector<size_t> line_starts = {0};
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') line_starts.push_back(i + 1);
  }
  std::vector<char> scopes;  // '{' inside a message, '[' inside a list of values
  std::vector<size_t> colons;
  // Value-initialised: the first token has none before it (TYPE_START), not whatever the stack held.
  google::protobuf::io::Tokenizer::Token before{}, previous{};
  while (tokenizer.Next()) {
    const google::protobuf::io::Tokenizer::Token& token = tokenizer.current();
    const bool in_message = scopes.empty() || scopes.back() == '{';
    if (token.text == "[" && previous.type == google::protobuf::io::Tokenizer::TYPE_IDENTIFIER &&
        before.text != ":" && in_message) {
      colons.push_back(Offset(text, line_starts[previous.line], previous.end_column));
    }
    if (token.text == "{" || token.text == "<") scopes.push_back('{');
    if (token.text == "[") scopes.push_back('[');
    if ((token.text == "}" || token.text == ">" || token.text == "]") && !scopes.empty()) {
      scopes.pop_back();
    }
    before = previous;
    previous = token;
  }
  std::string fixed = text;
  for (auto at = colons.rbegin(); at != colons.rend(); ++at) fixed.insert(*at, ":");
  return fixed;
}

}  // namespace

std::optional<DataType> DataTypeFromConfig(inference::DataType type) {
  for (const auto& [config_type, engine_type] : kDataTypes) {
    if (config_type == type) return engine_type;
  }
  return std::nullopt;
}

inference::DataType DataTypeToConfig(DataType type) {
  for (const auto& [config_type, engine_type] : kDataTypes) {
    if (engine_type == type) return config_type;
  }
  return inference::TYPE_INVALID;
}

Status ParseModelConfig(const std::string& text, const std::string& origin,
                        inference::ModelConfig* config, ConfigWarnings* warnings) {
  google::protobuf::TextFormat::Parser parser;
  // Unknown fields reach ParseErrors, which refuses all but Triton's that graphserve may skip.
  parser.AllowUnknownField(true);
  ParseErrors errors(origin);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(ColonBeforeLists(text), config) || !errors.errors().empty()) {
    return InvalidArgument(origin + ": not a valid ModelConfig:" + errors.errors());
  }
  for (const std::string& warning : errors.warnings()) {
    spdlog::warn("{}", warning);
    if (warnings != nullptr) warnings->push_back(warning);
  }
  return Status::Ok();
}

Status LoadModelConfig(const std::string& path, inference::ModelConfig* config,
                       ConfigWarnings* warnings) {
  std::ifstream file(path);
  if (!file) return NotFound(path + ": cannot open the model's config.pbtxt");
  std::ostringstream text;
  text << file.rdbuf();
  return ParseModelConfig(text.str(), path, config, warnings);
}

Status ModelSpecFromConfig(const inference::ModelConfig& config, ModelSpec* spec) {
  Status status = BuildSpec(config, spec);
  if (status.ok()) return status;
  return Status(status.code(), "model '" + config.name() + "': " + status.message());
}

inference::ModelConfig BuiltinEncoderConfig() {
  inference::ModelConfig config;
  // The text is part of the binary and covered by tests; failing to parse it is a build defect.
  Status status = ParseModelConfig(kBuiltinEncoderConfig, "built-in encoder config", &config);
  if (!status.ok()) std::abort();
  return config;
}

SchedulerOptions SchedulerOptionsFromConfig(const inference::ModelConfig& config) {
  SchedulerOptions options;
  const inference::ModelDynamicBatching& batching = config.dynamic_batching();
  options.max_queue_delay_us = config.has_dynamic_batching()
                                   ? static_cast<int64_t>(batching.max_queue_delay_microseconds())
                                   : kDefaultMaxQueueDelayUs;
  options.batching_disabled = batching.disable();
  options.max_queue_size = batching.max_queue_size() > 0
                               ? static_cast<int64_t>(batching.max_queue_size())
                               : kDefaultMaxQueueSize;
  options.policy = batching.policy() == inference::ModelDynamicBatching::FIFO ? BatchingPolicy::kFifo
                                                                      : BatchingPolicy::kSizeBinned;
  const inference::ModelQueuePolicy& queue_policy = batching.default_queue_policy();
  options.queue_policy.default_timeout_us = static_cast<int64_t>(queue_policy.default_timeout_microseconds());
  options.queue_policy.allow_timeout_override = queue_policy.allow_timeout_override();
  // Capped so that a huge number reaches Validate as out of range rather than wrapping negative.
  constexpr uint64_t kLevelsCap = uint64_t{1} << 32;
  options.priority_levels = static_cast<int64_t>(std::min(batching.priority_levels(), kLevelsCap));
  options.default_priority_level = static_cast<int64_t>(std::min(batching.default_priority_level(), kLevelsCap));
  return options;
}

}  // namespace graphserve
