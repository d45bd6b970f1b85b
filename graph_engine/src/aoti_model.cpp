#include "aoti_model.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#ifdef GRAPHSERVE_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cctype>
#include <exception>
#include <fstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine_log.h"
#include "padding.h"
#include "row_bound.h"
#include "torch_errors.h"

namespace graphserve {
namespace {

using Json = nlohmann::json;
using Metadata = std::unordered_map<std::string, std::string>;

// Keys of the package metadata: AOTInductor's own, and the one aoti_export.py adds.
constexpr const char* kDeviceKey = "AOTI_DEVICE_KEY";
constexpr const char* kSignatureKey = "graphserve.signature";
constexpr int kSignatureVersion = 1;

// What aoti_export.py records about one exported input: [min, max] per dimension, batch
// first; max -1 when the export left it unbounded.
struct ExportedInput {
  std::string name;
  std::string dtype;  // "int64", "fp32", ... (DataTypeName in lower case)
  std::vector<std::pair<int64_t, int64_t>> dims;
};

struct Signature {
  std::vector<ExportedInput> inputs;
  std::string weights_dtype;
  int64_t max_row_length = 0;  // a ragged export's row bound (row_bound.h); 0: none recorded
};

std::string LowerCase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string RangeToString(const std::pair<int64_t, int64_t>& range) {
  if (range.first == range.second) return std::to_string(range.first);
  return "[" + std::to_string(range.first) + ", " +
         (range.second < 0 ? std::string("unbounded") : std::to_string(range.second)) + "]";
}

bool IsFloatingName(const std::string& dtype) {
  return dtype == "fp16" || dtype == "bf16" || dtype == "fp32" || dtype == "fp64";
}

bool RangeHolds(const std::pair<int64_t, int64_t>& range, int64_t low, int64_t high) {
  return range.first <= low && (range.second < 0 || range.second >= high);
}

Status ParseSignature(const std::string& text, Signature* signature) {
  try {
    const Json json = Json::parse(text);
    if (json.at("version").get<int>() != kSignatureVersion) {
      return InvalidArgument("its graphserve signature has version " + json.at("version").dump() +
                             "; this graphserve reads version " + std::to_string(kSignatureVersion));
    }
    for (const Json& input : json.at("inputs")) {
      ExportedInput exported{input.at("name").get<std::string>(),
                             input.at("dtype").get<std::string>(), {}};
      for (const Json& dim : input.at("dims")) {
        exported.dims.emplace_back(dim.at(0).get<int64_t>(), dim.at(1).get<int64_t>());
      }
      signature->inputs.push_back(std::move(exported));
    }
    signature->weights_dtype = json.at("weights_dtype").get<std::string>();
  } catch (const Json::exception& error) {
    return InvalidArgument(std::string("its graphserve signature cannot be read: ") + error.what());
  }
  return ParseRowBound(text, &signature->max_row_length);
}

// The config's view of one input's exported dimension `d` (0 is the batch) against the export's.
Status CheckExportedDim(const ModelSpec& spec, const TensorSpec& input, const ExportedInput& exported,
                        size_t d) {
  const auto& range = exported.dims[d];
  const std::string where = "input '" + input.name + "' dimension " + std::to_string(d);
  if (d == 0) {
    // A formed batch may hold more rows than a request (buckets.max_batch_tokens): the most at the
    // grid's shortest length.
    const int64_t largest = std::max(spec.max_batch_size, spec.LargestBatchFor(1));
    if (RangeHolds(range, spec.bucket_batch_sizes.front(), largest)) return Status::Ok();
    std::string needed = std::to_string(spec.bucket_batch_sizes.front()) + " to max_batch_size " +
                         std::to_string(spec.max_batch_size);
    if (largest > spec.max_batch_size) {
      needed = std::to_string(spec.bucket_batch_sizes.front()) + " to " + std::to_string(largest) +
               ", the grid's largest batch size (max_batch_size " +
               std::to_string(spec.max_batch_size) +
               " a request, and batches of short requests up to buckets.max_batch_tokens " +
               std::to_string(spec.max_batch_tokens) +
               "): export the batch up to it, or set max_batch_tokens: 0";
    }
    return InvalidArgument(where + " (batch): the package was exported for " + RangeToString(range) +
                           ", the config needs " + needed);
  }
  const int64_t config_dim = input.dims[d - 1];
  if (config_dim != -1) {
    if (RangeHolds(range, config_dim, config_dim)) return Status::Ok();
    return InvalidArgument(where + ": the package was exported for " + RangeToString(range) +
                           ", the config says " + std::to_string(config_dim));
  }
  if (RangeHolds(range, spec.bucket_lengths.front(), spec.max_sequence_length)) return Status::Ok();
  return InvalidArgument(where + " (length): the package was exported for " + RangeToString(range) +
                         ", the config needs " + std::to_string(spec.bucket_lengths.front()) +
                         " to max_sequence_length " + std::to_string(spec.max_sequence_length));
}

// A ragged model's argument `input` (a flat ragged input or a batch input): its first dimension
// spans the grid's token sizes or rows (one more with the zero), the rest are the config's.
Status CheckRaggedExportedDims(const ModelSpec& spec, const TensorSpec& input,
                               const ExportedInput& exported) {
  const std::vector<int64_t> smallest =
      PaddedShape(input, BucketShape{spec.bucket_batch_sizes.front(), spec.bucket_lengths.front()});
  const std::vector<int64_t> largest =
      PaddedShape(input, BucketShape{spec.bucket_batch_sizes.back(), spec.bucket_lengths.back()});
  if (exported.dims.size() != smallest.size()) {
    return InvalidArgument("input '" + input.name + "' has rank " + std::to_string(exported.dims.size()) +
                           " in the package, " + std::to_string(smallest.size()) +
                           " in the config (ragged: rows end to end, no batch dimension)");
  }
  for (size_t d = 0; d < smallest.size(); ++d) {
    if (!RangeHolds(exported.dims[d], smallest[d], largest[d])) {
      return InvalidArgument("input '" + input.name + "' dimension " + std::to_string(d) +
                             ": the package was exported for " + RangeToString(exported.dims[d]) +
                             ", the grid needs " + std::to_string(smallest[d]) + " to " +
                             std::to_string(largest[d]));
    }
  }
  return Status::Ok();
}

Status CheckSignature(const ModelSpec& spec, const Signature& signature) {
  // A ragged model's positional arguments are its inputs, then its batch inputs.
  const std::vector<TensorSpec> arguments = spec.arguments();
  if (signature.inputs.size() != arguments.size()) {
    return InvalidArgument("the package takes " + std::to_string(signature.inputs.size()) +
                           " inputs, the config declares " + std::to_string(arguments.size()) +
                           (spec.ragged ? " (inputs and batch inputs)" : ""));
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    const TensorSpec& input = arguments[i];
    const ExportedInput& exported = signature.inputs[i];
    if (exported.name != input.name) {
      return InvalidArgument("input " + std::to_string(i) + " is '" + exported.name +
                             "' in the package, '" + input.name + "' in the config");
    }
    const std::string config_dtype = LowerCase(DataTypeName(input.dtype));
    const bool both_floating =
        at::isFloatingType(ToScalarType(input.dtype)) && IsFloatingName(exported.dtype);
    // Floating-point inputs are cast to the package's dtype on every forward; others are not.
    if (exported.dtype != config_dtype && !both_floating) {
      return InvalidArgument("input '" + input.name + "' is " + exported.dtype +
                             " in the package, " + config_dtype + " in the config");
    }
    if (spec.ragged) {
      const Status status = CheckRaggedExportedDims(spec, input, exported);
      if (!status.ok()) return status;
      continue;
    }
    if (exported.dims.size() != input.dims.size() + 1) {
      return InvalidArgument("input '" + input.name + "' has rank " +
                             std::to_string(exported.dims.size()) + " in the package, " +
                             std::to_string(input.dims.size() + 1) +
                             " in the config (batch included)");
    }
    for (size_t d = 0; d < exported.dims.size(); ++d) {
      const Status status = CheckExportedDim(spec, input, exported, d);
      if (!status.ok()) return status;
    }
  }
  const std::string precision = PrecisionName(spec.precision);
  if (signature.weights_dtype != precision) {
    return InvalidArgument("the package's weights are " + signature.weights_dtype +
                           ", the config's precision is " + precision +
                           " (AOTInductor bakes the dtype in: export in the config's precision)");
  }
  return CheckRowBound(spec, signature.max_row_length);
}

// The package's output names in the order it returns them (empty for a tuple or list), from the
// pytree spec torch.export wrote: [version, {"type": ..., "context": ..., "children_spec": [...]}].
Status OutputNames(const std::string& out_spec, size_t* count, std::vector<std::string>* names) {
  try {
    const Json node = Json::parse(out_spec).at(1);
    const Json& type = node.at("type");
    if (type.is_null()) {
      *count = 1;  // a single tensor
      return Status::Ok();
    }
    *count = node.at("children_spec").size();
    if (type.get<std::string>() == "builtins.dict") {
      *names = Json::parse(node.at("context").get<std::string>()).get<std::vector<std::string>>();
    }
  } catch (const Json::exception& error) {
    return InvalidArgument(std::string("its output spec cannot be read: ") + error.what());
  }
  return Status::Ok();
}

// For each spec output, the index of the package output that holds it.
Status MapOutputs(const ModelSpec& spec, const std::string& out_spec, std::vector<size_t>* indices) {
  size_t count = 0;
  std::vector<std::string> names;
  Status status = OutputNames(out_spec, &count, &names);
  if (!status.ok()) return status;
  indices->clear();
  if (names.empty()) {
    if (count != spec.outputs.size()) {
      return InvalidArgument("the package returns " + std::to_string(count) +
                             " outputs, the config declares " + std::to_string(spec.outputs.size()));
    }
    for (size_t i = 0; i < count; ++i) indices->push_back(i);
    return Status::Ok();
  }
  for (const TensorSpec& output : spec.outputs) {
    const auto found = std::find(names.begin(), names.end(), output.name);
    if (found == names.end()) {
      std::string returned;
      for (const std::string& name : names) returned += (returned.empty() ? "'" : ", '") + name + "'";
      return InvalidArgument("output '" + output.name + "' is not among the package's outputs (" +
                             returned + ")");
    }
    indices->push_back(static_cast<size_t>(found - names.begin()));
  }
  return Status::Ok();
}

class AotInductorModel : public Model {
 public:
  AotInductorModel(std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader,
                   std::vector<at::ScalarType> input_types, std::vector<size_t> output_indices,
                   const c10::Device& device)
      : loader_(std::move(loader)),
        input_types_(std::move(input_types)),
        output_indices_(std::move(output_indices)),
        device_(device) {}

