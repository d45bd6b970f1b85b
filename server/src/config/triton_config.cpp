#include "graphserve/server/config/triton_config.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "graphserve/engine/device.h"

namespace graphserve {
namespace {

constexpr const char* kBackendPyTorch = "pytorch";

// Settings of Triton's PyTorch backend for its own libtorch; graphserve runs its models its own way
// (inference mode, one thread per instance), so they are accepted and ignored.
constexpr const char* kPyTorchBackendParameters[] = {
    "DISABLE_OPTIMIZED_EXECUTION", "INFERENCE_MODE",       "ENABLE_NVFUSER",
    "ENABLE_JIT_EXECUTOR",         "ENABLE_JIT_PROFILING", "ENABLE_TENSOR_FUSER",
    "ENABLE_WEIGHT_SHARING",       "ENABLE_CACHE_CLEANING", "INTER_OP_THREAD_COUNT",
    "INTRA_OP_THREAD_COUNT",
};

// Warnings about one model: logged under its name and kept for the caller.
class Warnings {
 public:
  Warnings(const std::string& model, ConfigWarnings* kept) : model_(model), kept_(kept) {}
  void Add(const std::string& message) {
    spdlog::warn("model '{}': {}", model_, message);
    if (kept_ != nullptr) kept_->push_back(message);
  }

