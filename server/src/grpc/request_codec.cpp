#include "graphserve/server/grpc/request_codec.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace graphserve {
namespace {

std::string InputField(int index, const std::string& name) {
  return "inputs[" + std::to_string(index) + "] '" + name + "'";
}

// Copies typed values into little-endian bytes of `dtype`. graphserve runs on little-endian hosts
// (x86-64, aarch64), so a memcpy of each converted value is the wire layout. A value the narrower
// type cannot hold is refused, never truncated (uint_contents 300 became 44 for a UINT8 input).
template <typename Wire, typename Stored>
Status PackValues(const google::protobuf::RepeatedField<Wire>& values, const std::string& field, DataType dtype,
                  std::string* bytes) {
  bytes->assign(values.size() * sizeof(Stored), '\0');
  char* out = bytes->data();
  for (int i = 0; i < values.size(); ++i) {
    const Stored stored = static_cast<Stored>(values[i]);
    if (static_cast<Wire>(stored) != values[i] && !std::is_floating_point_v<Wire>) {
      std::ostringstream value;
      value << +values[i];
      return InvalidArgument(field + ": element " + std::to_string(i) + " (" + value.str() + ") is not a " +
                             DataTypeName(dtype) + " value");
    }
    std::memcpy(out, &stored, sizeof(Stored));
    out += sizeof(Stored);
  }
  return Status::Ok();
}

// The typed `contents` field that KServe v2 assigns to `dtype`, converted to raw bytes. Returns the
// number of values found there through `count`.
Status PackTypedContents(const inference::InferTensorContents& contents, DataType dtype,
                         const std::string& field, std::string* bytes, int64_t* count) {
  const std::string values = field + ".contents";
  Status status;
  const char* read = nullptr;  // the one field a `dtype` input reads
  switch (dtype) {
    case DataType::kBool:
      read = "bool_contents";
      *count = contents.bool_contents_size();
      status = PackValues<bool, uint8_t>(contents.bool_contents(), values + "." + read, dtype, bytes);
      break;
    case DataType::kUint8:
      read = "uint_contents";
      *count = contents.uint_contents_size();
      status = PackValues<uint32_t, uint8_t>(contents.uint_contents(), values + "." + read, dtype, bytes);
      break;
    case DataType::kInt8:
      read = "int_contents";
      *count = contents.int_contents_size();
      status = PackValues<int32_t, int8_t>(contents.int_contents(), values + "." + read, dtype, bytes);
      break;
    case DataType::kInt16:
      read = "int_contents";
      *count = contents.int_contents_size();
      status = PackValues<int32_t, int16_t>(contents.int_contents(), values + "." + read, dtype, bytes);
      break;
    case DataType::kInt32:
      read = "int_contents";
      *count = contents.int_contents_size();
      status = PackValues<int32_t, int32_t>(contents.int_contents(), values + "." + read, dtype, bytes);
      break;
    case DataType::kInt64:
      read = "int64_contents";
      *count = contents.int64_contents_size();
      status = PackValues<int64_t, int64_t>(contents.int64_contents(), values + "." + read, dtype, bytes);
      break;
    case DataType::kFp32:
      read = "fp32_contents";
      *count = contents.fp32_contents_size();
      status = PackValues<float, float>(contents.fp32_contents(), values + "." + read, dtype, bytes);
      break;
    case DataType::kFp64:
      read = "fp64_contents";
      *count = contents.fp64_contents_size();
      status = PackValues<double, double>(contents.fp64_contents(), values + "." + read, dtype, bytes);
      break;
    case DataType::kFp16:
    case DataType::kBf16:
      return InvalidArgument(field + ": " + DataTypeName(dtype) +
                             " has no typed contents field; send it in raw_input_contents");
  }
  if (!status.ok()) return status;
  // Values in any other field would be silently left out of the tensor.
  const int64_t given = contents.bool_contents_size() + contents.int_contents_size() +
                        contents.int64_contents_size() + contents.uint_contents_size() +
                        contents.uint64_contents_size() + contents.fp32_contents_size() +
                        contents.fp64_contents_size() + contents.bytes_contents_size();
  if (given != *count) {
    return InvalidArgument(values + ": values outside " + read + ", the one field a " + DataTypeName(dtype) +
                           " input reads");
  }
  return Status::Ok();
}

bool HasTypedContents(const inference::ModelInferRequest::InferInputTensor& input) {
  if (!input.has_contents()) return false;
  const inference::InferTensorContents& c = input.contents();
  return c.bool_contents_size() || c.int_contents_size() || c.int64_contents_size() ||
         c.uint_contents_size() || c.uint64_contents_size() || c.fp32_contents_size() ||
         c.fp64_contents_size() || c.bytes_contents_size();
}


// One input's checks against its TensorSpec: datatype, rank, fixed dims, and the request-wide
// limits on rows and length. Returns its rows and its variable length (-1 for none).
Status CheckInputShape(const ModelSpec& spec, const TensorSpec& tensor, const std::string& field,
                       const inference::ModelInferRequest::InferInputTensor& input,
                       std::vector<int64_t>* shape, int64_t* rows, int64_t* length) {
  const std::string model = "model '" + spec.name + "': ";
  if (input.datatype() != DataTypeName(tensor.dtype)) {
    return InvalidArgument(model + field + ": datatype '" + input.datatype() + "', expected '" +
                           DataTypeName(tensor.dtype) + "'");
  }
  shape->assign(input.shape().begin(), input.shape().end());
  std::string expected_shape = "[batch";
  for (int64_t dim : tensor.dims) {
    expected_shape += ", " + (dim == -1 ? std::string("length") : std::to_string(dim));
  }
  expected_shape += "]";
  if (shape->size() != tensor.dims.size() + 1) {
    return InvalidArgument(model + field + ": shape " + ShapeToString(*shape) + " has rank " +
                           std::to_string(shape->size()) + ", expected " + expected_shape);
  }
  for (int64_t dim : *shape) {
    if (dim < 1) {
      return InvalidArgument(model + field + ": shape " + ShapeToString(*shape) +
                             " has a dimension below 1");
    }
  }
  for (size_t d = 0; d < tensor.dims.size(); ++d) {
    if (tensor.dims[d] != -1 && (*shape)[d + 1] != tensor.dims[d]) {
      return InvalidArgument(model + field + ": shape " + ShapeToString(*shape) + ", expected " +
                             expected_shape);
    }
  }
  *rows = (*shape)[0];
  if (*rows > spec.max_batch_size) {
    return InvalidArgument(model + field + ": batch " + std::to_string(*rows) +
                           " exceeds max_batch_size " + std::to_string(spec.max_batch_size));
  }
  const int variable_dim = tensor.variable_dim();
  *length = variable_dim >= 0 ? (*shape)[variable_dim + 1] : -1;
  if (*length > spec.max_sequence_length) {
    return InvalidArgument(model + field + ": length " + std::to_string(*length) +
                           " exceeds max_sequence_length " +
                           std::to_string(spec.max_sequence_length));
  }
  // A ragged request's tokens beyond the budget fit no bucket, and no size a .pt2 was exported
  // for; one row always fits (the config keeps max_batch_tokens >= max_sequence_length). Divided,
  // not multiplied: the shape is the client's.
  if (spec.ragged && spec.max_batch_tokens > 0 && *length > 0 && *rows > spec.max_batch_tokens / *length) {
    return InvalidArgument(model + field + ": " + std::to_string(*rows) + " rows of " +
                           std::to_string(*length) + " tokens exceed buckets.max_batch_tokens " +
                           std::to_string(spec.max_batch_tokens) +
                           " (a ragged model's tokens of one batch); send fewer rows per request");
  }
  return Status::Ok();
}

// The first input fixes the item's rows and length; every other input must agree with it.
Status AgreeOnRowsAndLength(const std::string& model, const std::string& field,
                            const std::string& name, int64_t rows, int64_t length,
                            std::string* reference_input, InferenceItem* item) {
  if (item->rows == -1) {
    item->rows = rows;
    *reference_input = name;
  } else if (rows != item->rows) {
    return InvalidArgument(model + field + ": batch " + std::to_string(rows) +
                           " disagrees with input '" + *reference_input + "' (" +
                           std::to_string(item->rows) + ")");
  }
  if (length == -1) return Status::Ok();
  if (item->length == -1) {
    item->length = length;
  } else if (length != item->length) {
    return InvalidArgument(model + field + ": variable length " + std::to_string(length) +
                           " disagrees with the other inputs' " + std::to_string(item->length));
  }
  return Status::Ok();
}

// The input's data into `host` (whose dtype and shape are set): raw bytes (raw_input_contents[`raw_index`])
// taken over without a copy, or typed contents packed; either must hold exactly the shape's element
// count.
Status TakeInputData(const std::string& model, const std::string& field, int index, int raw_index, bool raw,
                     inference::ModelInferRequest* request, HostTensor* host) {
  const inference::ModelInferRequest::InferInputTensor& input = request->inputs(index);
  const int64_t expected_count = host->element_count();
  if (!raw) {
    int64_t count = 0;
    Status status = PackTypedContents(input.contents(), host->dtype, model + field, &host->bytes, &count);
    if (!status.ok()) return status;
    if (count != expected_count) {
      return InvalidArgument(model + field + ": contents hold " + std::to_string(count) +
                             " values, expected " + std::to_string(expected_count) +
                             " for shape " + ShapeToString(host->shape));
    }
    return Status::Ok();
  }
  if (HasTypedContents(input)) {
    return InvalidArgument(model + field + ": data given both in contents and raw_input_contents");
  }
  const size_t expected_bytes = expected_count * ElementSize(host->dtype);
  std::string* bytes = request->mutable_raw_input_contents(raw_index);
  if (bytes->size() != expected_bytes) {
    return InvalidArgument(model + "raw_input_contents[" + std::to_string(raw_index) + "] ('" +
                           input.name() + "'): " + std::to_string(bytes->size()) +
                           " bytes, expected " + std::to_string(expected_bytes) + " for shape " +
                           ShapeToString(host->shape) + " " + DataTypeName(host->dtype));
  }
  // The request is ours until the RPC finishes: take its buffer instead of copying it.
  host->bytes = std::move(*bytes);
  return Status::Ok();
}

template <typename Value>
int64_t FirstOutOfRange(const std::string& bytes, double low, double high) {
  const size_t count = bytes.size() / sizeof(Value);
  for (size_t i = 0; i < count; ++i) {
    Value value;
    std::memcpy(&value, bytes.data() + i * sizeof(Value), sizeof(Value));
    const double number = static_cast<double>(value);
    if (!(number >= low && number <= high)) return static_cast<int64_t>(i);  // NaN fails too
  }
  return -1;
}

// The config's min_value/max_value (config.cpp admits them only for the types read here).
Status CheckValueRange(const std::string& model, const std::string& field, const ValueRange& range,
                       const HostTensor& host) {
  if (!range.min && !range.max) return Status::Ok();
  const double low = range.min.value_or(-std::numeric_limits<double>::infinity());
  const double high = range.max.value_or(std::numeric_limits<double>::infinity());
  int64_t index = -1;
  switch (host.dtype) {
    case DataType::kUint8: index = FirstOutOfRange<uint8_t>(host.bytes, low, high); break;
    case DataType::kInt8: index = FirstOutOfRange<int8_t>(host.bytes, low, high); break;
    case DataType::kInt16: index = FirstOutOfRange<int16_t>(host.bytes, low, high); break;
    case DataType::kInt32: index = FirstOutOfRange<int32_t>(host.bytes, low, high); break;
    case DataType::kInt64: index = FirstOutOfRange<int64_t>(host.bytes, low, high); break;
    case DataType::kFp32: index = FirstOutOfRange<float>(host.bytes, low, high); break;
    case DataType::kFp64: index = FirstOutOfRange<double>(host.bytes, low, high); break;
    default: return Status::Ok();
  }
  if (index < 0) return Status::Ok();
  std::ostringstream message;
  message << model << field << ": element " << index << " is outside the model's range [";
  if (range.min) message << *range.min;
  message << ", ";
  if (range.max) message << *range.max;
  message << "]";
  return InvalidArgument(message.str());
}

constexpr const char* kRegionParameter = "shared_memory_region";
constexpr const char* kByteSizeParameter = "shared_memory_byte_size";
constexpr const char* kOffsetParameter = "shared_memory_offset";

bool IsSharedMemoryParameter(const std::string& key) {
  return key == kRegionParameter || key == kByteSizeParameter || key == kOffsetParameter;
}

// A tensor's place in shared memory, from Triton's parameters; `name` empty: not in shared memory.
struct TensorRegion {
  std::string name;
  int64_t offset = 0;
  int64_t byte_size = 0;
};

// Reads Triton's shared-memory parameters of an input or output (`field` ends with ": "): the region
// (a string) and its byte size (an int64) go together, the offset (an int64) is optional.
template <typename Tensor>
Status ParseTensorRegion(const std::string& field, const Tensor& tensor, TensorRegion* region) {
  const auto find = [&](const char* key) -> const inference::InferParameter* {
    const auto it = tensor.parameters().find(key);
    return it == tensor.parameters().end() ? nullptr : &it->second;
  };
  const auto quoted = [&](const char* key) { return field + "parameters['" + key + "']"; };
  const inference::InferParameter* name = find(kRegionParameter);
  const inference::InferParameter* byte_size = find(kByteSizeParameter);
  const inference::InferParameter* offset = find(kOffsetParameter);
  if (name == nullptr) {
    if (byte_size == nullptr && offset == nullptr) return Status::Ok();
    return InvalidArgument(quoted(byte_size != nullptr ? kByteSizeParameter : kOffsetParameter) +
                           ": given without parameters['" + kRegionParameter + "']");
  }
  if (name->parameter_choice_case() != inference::InferParameter::kStringParam || name->string_param().empty()) {
    return InvalidArgument(quoted(kRegionParameter) + ": expected a string_param naming a registered region");
  }
  if (byte_size == nullptr) {
    return InvalidArgument(quoted(kByteSizeParameter) + ": required with parameters['" + kRegionParameter + "']");
  }
  for (const auto& [key, value] : {std::make_pair(kByteSizeParameter, byte_size), std::make_pair(kOffsetParameter, offset)}) {
    if (value != nullptr && (value->parameter_choice_case() != inference::InferParameter::kInt64Param ||
                             value->int64_param() < 0)) {
      return InvalidArgument(quoted(key) + ": expected an int64_param of at least 0");
    }
  }
  region->name = name->string_param();
  region->byte_size = byte_size->int64_param();
  region->offset = offset == nullptr ? 0 : offset->int64_param();
  return Status::Ok();
}

// The span of a tensor's region; a refusal names the parameter and keeps the registry's code
// (NOT_FOUND for a region not registered).
Status FindRegion(const std::string& field, const TensorRegion& region, const SharedMemoryRegistry& registry,
                  SharedMemorySpan* span) {
  const Status status = registry.Span(region.name, static_cast<uint64_t>(region.offset),
                                      static_cast<uint64_t>(region.byte_size), span);
  if (status.ok()) return status;
  return Status(status.code(), field + "parameters['" + kRegionParameter + "']: " + status.message());
}

// An input's bytes, copied out of its region into `host` (whose dtype and shape are set): the span
// must be exactly the tensor's size.
Status ReadInputRegion(const std::string& field, const TensorRegion& region, const SharedMemoryRegistry& registry,
                       HostTensor* host) {
  const int64_t expected_bytes = host->element_count() * static_cast<int64_t>(ElementSize(host->dtype));
  if (region.byte_size != expected_bytes) {
    return InvalidArgument(field + "parameters['" + kByteSizeParameter + "']: " + std::to_string(region.byte_size) +
                           " bytes, expected " + std::to_string(expected_bytes) + " for shape " +
                           ShapeToString(host->shape) + " " + DataTypeName(host->dtype));
  }
  SharedMemorySpan span;
  Status status = FindRegion(field, region, registry, &span);
  if (!status.ok()) return status;
  status = span.ReadInto(&host->bytes);
  if (!status.ok()) return InvalidArgument(field + status.message());
  return Status::Ok();
}

// Which outputs the request names (all when it names none); INVALID_ARGUMENT for an unknown one.
// With `shared_memory`, those the request puts in a region are added to its outputs.
Status DecodeRequestedOutputs(const ModelSpec& spec, const inference::ModelInferRequest& request,
                              InferenceItem* item, SharedMemoryTensors* shared_memory) {
  item->outputs_wanted.assign(spec.outputs.size(), request.outputs_size() == 0);
  for (int i = 0; i < request.outputs_size(); ++i) {
    const std::string& name = request.outputs(i).name();
    size_t index = 0;
    while (index < spec.outputs.size() && spec.outputs[index].name != name) ++index;
    if (index == spec.outputs.size()) {
      return InvalidArgument("model '" + spec.name + "': outputs[" + std::to_string(i) + "] '" +
                             name + "': unknown output");
    }
    if (item->outputs_wanted[index]) {  // as Triton refuses it
      return InvalidArgument("model '" + spec.name + "': outputs[" + std::to_string(i) + "] '" + name +
                             "': asked for twice");
    }
    item->outputs_wanted[index] = true;
    if (shared_memory == nullptr) continue;
    const std::string field = "model '" + spec.name + "': outputs[" + std::to_string(i) + "] '" + name + "': ";
    TensorRegion region;
    Status status = ParseTensorRegion(field, request.outputs(i), &region);
    if (!status.ok()) return status;
    if (region.name.empty()) continue;
    SharedMemoryOutput target{index, i, {}};
    status = FindRegion(field, region, *shared_memory->registry, &target.span);
    if (!status.ok()) return status;
    shared_memory->outputs.push_back(std::move(target));
  }
  return Status::Ok();
}

// graphserve honours no input or output parameter (classification, ...) but Triton's shared-memory
// ones, where the caller serves shared memory: answering OK without doing what one asks would be a
// different answer than the client requested, so each is refused by name.
Status RefuseParameters(const std::string& model, const std::string& field,
                        const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
                        bool shared_memory_served) {
  std::vector<std::string> names;
  for (const auto& entry : parameters) {
    if (!shared_memory_served || !IsSharedMemoryParameter(entry.first)) names.push_back(entry.first);
  }
  if (names.empty()) return Status::Ok();
  std::sort(names.begin(), names.end());  // a map's order is unspecified: name the same one always
  return InvalidArgument(model + field + "parameters['" + names.front() +
                         "']: not supported by graphserve");
}

Status RefuseTensorParameters(const std::string& model, const inference::ModelInferRequest& request,
                              bool shared_memory_served) {
  Status status;
  for (int i = 0; status.ok() && i < request.inputs_size(); ++i) {
    status = RefuseParameters(model, InputField(i, request.inputs(i).name()) + ": ",
                              request.inputs(i).parameters(), shared_memory_served);
  }
  for (int i = 0; status.ok() && i < request.outputs_size(); ++i) {
    status = RefuseParameters(
        model, "outputs[" + std::to_string(i) + "] '" + request.outputs(i).name() + "': ",
        request.outputs(i).parameters(), shared_memory_served);
  }
  return status;
}

// The request parameters Triton reserves for itself, with Triton's meanings (its protocol's
// parameters extension); any other key is a custom parameter, which Triton hands to the model's
// backend. Triton's PyTorch backend ignores them, and so must graphserve (TorchScript and
// AOTInductor models take tensors only): they are accepted and listed in `custom` for the log.
Status DecodeRequestParameters(const std::string& model, const inference::ModelInferRequest& request,
                               PendingRequest* pending, std::vector<std::string>* custom) {
  // Sorted, so that the same request is refused for the same parameter every time.
  std::vector<const google::protobuf::MapPair<std::string, inference::InferParameter>*> parameters;
  for (const auto& entry : request.parameters()) parameters.push_back(&entry);
  std::sort(parameters.begin(), parameters.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  for (const auto* entry : parameters) {
    const std::string& key = entry->first;
    const inference::InferParameter& value = entry->second;
    const std::string field = model + "parameters['" + key + "']: ";
    const auto kind = value.parameter_choice_case();
    if (key == "timeout") {
      // Microseconds the request may wait in the queue; the model's queue policy decides whether
      // it counts and clamps it to its default (QueuePolicy::TimeoutFor), as Triton does.
      if (kind != inference::InferParameter::kInt64Param) {
        return InvalidArgument(field + "expected an int64_param (microseconds)");
      }
      if (value.int64_param() < 0) {
        return InvalidArgument(field + std::to_string(value.int64_param()) + " us is negative");
      }
      pending->timeout_override_us = value.int64_param();
    } else if (key == "priority") {
      // 1 is the highest level; 0 or a level the model does not have means its default level.
      if (kind == inference::InferParameter::kInt64Param) {
        if (value.int64_param() < 0) return InvalidArgument(field + "must not be negative");
        pending->priority = static_cast<uint64_t>(value.int64_param());
      } else if (kind == inference::InferParameter::kUint64Param) {
        pending->priority = value.uint64_param();
      } else {
        return InvalidArgument(field + "expected an int64_param or uint64_param");
      }
    } else if (key == "sequence_id" || key == "sequence_start" || key == "sequence_end") {
      return InvalidArgument(field + "sequence batching is not configured for this model (graphserve "
                             "serves no sequence batching)");
    } else if (key == "triton_enable_empty_final_response") {
      // A stream's answer to a request is its final one already (graphserve serves no decoupled
      // models): accepted, and every stream answer says so (triton_final_response).
      if (kind != inference::InferParameter::kBoolParam) return InvalidArgument(field + "expected a bool_param");
    } else if (key.rfind("triton_", 0) == 0) {
      return InvalidArgument(field + "keys starting with 'triton_' are reserved; the only one served is "
                             "'triton_enable_empty_final_response'");
    } else if (custom != nullptr) {
      custom->push_back(key);
    }
  }
  return Status::Ok();
}

}  // namespace

Status DecodeInferRequest(const ModelSpec& spec, inference::ModelInferRequest* request, PendingRequest* pending,
                          std::vector<std::string>* custom_parameters, SharedMemoryTensors* shared_memory) {
  if (shared_memory != nullptr && shared_memory->registry == nullptr) shared_memory = nullptr;
  const std::string model = "model '" + spec.name + "': ";
  Status parameters = DecodeRequestParameters(model, *request, pending, custom_parameters);
  if (parameters.ok()) parameters = RefuseTensorParameters(model, *request, shared_memory != nullptr);
  if (!parameters.ok()) return parameters;
  InferenceItem* item = &pending->item;
  const int input_count = request->inputs_size();
  // As in Triton, raw_input_contents holds the inputs outside shared memory, in order.
  std::vector<TensorRegion> input_regions(input_count);
  int shared_inputs = 0;
  for (int i = 0; shared_memory != nullptr && i < input_count; ++i) {
    const Status status =
        ParseTensorRegion(model + InputField(i, request->inputs(i).name()) + ": ", request->inputs(i), &input_regions[i]);
    if (!status.ok()) return status;
    if (!input_regions[i].name.empty()) ++shared_inputs;
  }
  const bool raw = request->raw_input_contents_size() > 0;
  if (raw && request->raw_input_contents_size() != input_count - shared_inputs) {
    return InvalidArgument(model + "raw_input_contents: " +
                           std::to_string(request->raw_input_contents_size()) + " entries for " +
                           std::to_string(input_count - shared_inputs) + " inputs" +
                           (shared_inputs > 0 ? " outside shared memory" : ""));
  }

  item->inputs.assign(spec.inputs.size(), HostTensor{});
  std::vector<bool> seen(spec.inputs.size(), false);
  std::string reference_input;
  item->rows = -1;
  item->length = -1;
  int raw_index = 0;
  for (int i = 0; i < input_count; ++i) {
    const inference::ModelInferRequest::InferInputTensor& input = request->inputs(i);
    const std::string field = InputField(i, input.name());
    size_t index = 0;
    while (index < spec.inputs.size() && spec.inputs[index].name != input.name()) ++index;
    if (index == spec.inputs.size()) {
      const bool made_by_server =
          std::any_of(spec.batch_inputs.begin(), spec.batch_inputs.end(),
                      [&](const TensorSpec& made) { return made.name == input.name(); });
      // Offsets a client chose could point outside the batch's buffers: the server makes them.
      if (made_by_server) {
        return InvalidArgument(model + field + ": a batch input, made by the server from the rows; not sent");
      }
      return InvalidArgument(model + field + ": unknown input");
    }
    if (seen[index]) return InvalidArgument(model + field + ": given twice");
    seen[index] = true;
    const TensorSpec& tensor = spec.inputs[index];

    std::vector<int64_t> shape;
    int64_t rows = 0;
    int64_t length = -1;
    Status status = CheckInputShape(spec, tensor, field, input, &shape, &rows, &length);
    if (!status.ok()) return status;
    status = AgreeOnRowsAndLength(model, field, input.name(), rows, length, &reference_input, item);
    if (!status.ok()) return status;
    HostTensor& host = item->inputs[index];
    host.dtype = tensor.dtype;
    host.shape = std::move(shape);
    if (input_regions[i].name.empty()) {
      status = TakeInputData(model, field, i, raw_index++, raw, request, &host);
    } else if (HasTypedContents(input)) {
      status = InvalidArgument(model + field + ": data given both in contents and in shared memory");
    } else {
      status = ReadInputRegion(model + field + ": ", input_regions[i], *shared_memory->registry, &host);
    }
    if (!status.ok()) return status;
    if (index < spec.input_ranges.size()) {
      status = CheckValueRange(model, field, spec.input_ranges[index], host);
      if (!status.ok()) return status;
    }
  }
  for (size_t index = 0; index < spec.inputs.size(); ++index) {
    if (!seen[index]) {
      return InvalidArgument(model + "inputs: missing input '" + spec.inputs[index].name + "'");
    }
  }
  // A fixed-shape model's requests all have the grid's one length.
  if (!spec.has_sequence_length()) item->length = kFixedShapeLength;
  return DecodeRequestedOutputs(spec, *request, item, shared_memory);
}

Status EncodeInferResponse(const ModelSpec& spec, const std::string& version,
                           const inference::ModelInferRequest& request, std::vector<HostTensor>&& outputs,
                           inference::ModelInferResponse* response, const SharedMemoryTensors* shared_memory) {
  static const std::vector<SharedMemoryOutput> kNoRegions;
  const std::vector<SharedMemoryOutput>& in_regions = shared_memory != nullptr ? shared_memory->outputs : kNoRegions;
  const auto output_field = [&](const SharedMemoryOutput& target) {
    return "model '" + spec.name + "': outputs[" + std::to_string(target.requested) + "] '" +
           spec.outputs[target.output].name + "': ";
  };
  // Before anything is written: an answer refused leaves every region as it was.
  for (const SharedMemoryOutput& target : in_regions) {
    const HostTensor& tensor = outputs[target.output];
    if (tensor.bytes.size() > target.span.size()) {
      return InvalidArgument(output_field(target) + "the output is " + std::to_string(tensor.bytes.size()) +
                             " bytes (shape " + ShapeToString(tensor.shape) + " " + DataTypeName(tensor.dtype) +
                             "), more than the " + std::to_string(target.span.size()) + " of parameters['" +
                             kByteSizeParameter + "'] in region '" + target.span.region() + "'");
    }
  }
  response->set_model_name(spec.name);
  response->set_model_version(version);
  response->set_id(request.id());
  auto add_output = [&](size_t index) -> Status {
    HostTensor& tensor = outputs[index];
    inference::ModelInferResponse::InferOutputTensor* output = response->add_outputs();
    output->set_name(spec.outputs[index].name);
    output->set_datatype(DataTypeName(tensor.dtype));
    for (int64_t dim : tensor.shape) output->add_shape(dim);
    const auto target = std::find_if(in_regions.begin(), in_regions.end(),
                                     [&](const SharedMemoryOutput& region) { return region.output == index; });
    if (target == in_regions.end()) {
      response->add_raw_output_contents(std::move(tensor.bytes));
      return Status::Ok();
    }
    // As Triton: the output's entry is there, empty, and its parameters say where its bytes went.
    response->add_raw_output_contents();
    *output->mutable_parameters() = request.outputs(target->requested).parameters();
    const Status status = target->span.Write(tensor.bytes);
    return status.ok() ? status : InvalidArgument(output_field(*target) + status.message());
  };
  if (request.outputs_size() == 0) {
    for (size_t index = 0; index < spec.outputs.size(); ++index) {
      const Status status = add_output(index);
      if (!status.ok()) return status;
    }
    return Status::Ok();
  }
  // In the order the client asked for (DecodeRequestedOutputs refuses a name asked twice).
  std::vector<bool> added(spec.outputs.size(), false);
  for (const auto& requested : request.outputs()) {
    for (size_t index = 0; index < spec.outputs.size(); ++index) {
      if (spec.outputs[index].name == requested.name() && !added[index]) {
        added[index] = true;
        const Status status = add_output(index);
        if (!status.ok()) return status;
      }
    }
  }
  return Status::Ok();
}

void FillModelMetadata(const ModelSpec& spec, const std::string& version,
                       inference::ModelMetadataResponse* response) {
  response->set_name(spec.name);
  response->add_versions(version);
  response->set_platform(spec.platform);
  auto fill = [](const TensorSpec& tensor, inference::ModelMetadataResponse::TensorMetadata* meta) {
    meta->set_name(tensor.name);
    meta->set_datatype(DataTypeName(tensor.dtype));
    meta->add_shape(-1);  // the batch dimension
    for (int64_t dim : tensor.dims) meta->add_shape(dim);
  };
  for (const TensorSpec& tensor : spec.inputs) fill(tensor, response->add_inputs());
  for (const TensorSpec& tensor : spec.outputs) fill(tensor, response->add_outputs());
}

}  // namespace graphserve