  Status Forward(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>* outputs) override {
    std::vector<at::Tensor> arguments;
    arguments.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool cast = inputs[i].is_floating_point() && inputs[i].scalar_type() != input_types_[i];
      // The package reads its inputs in place: give it contiguous ones.
      arguments.push_back(cast ? inputs[i].to(input_types_[i]).contiguous() : inputs[i].contiguous());
    }
    std::vector<at::Tensor> results = loader_->run(arguments, CurrentStream());
    outputs->clear();
    for (size_t index : output_indices_) {
      if (index >= results.size()) {
        return InvalidArgument("the package returned " + std::to_string(results.size()) +
                               " outputs, fewer than its output spec says");
      }
      outputs->push_back(std::move(results[index]));
    }
    return Status::Ok();
  }

 private:
  // The stream to run on: the caller's current one, which is the capture stream while the
  // CUDA-graph executor captures.
  void* CurrentStream() const {
#ifdef GRAPHSERVE_WITH_CUDA
    if (device_.is_cuda()) return c10::cuda::getCurrentCUDAStream(device_.index()).stream();
#endif
    return nullptr;
  }

  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  const std::vector<at::ScalarType> input_types_;
  const std::vector<size_t> output_indices_;
  const c10::Device device_;
};

// The device the package was compiled for must be the one it is served on.
Status CheckPackageDevice(const Metadata& metadata, const c10::Device& device) {
  const auto found = metadata.find(kDeviceKey);
  const std::string compiled_for = found == metadata.end() ? "" : found->second;
  const std::string served_on = device.is_cuda() ? "cuda" : "cpu";
  if (compiled_for == served_on) return Status::Ok();
  return InvalidArgument("the package was compiled for '" + compiled_for + "', the model is served on " +
                         device.str() + " (export it on the device that serves it)");
}

// Input dtypes to cast floating-point inputs to: the signature's, or the spec's without one.
std::vector<at::ScalarType> PackageInputTypes(const ModelSpec& spec, const Signature* signature) {
  std::vector<at::ScalarType> types;
  const std::vector<TensorSpec> arguments = spec.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    at::ScalarType type = ToScalarType(arguments[i].dtype);
    if (signature != nullptr) {
      for (DataType candidate : {DataType::kFp16, DataType::kBf16, DataType::kFp32, DataType::kFp64}) {
        if (LowerCase(DataTypeName(candidate)) == signature->inputs[i].dtype) {
          type = ToScalarType(candidate);
        }
      }
    }
    types.push_back(type);
  }
  return types;
}