 private:
  const std::string model_;
  ConfigWarnings* const kept_;
};

bool IsFile(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Quoted(const std::string& key) { return "parameters[\"" + key + "\"]"; }

template <typename Values>
std::string List(const Values& values) {
  std::string text = "[";
  for (const auto& value : values) text += (text.size() > 1 ? ", " : "") + std::to_string(value);
  return text + "]";
}

template <typename Repeated>
std::set<int64_t> AsSet(const Repeated& values) {
  return std::set<int64_t>(values.begin(), values.end());
}

bool HasVariableDimension(const inference::ModelConfig& config) {
  for (const inference::ModelInput& input : config.input()) {
    if (std::count(input.dims().begin(), input.dims().end(), -1) > 0) return true;
  }
  return false;
}

bool IsRagged(const inference::ModelConfig& config) {
  return std::any_of(config.input().begin(), config.input().end(),
                     [](const inference::ModelInput& input) { return input.allow_ragged_batch(); });
}

// ---- platform ----------------------------------------------------------------------------------

Status ResolvePlatform(const std::string& model_dir, inference::ModelConfig* config,
                       Warnings* warnings) {
  const std::string& backend = config->backend();
  if (!backend.empty() && backend != kBackendPyTorch) {
    return InvalidArgument("backend: '" + backend + "' is not served (backend '" + kBackendPyTorch +
                           "' is: platforms '" + kPlatformAotInductor + "' and '" +
                           kPlatformTorchScript + "')");
  }
  const std::string& filename = config->default_model_filename();
  if (filename.find('/') != std::string::npos || filename == "." || filename == "..") {
    return InvalidArgument("default_model_filename: '" + filename +
                           "' must name a file in the model's folder");
  }
  if (!config->platform().empty()) {
    if (!backend.empty() && config->platform() == kPlatformBuiltinEncoder) {
      return InvalidArgument("backend: '" + backend + "' does not serve platform '" +
                             kPlatformBuiltinEncoder + "'");
    }
    return Status::Ok();
  }
  if (backend.empty()) {
    return InvalidArgument(std::string("platform: missing (set platform, or backend: \"") +
                           kBackendPyTorch + "\")");
  }
  std::string platform;
  if (!filename.empty()) {
    platform = EndsWith(filename, ".pt2") ? kPlatformAotInductor : kPlatformTorchScript;
  } else {
    const bool package = IsFile(model_dir + "/" + kAotInductorFileName);
    const bool torchscript = IsFile(model_dir + "/" + kTorchScriptFileName);
    if (!package && !torchscript) {
      return NotFound("backend: '" + backend + "', but " + model_dir + " holds neither " +
                      kAotInductorFileName + " nor " + kTorchScriptFileName);
    }
    if (package && torchscript) {
      warnings->Add(std::string("backend: both ") + kAotInductorFileName + " and " +
                    kTorchScriptFileName + " are present; serving " + kAotInductorFileName +
                    " (platform or default_model_filename chooses)");
    }
    platform = package ? kPlatformAotInductor : kPlatformTorchScript;
  }
  spdlog::info("model '{}': backend '{}' serves {} as platform '{}'", config->name(), backend,
               filename.empty() ? "the model file found" : filename, platform);
  config->set_platform(platform);
  return Status::Ok();
}

// ---- what graphserve refuses or ignores ----------------------------------------------------------

Status CheckHeader(const inference::ModelConfig& config) {
  if (config.max_batch_size() == 0) {
    return InvalidArgument(
        "max_batch_size: 0 declares a model without a batch dimension, which graphserve does not "
        "serve; set the largest batch (at least 1) and leave the batch out of dims");
  }
  const inference::ModelVersionPolicy& policy = config.version_policy();
  if (policy.has_all()) {
    return InvalidArgument("version_policy.all: graphserve serves one version of each model");
  }
  if (policy.latest().num_versions() > 1) {
    return InvalidArgument("version_policy.latest.num_versions: " +
                           std::to_string(policy.latest().num_versions()) +
                           " versions asked for; graphserve serves one version of each model");
  }
  if (policy.specific().versions_size() > 1) {
    return InvalidArgument("version_policy.specific.versions: " + List(policy.specific().versions()) +
                           "; graphserve serves one version of each model");
  }
  // Each of these changes what the model computes or how requests are formed.
  if (config.has_sequence_batching()) {
    return InvalidArgument("sequence_batching: stateful (sequence) models are not served");
  }
  if (config.model_transaction_policy().decoupled()) {
    return InvalidArgument("model_transaction_policy.decoupled: true: graphserve answers each request "
                           "with exactly one response");
  }
  // batch_input, batch_output and allow_ragged_batch (ragged batching) are checked where the spec
  // is built (ModelSpecFromConfig), with the tensors they name.
  return Status::Ok();
}

// What inputs and outputs have in common.
template <typename Tensor>
Status CheckTensorShape(const Tensor& tensor, const std::string& field) {
  if (tensor.has_reshape()) {
    return InvalidArgument(field + ".reshape: not served; tensors have the shape their dims say");
  }
  if (tensor.is_shape_tensor()) {
    return InvalidArgument(field + ".is_shape_tensor: shape tensors are not served");
  }
  return Status::Ok();
}

Status CheckTensors(const inference::ModelConfig& config, Warnings* warnings) {
  for (int i = 0; i < config.input_size(); ++i) {
    const inference::ModelInput& input = config.input(i);
    const std::string field = "input[" + std::to_string(i) + "]";
    const Status shape = CheckTensorShape(input, field);
    if (!shape.ok()) return shape;
    if (input.optional()) {
      return InvalidArgument(field + ".optional: every input must be given in every request");
    }
    if (input.format() != inference::ModelInput::FORMAT_NONE) {
      warnings->Add(field + ".format: " + inference::ModelInput::Format_Name(input.format()) +
                    " is not acted on (the model gets the tensor as dims say); ignored");
    }
  }
  for (int i = 0; i < config.output_size(); ++i) {
    const inference::ModelOutput& output = config.output(i);
    const std::string field = "output[" + std::to_string(i) + "]";
    const Status shape = CheckTensorShape(output, field);
    if (!shape.ok()) return shape;
    if (!output.label_filename().empty()) {
      warnings->Add(field + ".label_filename: classification results are not served; ignored");
    }
  }
  return Status::Ok();
}

// ---- parameters ----------------------------------------------------------------------------------

// "1, 2,4" → {1, 2, 4}: integers of at least 1, separated by commas and spaces.
Status ParseIntegers(const std::string& field, const std::string& text, std::vector<int64_t>* values) {
  values->clear();
  const char* position = text.data();
  const char* end = text.data() + text.size();
  while (position < end) {
    if (*position == ',' || *position == ' ') {
      ++position;
      continue;
    }
    int64_t value = 0;
    const auto [next, error] = std::from_chars(position, end, value);
    if (error != std::errc() || value < 1 || (next < end && *next != ',' && *next != ' ')) break;
    values->push_back(value);
    position = next;
  }
  if (position < end || values->empty()) {
    return InvalidArgument(field + ": expected integers of at least 1 separated by commas, got \"" +
                           text + "\"");
  }
  return Status::Ok();
}

// "256" → 256: one integer of at least 1.
Status ParseInteger(const std::string& field, const std::string& text, int64_t* value) {
  std::vector<int64_t> parsed;
  Status status = ParseIntegers(field, text, &parsed);
  if (status.ok() && parsed.size() != 1) {
    status = InvalidArgument(field + ": expected one integer, got \"" + text + "\"");
  }
  if (status.ok()) *value = parsed[0];
  return status;
}

Status MergeLengthLimit(const std::string& field, const std::string& value,
                        inference::ModelConfig* config) {
  int64_t limit = 0;
  const Status status = ParseInteger(field, value, &limit);
  if (!status.ok()) return status;
  if (config->max_sequence_length() != 0 && config->max_sequence_length() != limit) {
    return InvalidArgument(field + ": " + value + " contradicts max_sequence_length: " +
                           std::to_string(config->max_sequence_length()));
  }
  config->set_max_sequence_length(limit);
  return Status::Ok();
}

Status MergeTokenBudget(const std::string& field, const std::string& value,
                        inference::ModelConfig* config) {
  int64_t budget = 0;
  const Status status = ParseInteger(field, value, &budget);
  if (!status.ok()) return status;
  inference::BucketGrid* buckets = config->mutable_buckets();
  if (buckets->has_max_batch_tokens() && buckets->max_batch_tokens() != budget) {
    return InvalidArgument(field + ": " + value + " contradicts buckets.max_batch_tokens: " +
                           std::to_string(buckets->max_batch_tokens()));
  }
  buckets->set_max_batch_tokens(budget);
  return Status::Ok();
}

// Fills an empty grid axis from `values`; refuses a filled one that differs. `source` names where
// the values come from, `axis_name` the axis.
Status MergeGridAxis(const std::string& source, const std::set<int64_t>& values,
                     const std::string& axis_name,
                     google::protobuf::RepeatedField<int64_t>* axis) {
  if (axis->empty()) {
    axis->Add(values.begin(), values.end());
    return Status::Ok();
  }
  if (AsSet(*axis) != values) {
    return InvalidArgument(source + ": " + List(values) + " contradicts " + axis_name + ": " +
                           List(*axis));
  }
  return Status::Ok();
}

Status MergePrecision(const std::string& field, const std::string& value,
                      inference::ModelConfig* config) {
  static const std::map<std::string, inference::Precision> kNames = {
      {"fp32", inference::PRECISION_FP32},
      {"fp16", inference::PRECISION_FP16},
      {"bf16", inference::PRECISION_BF16}};
  const auto found = kNames.find(value);
  if (found == kNames.end()) {
    return InvalidArgument(field + ": \"" + value + "\" is not fp32, fp16 or bf16");
  }
  if (config->precision() != inference::PRECISION_DEFAULT && config->precision() != found->second) {
    return InvalidArgument(field + ": \"" + value + "\" contradicts precision: " +
                           inference::Precision_Name(config->precision()));
  }
  config->set_precision(found->second);
  return Status::Ok();
}

Status MergeBatchingPolicy(const std::string& field, const std::string& value,
                           inference::ModelConfig* config) {
  inference::ModelDynamicBatching::Policy policy;
  if (value == "size_binned") {
    policy = inference::ModelDynamicBatching::SIZE_BINNED;
  } else if (value == "fifo") {
    policy = inference::ModelDynamicBatching::FIFO;
  } else {
    return InvalidArgument(field + ": \"" + value + "\" is not size_binned or fifo");
  }
  if (config->dynamic_batching().policy() != inference::ModelDynamicBatching::SIZE_BINNED &&
      config->dynamic_batching().policy() != policy) {
    return InvalidArgument(field + ": \"" + value + "\" contradicts dynamic_batching.policy: " +
                           inference::ModelDynamicBatching::Policy_Name(config->dynamic_batching().policy()));
  }
  // Creating the block must not change the delay its absence means.
  if (!config->has_dynamic_batching()) {
    config->mutable_dynamic_batching()->set_max_queue_delay_microseconds(kDefaultMaxQueueDelayUs);
  }
  config->mutable_dynamic_batching()->set_policy(policy);
  return Status::Ok();
}

Status MergeSequenceMaskInput(const std::string& field, const std::string& value,
                              inference::ModelConfig* config) {
  if (!config->sequence_mask_input().empty() && config->sequence_mask_input() != value) {
    return InvalidArgument(field + ": \"" + value + "\" contradicts sequence_mask_input: \"" +
                           config->sequence_mask_input() + "\"");
  }
  config->set_sequence_mask_input(value);
  return Status::Ok();
}

// "0.5" -> 0.5: one finite number.
Status ParseNumber(const std::string& field, const std::string& text, double* value) {
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, *value);
  if (text.empty() || error != std::errc() || stop != end || !std::isfinite(*value)) {
    return InvalidArgument(field + ": expected a number, got \"" + text + "\"");
  }
  return Status::Ok();
}

Status MergeBatchingDisabled(const std::string& field, const std::string& value, inference::ModelConfig* config) {
  if (value != "true" && value != "false") return InvalidArgument(field + ": \"" + value + "\" is not true or false");
  const bool disabled = value == "true";
  if (config->dynamic_batching().disable() && !disabled) {
    return InvalidArgument(field + ": \"false\" contradicts dynamic_batching.disable: true");
  }
  if (!disabled) return Status::Ok();
  // Unbatched requests run at once: a block created here gets the delay that allows (0).
  config->mutable_dynamic_batching()->set_disable(true);
  return Status::Ok();
}

Status MergeVerifyRtol(const std::string& field, const std::string& value, inference::ModelConfig* config) {
  double rtol = 0;
  const Status status = ParseNumber(field, value, &rtol);
  if (!status.ok()) return status;
  const double given = config->cuda_graphs().verify_rtol();
  if (given != 0 && given != rtol) {
    return InvalidArgument(field + ": " + value + " contradicts cuda_graphs.verify_rtol: " + std::to_string(given));
  }
  config->mutable_cuda_graphs()->set_verify_rtol(rtol);
  return Status::Ok();
}

bool StartsWith(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

bool IsInputValueKey(const std::string& key) {
  return StartsWith(key, kParameterPadValue) || StartsWith(key, kParameterMinValue) ||
         StartsWith(key, kParameterMaxValue);
}

// "pad_value:NAME", "min_value:NAME" or "max_value:NAME": that field of input NAME.
Status MergeInputValue(const std::string& field, const std::string& key, const std::string& value,
                       inference::ModelConfig* config) {
  const size_t colon = key.find(':');
  const std::string setting = key.substr(0, colon);
  const std::string name = key.substr(colon + 1);
  int index = 0;
  while (index < config->input_size() && config->input(index).name() != name) ++index;
  if (index == config->input_size()) return InvalidArgument(field + ": the config has no input '" + name + "'");
  inference::ModelInput* input = config->mutable_input(index);
  double number = 0;
  const Status status = ParseNumber(field, value, &number);
  if (!status.ok()) return status;
  const std::string input_field = "input[" + std::to_string(index) + "]." + setting;
  const auto contradicts = [&](double given) {
    return InvalidArgument(field + ": " + value + " contradicts " + input_field + ": " + std::to_string(given));
  };
  if (setting == "pad_value") {
    if (input->pad_value() != 0 && input->pad_value() != number) return contradicts(input->pad_value());
    input->set_pad_value(number);
  } else if (setting == "min_value") {
    if (input->has_min_value() && input->min_value() != number) return contradicts(input->min_value());
    input->set_min_value(number);
  } else {
    if (input->has_max_value() && input->max_value() != number) return contradicts(input->max_value());
    input->set_max_value(number);
  }
  return Status::Ok();
}

Status ResolveParameters(inference::ModelConfig* config, Warnings* warnings) {
  // Sorted, so that warnings come in the same order every time.
  const std::map<std::string, std::string> parameters = [&] {
    std::map<std::string, std::string> sorted;
    for (const auto& [key, value] : config->parameters()) sorted[key] = value.string_value();
    return sorted;
  }();
  for (const auto& [key, value] : parameters) {
    const std::string field = Quoted(key);
    Status status;
    std::vector<int64_t> values;
    if (key == kParameterMaxSequenceLength) {
      status = MergeLengthLimit(field, value, config);
    } else if (key == kParameterMaxBatchTokens) {
      status = MergeTokenBudget(field, value, config);
    } else if (key == kParameterBucketBatchSizes || key == kParameterBucketSequenceLengths) {
      const bool batch = key == kParameterBucketBatchSizes;
      status = ParseIntegers(field, value, &values);
      if (status.ok()) {
        status = MergeGridAxis(field, std::set<int64_t>(values.begin(), values.end()),
                               batch ? "buckets.batch_sizes" : "buckets.sequence_lengths",
                               batch ? config->mutable_buckets()->mutable_batch_sizes()
                                     : config->mutable_buckets()->mutable_sequence_lengths());
      }
    } else if (key == kParameterPrecision) {
      status = MergePrecision(field, value, config);
    } else if (key == kParameterBatchingPolicy) {
      status = MergeBatchingPolicy(field, value, config);
    } else if (key == kParameterSequenceMaskInput) {
      status = MergeSequenceMaskInput(field, value, config);
    } else if (key == kParameterBatchingDisabled) {
      status = MergeBatchingDisabled(field, value, config);
    } else if (key == kParameterCudaGraphVerifyRtol) {
      status = MergeVerifyRtol(field, value, config);
    } else if (IsInputValueKey(key)) {
      status = MergeInputValue(field, key, value, config);
    } else if (std::find_if(std::begin(kPyTorchBackendParameters), std::end(kPyTorchBackendParameters),
                            [&key = key](const char* name) { return key == name; }) !=
               std::end(kPyTorchBackendParameters)) {
      warnings->Add(field + ": a setting of Triton's PyTorch backend; graphserve ignores it");
    } else {
      warnings->Add(field + ": not a graphserve setting (" + kParameterMaxSequenceLength + ", " +
                    kParameterBucketBatchSizes + ", " + kParameterBucketSequenceLengths + ", " +
                    kParameterMaxBatchTokens + ", " + kParameterPrecision + ", " + kParameterBatchingPolicy +
                    ", " + kParameterSequenceMaskInput + ", " + kParameterBatchingDisabled + ", " +
                    kParameterCudaGraphVerifyRtol + ", " + kParameterPadValue + "INPUT, " + kParameterMinValue +
                    "INPUT, " + kParameterMaxValue + "INPUT); ignored");
    }
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

// ---- batching, graphs and the grid ---------------------------------------------------------------

Status ResolveBatching(inference::ModelConfig* config, Warnings* warnings) {
  if (!config->has_dynamic_batching()) return Status::Ok();
  inference::ModelDynamicBatching* batching = config->mutable_dynamic_batching();
  if (batching->preserve_ordering()) {
    warnings->Add("dynamic_batching.preserve_ordering: each call is answered as soon as its batch "
                  "is done; ignored");
  }
  // The queue policy's timeouts are read by SchedulerOptionsFromConfig; graphserve answers a request
  // whose timeout ran out DEADLINE_EXCEEDED (REJECT), and keeping it queued instead would change that.
  if (batching->default_queue_policy().timeout_action() == inference::ModelQueuePolicy::DELAY) {
    return InvalidArgument("dynamic_batching.default_queue_policy.timeout_action: DELAY is not served; "
                           "use REJECT (the default)");
  }
  const uint64_t queue_size = batching->default_queue_policy().max_queue_size();
  if (queue_size > 0) {
    if (batching->max_queue_size() > 0 && batching->max_queue_size() != queue_size) {
      return InvalidArgument("dynamic_batching.default_queue_policy.max_queue_size: " +
                             std::to_string(queue_size) +
                             " contradicts dynamic_batching.max_queue_size: " +
                             std::to_string(batching->max_queue_size()));
    }
    batching->set_max_queue_size(queue_size);
  }
  return Status::Ok();
}

Status ResolveCudaGraphsFlag(inference::ModelConfig* config) {
  const inference::ModelOptimizationPolicy::Cuda& cuda = config->optimization().cuda();
  if (!cuda.has_graphs()) return Status::Ok();
  if (cuda.graphs() && config->cuda_graphs().disable()) {
    return InvalidArgument("optimization.cuda.graphs: true contradicts cuda_graphs.disable: true");
  }
  if (!cuda.graphs()) config->mutable_cuda_graphs()->set_disable(true);
  return Status::Ok();
}

// One graph_spec entry's (batch, length): every input it lists must match the config's dims, with
// the -1 replaced by one length that all of them agree on.
Status GraphSpecPoint(const inference::ModelConfig& config, int index, bool variable,
                      BucketShape* point) {
  const inference::ModelOptimizationPolicy::Cuda::GraphSpec& graph =
      config.optimization().cuda().graph_spec(index);
  const std::string field = "optimization.cuda.graph_spec[" + std::to_string(index) + "]";
  // Above max_batch_size only within a token budget, which ResolveGraphSpecs checks per point.
  const bool budget = config.buckets().max_batch_tokens() > 0;
  if (graph.batch_size() < 1 || (graph.batch_size() > config.max_batch_size() && !budget)) {
    return InvalidArgument(field + ".batch_size: " + std::to_string(graph.batch_size()) +
                           " is outside [1, max_batch_size = " +
                           std::to_string(config.max_batch_size()) +
                           "]; batches of more rows need buckets.max_batch_tokens");
  }
  int64_t length = variable ? -1 : kFixedShapeLength;
  const std::map<std::string, inference::ModelOptimizationPolicy::Cuda::GraphSpec::Shape> inputs(
      graph.input().begin(), graph.input().end());
  for (const auto& [name, shape] : inputs) {
    const std::string input_field = field + ".input[\"" + name + "\"]";
    const auto input = std::find_if(config.input().begin(), config.input().end(),
                                     [&name = name](const inference::ModelInput& candidate) {
                                       return candidate.name() == name;
                                     });
    if (input == config.input().end()) return InvalidArgument(input_field + ": no such input");
    if (shape.dim_size() != input->dims_size()) {
      return InvalidArgument(input_field + ": " + List(shape.dim()) + " has " +
                             std::to_string(shape.dim_size()) + " dims, the input's dims " +
                             List(input->dims()) + " " + std::to_string(input->dims_size()));
    }
    for (int d = 0; d < shape.dim_size(); ++d) {
      const int64_t given = shape.dim(d);
      if (input->dims(d) != -1 && given != input->dims(d)) {
        return InvalidArgument(input_field + ": " + List(shape.dim()) + " differs from the dims " +
                               List(input->dims()));
      }
      if (input->dims(d) == -1 && given < 1) {
        return InvalidArgument(input_field + ": the length " + std::to_string(given) +
                               " must be at least 1");
      }
      if (input->dims(d) == -1 && length != -1 && given != length) {
        return InvalidArgument(input_field + ": length " + std::to_string(given) +
                               " differs from another input's " + std::to_string(length));
      }
      if (input->dims(d) == -1) length = given;
    }
  }
  if (length == -1) {
    return InvalidArgument(field + ".input: no input gives the length of the -1 dimension");
  }
  *point = BucketShape{graph.batch_size(), length};
  return Status::Ok();
}

// graph_spec as the bucket grid: its points must be every (batch size, length) pair of the sizes
// and lengths they use that is within the batch limits (all of them without a token budget; the
// staircase of ModelSpec with one), since each grid point is one graph.
Status ResolveGraphSpecs(inference::ModelConfig* config) {
  const int count = config->optimization().cuda().graph_spec_size();
  if (count == 0) return Status::Ok();
  if (IsRagged(*config)) {
    // Its shapes are per request; a ragged bucket is rows × total tokens.
    return InvalidArgument(
        "optimization.cuda.graph_spec: not served for a ragged model; give its grid as "
        "buckets (batch_sizes: rows, sequence_lengths: total tokens)");
  }
  const bool variable = HasVariableDimension(*config);
  std::set<BucketShape> points;
  std::set<int64_t> batches, lengths;
  for (int i = 0; i < count; ++i) {
    BucketShape point;
    Status status = GraphSpecPoint(*config, i, variable, &point);
    if (!status.ok()) return status;
    points.insert(point);
    batches.insert(point.batch);
    lengths.insert(point.length);
  }
  const int64_t budget = config->buckets().max_batch_tokens();
  std::string missing, beyond;
  for (int64_t batch : batches) {
    for (int64_t length : lengths) {
      const bool listed = points.count(BucketShape{batch, length}) > 0;
      const bool within = IsGridPoint(batch, length, config->max_batch_size(), budget);
      std::string* wrong = listed == within ? nullptr : listed ? &beyond : &missing;
      if (wrong != nullptr) {
        *wrong += (wrong->empty() ? "" : ", ") + BucketLabel(BucketShape{batch, length}, variable);
      }
    }
  }
  if (!beyond.empty()) {
    return InvalidArgument("optimization.cuda.graph_spec: " + beyond +
                           " above max_batch_size exceed buckets.max_batch_tokens " +
                           std::to_string(budget));
  }
  if (!missing.empty()) {
    return InvalidArgument("optimization.cuda.graph_spec: not a full grid of batch sizes " +
                           List(batches) + " × lengths " + List(lengths) +
                           (budget > 0 ? " within buckets.max_batch_tokens " + std::to_string(budget)
                                       : std::string()) +
                           "; missing " + missing);
  }
  Status status = MergeGridAxis("optimization.cuda.graph_spec batch sizes", batches,
                                "buckets.batch_sizes",
                                config->mutable_buckets()->mutable_batch_sizes());
  if (!status.ok() || !variable) return status;
  const int64_t limit = config->max_sequence_length();
  if (limit > 0 && *lengths.rbegin() > limit) {
    return InvalidArgument("optimization.cuda.graph_spec: length " +
                           std::to_string(*lengths.rbegin()) + " exceeds max_sequence_length: " +
                           std::to_string(limit));
  }
  return MergeGridAxis("optimization.cuda.graph_spec lengths", lengths, "buckets.sequence_lengths",
                       config->mutable_buckets()->mutable_sequence_lengths());
}

Status ResolvePreferredBatchSizes(inference::ModelConfig* config, Warnings* warnings) {
  const auto& preferred = config->dynamic_batching().preferred_batch_size();
  if (preferred.empty()) return Status::Ok();
  for (int32_t size : preferred) {
    if (size < 1 || size > config->max_batch_size()) {
      return InvalidArgument("dynamic_batching.preferred_batch_size: " + std::to_string(size) +
                             " is outside [1, max_batch_size = " +
                             std::to_string(config->max_batch_size()) + "]");
    }
  }
  const std::set<int64_t> sizes(preferred.begin(), preferred.end());
  auto* grid = config->mutable_buckets()->mutable_batch_sizes();
  // Triton's preferred sizes stop at max_batch_size; the grid's beyond it (a token budget's) are
  // graphserve's own.
  std::set<int64_t> request_sizes;
  for (int64_t size : *grid) {
    if (size <= config->max_batch_size()) request_sizes.insert(size);
  }
  if (grid->empty()) {
    // Triton batches toward the preferred sizes but never pads a batch up to one: a 1-row request
    // padded to a grid of {4, 8} would compute 4 rows. The default steps below max_batch_size join
    // them, so that a batch is padded by a third at most.
    std::set<int64_t> with_steps = sizes;
    for (int64_t size : DefaultBucketBatchSizes(config->max_batch_size())) with_steps.insert(size);
    grid->Add(with_steps.begin(), with_steps.end());
    spdlog::info("model '{}': dynamic_batching.preferred_batch_size {} and the default steps are the bucket "
                 "grid's batch sizes {}",
                 config->name(), List(sizes), List(with_steps));
  } else if (request_sizes != sizes) {
    warnings->Add("dynamic_batching.preferred_batch_size: " + List(sizes) +
                  " not used; the grid's batch sizes are " + List(AsSet(*grid)) +
                  " (buckets, parameters or graph_spec)");
  }
  return Status::Ok();
}

void DefaultLengthLimit(inference::ModelConfig* config, Warnings* warnings) {
  if (config->max_sequence_length() != 0 || !HasVariableDimension(*config)) return;
  // A ragged model's bucket lengths are total tokens, no bound on one row.
  const auto& lengths =
      IsRagged(*config) ? google::protobuf::RepeatedField<int64_t>() : config->buckets().sequence_lengths();
  const int64_t limit =
      lengths.empty() ? kDefaultMaxSequenceLength : *std::max_element(lengths.begin(), lengths.end());
  warnings->Add("max_sequence_length: not set (nor " + Quoted(kParameterMaxSequenceLength) +
                "); using " + std::to_string(limit) +
                (lengths.empty() ? ", graphserve's default" : ", the largest bucket length") +
                "; longer requests are refused");
  config->set_max_sequence_length(limit);
}

// In this order: the grid steps rely on the limits, and graph_spec on the parameters' grid.
Status Resolve(const std::string& model_dir, inference::ModelConfig* config, Warnings* warnings) {
  Status status = ResolvePlatform(model_dir, config, warnings);
  if (status.ok()) status = CheckHeader(*config);
  if (status.ok()) status = CheckTensors(*config, warnings);
  if (status.ok()) status = ResolveParameters(config, warnings);
  if (status.ok()) {
    std::vector<InstancePlacement> unused;
    status = InstancePlacements(*config, "auto", &unused);
  }
  if (status.ok()) status = ResolveBatching(config, warnings);
  if (status.ok()) status = ResolveCudaGraphsFlag(config);
  if (status.ok()) status = ResolveGraphSpecs(config);
  if (status.ok()) status = ResolvePreferredBatchSizes(config, warnings);
  if (status.ok()) DefaultLengthLimit(config, warnings);
  return status;
}

}  // namespace

Status ResolveModelConfig(const std::string& model_dir, inference::ModelConfig* config,
                          ConfigWarnings* warnings) {
  Warnings found(config->name(), warnings);
  const Status status = Resolve(model_dir, config, &found);
  if (status.ok()) return status;
  return Status(status.code(), "model '" + config->name() + "': " + status.message());
}

Status InstancePlacements(const inference::ModelConfig& config, const std::string& default_device,
                          std::vector<InstancePlacement>* placements) {
  placements->clear();
  if (config.instance_group_size() == 0) {
    placements->push_back(InstancePlacement{"", 1, {default_device}});
    return Status::Ok();
  }
  for (int i = 0; i < config.instance_group_size(); ++i) {
    const inference::ModelInstanceGroup& group = config.instance_group(i);
    const std::string field = "instance_group[" + std::to_string(i) + "]";
    if (group.count() < 0) return InvalidArgument(field + ".count: must not be negative");
    InstancePlacement placement{group.name(), std::max(1, group.count()), {}};
    if (group.devices_size() > 0) {
      if (group.kind() != inference::ModelInstanceGroup::KIND_AUTO || group.gpus_size() > 0) {
        return InvalidArgument(field + ".devices: give either devices or kind and gpus, not both");
      }
      placement.devices.assign(group.devices().begin(), group.devices().end());
    } else if (group.kind() == inference::ModelInstanceGroup::KIND_MODEL) {
      return InvalidArgument(field + ".kind: KIND_MODEL (the model places itself) is not served; "
                             "use KIND_GPU or KIND_CPU");
    } else if (group.kind() == inference::ModelInstanceGroup::KIND_CPU) {
      if (group.gpus_size() > 0) return InvalidArgument(field + ".gpus: KIND_CPU takes no gpus");
      placement.devices.push_back("cpu");
    } else if (group.kind() == inference::ModelInstanceGroup::KIND_GPU || group.gpus_size() > 0) {
      for (int32_t gpu : group.gpus()) {
        if (gpu < 0) return InvalidArgument(field + ".gpus: " + std::to_string(gpu) + " is negative");
        placement.devices.push_back("cuda:" + std::to_string(gpu));
      }
      if (placement.devices.empty()) placement.devices.push_back("cuda:0");
    } else {
      placement.devices.push_back(default_device);
    }
    placements->push_back(std::move(placement));
  }
  return Status::Ok();
}

namespace {

void SetParameter(const std::string& key, const std::string& value, inference::ModelConfig* config) {
  (*config->mutable_parameters())[key].set_string_value(value);
}

// The shortest text that reads back as the same double.
std::string Number(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  return error == std::errc() ? std::string(text, end) : std::to_string(value);
}

// {1, 2, 4} -> "1,2,4", as the grid parameters read.
std::string Joined(const std::vector<int64_t>& values) {
  std::string text;
  for (int64_t value : values) text += (text.empty() ? "" : ",") + std::to_string(value);
  return text;
}

// A ragged model's batch inputs and scattered outputs, as config.pbtxt gave them (every input is a
// source: the config loader makes a ragged model's inputs all ragged, of one length per row).
void AddRaggedBatching(const ModelSpec& spec, inference::ModelConfig* config) {
  if (!spec.ragged) return;
  for (const TensorSpec& tensor : spec.batch_inputs) {
    inference::BatchInput* batch_input = config->add_batch_input();
    inference::BatchInput::Kind kind = inference::BatchInput::BATCH_ELEMENT_COUNT;
    inference::BatchInput::Kind_Parse(BatchInputKindName(tensor.batch_input_kind), &kind);
    batch_input->set_kind(kind);
    batch_input->add_target_name(tensor.name);
    batch_input->set_data_type(DataTypeToConfig(tensor.dtype));
    batch_input->add_source_input(spec.inputs.front().name);
  }
  inference::BatchOutput scattered;
  for (const TensorSpec& tensor : spec.outputs) {
    if (tensor.ragged) scattered.add_target_name(tensor.name);
  }
  if (scattered.target_name_size() == 0) return;
  scattered.set_kind(inference::BatchOutput::BATCH_SCATTER_WITH_INPUT_SHAPE);
  scattered.add_source_input(spec.inputs.front().name);
  *config->add_batch_output() = std::move(scattered);
}

}  // namespace

inference::ModelConfig EffectiveModelConfig(const ServedModel& model) {
  const ModelSpec& spec = model.spec;
  inference::ModelConfig config;
  config.set_name(spec.name);
  config.set_platform(spec.platform);
  if (spec.platform == kPlatformTorchScript || spec.platform == kPlatformAotInductor) {
    config.set_backend(kBackendPyTorch);
    const std::string& filename = model.config.default_model_filename();
    config.set_default_model_filename(
        !filename.empty() ? filename
                          : spec.platform == kPlatformTorchScript ? kTorchScriptFileName
                                                                  : kAotInductorFileName);
  }
  if (model.config.version_policy().has_specific()) {
    *config.mutable_version_policy() = model.config.version_policy();
  } else {
    config.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  config.set_max_batch_size(static_cast<int32_t>(spec.max_batch_size));
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorSpec& tensor = spec.inputs[i];
    inference::ModelInput* input = config.add_input();
    input->set_name(tensor.name);
    input->set_data_type(DataTypeToConfig(tensor.dtype));
    input->mutable_dims()->Add(tensor.dims.begin(), tensor.dims.end());
    input->set_allow_ragged_batch(tensor.ragged);
    SetParameter(kParameterPadValue + tensor.name, Number(tensor.pad_value), &config);
    if (i < spec.input_ranges.size()) {
      const ValueRange& range = spec.input_ranges[i];
      if (range.min) SetParameter(kParameterMinValue + tensor.name, Number(*range.min), &config);
      if (range.max) SetParameter(kParameterMaxValue + tensor.name, Number(*range.max), &config);
    }
  }
  for (const TensorSpec& tensor : spec.outputs) {
    inference::ModelOutput* output = config.add_output();
    output->set_name(tensor.name);
    output->set_data_type(DataTypeToConfig(tensor.dtype));
    output->mutable_dims()->Add(tensor.dims.begin(), tensor.dims.end());
  }
  AddRaggedBatching(spec, &config);

  inference::ModelDynamicBatching* batching = config.mutable_dynamic_batching();
  batching->set_max_queue_delay_microseconds(static_cast<uint64_t>(model.scheduler.max_queue_delay_us));
  for (int64_t size : spec.bucket_batch_sizes) {
    if (size <= spec.max_batch_size) batching->add_preferred_batch_size(static_cast<int32_t>(size));
  }
  *batching->mutable_default_queue_policy() = model.config.dynamic_batching().default_queue_policy();
  batching->mutable_default_queue_policy()->set_max_queue_size(
      static_cast<uint32_t>(model.scheduler.max_queue_size));
  SetParameter(kParameterBatchingPolicy, model.scheduler.policy == BatchingPolicy::kFifo ? "fifo" : "size_binned",
               &config);
  if (model.scheduler.batching_disabled) SetParameter(kParameterBatchingDisabled, "true", &config);

  // Triton's groups have one kind each: a group spread over the CPU and GPUs becomes two.
  for (const InstancePlacement& placement : model.placements) {
    inference::ModelInstanceGroup gpu_group, cpu_group;
    for (const std::string& device : placement.devices) {
      DeviceName parsed;
      if (!ParseDeviceName(device, &parsed).ok()) continue;  // resolved at load: cannot happen
      if (parsed.cuda) {
        gpu_group.add_gpus(parsed.index);
      } else {
        cpu_group.set_count(placement.count);
      }
    }
    if (gpu_group.gpus_size() > 0) gpu_group.set_count(placement.count);
    for (auto [group, kind] : {std::pair{&gpu_group, inference::ModelInstanceGroup::KIND_GPU},
                               std::pair{&cpu_group, inference::ModelInstanceGroup::KIND_CPU}}) {
      if (group->count() == 0) continue;
      group->set_name(placement.name);
      group->set_kind(kind);
      *config.add_instance_group() = *group;
    }
  }

  inference::ModelOptimizationPolicy::Cuda* cuda = config.mutable_optimization()->mutable_cuda();
  cuda->set_graphs(!model.graph_buckets.empty());
  // A ragged bucket (rows × total tokens) has no graph_spec form: buckets in the parameters say it.
  for (const BucketShape& bucket : spec.ragged ? std::vector<BucketShape>() : model.graph_buckets) {
    auto* graph = cuda->add_graph_spec();
    graph->set_batch_size(static_cast<int32_t>(bucket.batch));
    for (const TensorSpec& tensor : spec.inputs) {
      auto& shape = (*graph->mutable_input())[tensor.name];
      for (int64_t dim : tensor.dims) shape.add_dim(dim == -1 ? bucket.length : dim);
    }
  }

  // graphserve's own settings: as parameters, since its own fields are not in Triton's schema.
  SetParameter(kParameterBucketBatchSizes, Joined(spec.bucket_batch_sizes), &config);
  if (spec.has_sequence_length()) {
    SetParameter(kParameterMaxSequenceLength, std::to_string(spec.max_sequence_length), &config);
    if (!spec.sequence_mask_input.empty()) SetParameter(kParameterSequenceMaskInput, spec.sequence_mask_input, &config);
    SetParameter(kParameterBucketSequenceLengths, Joined(spec.bucket_lengths), &config);
    // Left out, the parameters' explicit batch sizes mean no budget: 0 needs no entry.
    if (spec.max_batch_tokens > 0) {
      SetParameter(kParameterMaxBatchTokens, std::to_string(spec.max_batch_tokens), &config);
    }
  }
  SetParameter(kParameterPrecision, PrecisionName(spec.precision), &config);
  // Graphs turned off show as optimization.cuda.graphs: false, above.
  if (spec.verify_rtol != 0) SetParameter(kParameterCudaGraphVerifyRtol, Number(spec.verify_rtol), &config);
  return config;
}

}  // namespace graphserve