Status CheckPackage(const ModelSpec& spec, const Metadata& metadata, const c10::Device& device,
                    bool* has_signature, Signature* signature) {
  Status status = CheckPackageDevice(metadata, device);
  if (!status.ok()) return status;
  const auto found = metadata.find(kSignatureKey);
  *has_signature = found != metadata.end();
  if (!*has_signature) return Status::Ok();
  status = ParseSignature(found->second, signature);
  if (!status.ok()) return status;
  return CheckSignature(spec, *signature);
}

}  // namespace

Status LoadAotInductorModel(const ModelSpec& spec, const std::string& path,
                            const c10::Device& device, std::unique_ptr<Model>* model) {
  const std::string context = "model '" + spec.name + "': " + path;
  if (!std::ifstream(path).good()) {
    return NotFound(context + " does not exist or cannot be read");
  }
  bool has_signature = false;
  try {
    const Metadata metadata =
        torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
    Signature signature;
    Status status = CheckPackage(spec, metadata, device, &has_signature, &signature);
    if (!status.ok()) return InvalidArgument(context + ": " + status.message());

    constexpr bool kRunSingleThreaded = true;  // no locks or syncs inside: capturable
    auto loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, "model", kRunSingleThreaded, /*num_runners=*/1,
        device.is_cuda() ? device.index() : static_cast<c10::DeviceIndex>(-1));
    const std::vector<std::string> call_spec = loader->get_call_spec();
    std::vector<size_t> output_indices;
    status = call_spec.size() == 2 ? MapOutputs(spec, call_spec[1], &output_indices)
                                   : InvalidArgument("the package has no output spec");
    if (!status.ok()) return InvalidArgument(context + ": " + status.message());

    *model = std::make_unique<AotInductorModel>(
        std::move(loader), PackageInputTypes(spec, has_signature ? &signature : nullptr),
        std::move(output_indices), device);
  } catch (const std::exception& error) {
    return InvalidArgument(context + ": loading the AOTInductor package failed: " +
                           ExceptionMessage(error));
  }
  if (!has_signature) {
    EngineLog(LogLevel::kWarning,
              context + " carries no graphserve signature (deploy/models/aoti_export.py "
                        "writes one): its input dtypes and exported ranges were not checked against "
                        "the config");
  }
  EngineLog(LogLevel::kInfo, "model '" + spec.name + "': loaded " + path + " (AOTInductor, " +
                                 PrecisionName(spec.precision) + ") on " + device.str());
  return Status::Ok();
}

}  // namespace graphserve
