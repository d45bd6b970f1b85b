#include "graphserve/server/http/rest_codec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <type_traits>

#include "graphserve/engine/tensor.h"
#include "graphserve/rest_json.h"

namespace graphserve {
namespace {

using nlohmann::json;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The shared-memory extension's input and output parameter naming a registered region.
constexpr const char* kSharedMemoryRegion = "shared_memory_region";

// Bodies come from clients: a string that is not UTF-8 must not make the answer fail.
std::string Dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// A client's value quoted in an error message: scalars as written (cut short), containers by kind
// only. dump() recurses, and an array nested 100,000 deep overflowed the handler thread's stack.
std::string Describe(const json& value) {
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  constexpr size_t kMaxQuoted = 40;
  std::string text = Dump(value);
  if (text.size() > kMaxQuoted) text = text.substr(0, kMaxQuoted) + "...";
  return text;
}

std::string Quoted(const std::string& key) { return "['" + key + "']"; }

Status ParseJson(std::string_view text, json* document) {
  try {
    *document = json::parse(text);
  } catch (const json::parse_error& error) {
    return InvalidArgument("body: not valid JSON (at byte " + std::to_string(error.byte) + ")");
  } catch (const json::out_of_range&) {
    // Valid JSON, but a number beyond a double's range (1e400), which the parser cannot hold.
    return InvalidArgument("body: a number is out of range");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------------
// JSON tensor data → raw little-endian bytes.

template <typename T>
void AppendRaw(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

template <typename T>
bool AppendInteger(const json& value, std::string* out) {
  if (!value.is_number_integer()) return false;
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    AppendRaw(static_cast<T>(v), out);
    return true;
  }
  const int64_t v = value.get<int64_t>();
  if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
    return false;
  }
  AppendRaw(static_cast<T>(v), out);
  return true;
}

// Appends one JSON scalar as an element of `dtype`; false when it is of another kind or out of range
// (never silently truncated).
bool AppendElement(const json& value, DataType dtype, std::string* out) {
  switch (dtype) {
    case DataType::kBool:
      if (!value.is_boolean()) return false;
      out->push_back(value.get<bool>() ? 1 : 0);
      return true;
    case DataType::kUint8: return AppendInteger<uint8_t>(value, out);
    case DataType::kInt8: return AppendInteger<int8_t>(value, out);
    case DataType::kInt16: return AppendInteger<int16_t>(value, out);
    case DataType::kInt32: return AppendInteger<int32_t>(value, out);
    case DataType::kInt64: return AppendInteger<int64_t>(value, out);
    case DataType::kFp32:
      if (!value.is_number()) return false;
      AppendRaw(static_cast<float>(value.get<double>()), out);
      return true;
    case DataType::kFp64:
      if (!value.is_number()) return false;
      AppendRaw(value.get<double>(), out);
      return true;
    case DataType::kFp16:
    case DataType::kBf16:
      return false;  // refused before the data is read
  }
  return false;
}

// How deep `data` may nest: more levels than any tensor has dimensions, and few enough that the
// recursion below, whose depth the client chooses, cannot overflow a thread's stack.
constexpr int kMaxDataDepth = 64;

// Flattens `data` (nested arrays, row-major, or a flat array) into `out`, counting elements.
Status AppendData(const json& data, DataType dtype, const std::string& field, int64_t* count,
                  std::string* out, int depth = 0) {
  if (data.is_array()) {
    if (depth == kMaxDataDepth) {
      return InvalidArgument(field + ": arrays nested more than " + std::to_string(kMaxDataDepth) +
                             " deep");
    }
    for (const json& element : data) {
      Status status = AppendData(element, dtype, field, count, out, depth + 1);
      if (!status.ok()) return status;
    }
    return Status::Ok();
  }
  if (!AppendElement(data, dtype, out)) {
    return InvalidArgument(field + ": element " + std::to_string(*count) + " (" + Describe(data) +
                           ") is not a " + DataTypeName(dtype) + " value");
  }
  ++*count;
  return Status::Ok();
}

// Nested `data` must nest as `dims` do: [[1, 2, 3], [4]] has the 4 values of shape [2, 2] but is no
// tensor of that shape, and reading it row-major would hand the model rows the client did not send.
// A flat array (no element an array) is always allowed. Called after AppendData, which bounds the
// depth.
Status CheckNesting(const json& data, const std::vector<int64_t>& dims, const std::string& field,
                    size_t depth = 0) {
  if (depth == 0) {
    if (!data.is_array()) return Status::Ok();
    const bool flat = std::none_of(data.begin(), data.end(), [](const json& element) { return element.is_array(); });
    if (flat) return Status::Ok();
  }
  if (!data.is_array()) {
    if (depth == dims.size()) return Status::Ok();
    return InvalidArgument(field + ": a value at nesting depth " + std::to_string(depth) + ", but shape " +
                           ShapeToString(dims) + " nests " + std::to_string(dims.size()) + " deep");
  }
  if (depth >= dims.size() || static_cast<int64_t>(data.size()) != dims[depth]) {
    return InvalidArgument(field + ": an array of " + std::to_string(data.size()) + " at nesting depth " +
                           std::to_string(depth) + " does not match shape " + ShapeToString(dims) +
                           " (nested data must nest as the shape does, or be flat)");
  }
  for (const json& element : data) {
    Status status = CheckNesting(element, dims, field, depth + 1);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

// The product of `shape`'s dimensions, refusing negative dimensions and products no request could
// carry (instead of overflowing).
Status ShapeElements(const json& shape, const std::string& field, std::vector<int64_t>* dims,
                     int64_t* elements) {
  if (!shape.is_array()) return InvalidArgument(field + ": expected an array of dimensions");
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  *elements = 1;
  for (const json& dim : shape) {
    if (!dim.is_number_integer() || (!dim.is_number_unsigned() && dim.get<int64_t>() < 0)) {
      return InvalidArgument(field + ": dimensions must be non-negative integers, got " + Describe(dim));
    }
    const int64_t value = dim.is_number_unsigned() && dim.get<uint64_t>() > uint64_t(kMaxElements)
                              ? kMaxElements + 1
                              : dim.get<int64_t>();
    dims->push_back(value);
  }
  for (const int64_t value : *dims) {
    if (value != 0 && *elements > kMaxElements / value) {
      return InvalidArgument(field + ": " + Dump(json(*dims)) + " has too many elements");
    }
    *elements *= value;
  }
  return Status::Ok();
}

Status ToInferParameter(const json& value, const std::string& field, inference::InferParameter* out) {
  if (value.is_boolean()) {
    out->set_bool_param(value.get<bool>());
  } else if (value.is_number_unsigned() &&
             value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
    out->set_uint64_param(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    out->set_int64_param(value.get<int64_t>());
  } else if (value.is_number_float()) {
    out->set_double_param(value.get<double>());
  } else if (value.is_string()) {
    out->set_string_param(value.get<std::string>());
  } else {
    return InvalidArgument(field + ": expected a bool, a number or a string");
  }
  return Status::Ok();
}

// A JSON object's members, each handed to `member(key, value)`; any key not in `known` refused.
template <typename Member>
Status ForEachMember(const json& object, const std::string& field,
                     std::initializer_list<const char*> known, Member member) {
  if (!object.is_object()) return InvalidArgument(field + ": expected a JSON object");
  for (const auto& [key, value] : object.items()) {
    bool is_known = false;
    for (const char* name : known) is_known = is_known || key == name;
    if (!is_known) {
      return InvalidArgument((field.empty() ? "" : field + ".") + key +
                             ": not a field of the KServe v2 REST request");
    }
    Status status = member(key, value);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

Status ExpectString(const json& value, const std::string& field, std::string* out) {
  if (!value.is_string()) return InvalidArgument(field + ": expected a string");
  *out = value.get<std::string>();
  return Status::Ok();
}

Status ParseInput(const json& input, const std::string& field, std::string_view binary,
                  size_t* binary_offset, inference::ModelInferRequest* request) {
  inference::ModelInferRequest::InferInputTensor* tensor = request->add_inputs();
  const json* data = nullptr;
  const json* shape = nullptr;
  std::optional<int64_t> binary_size;
  Status status = ForEachMember(
      input, field, {"name", "datatype", "shape", "parameters", "data"},
      [&](const std::string& key, const json& value) -> Status {
        if (key == "name") return ExpectString(value, field + ".name", tensor->mutable_name());
        if (key == "datatype") return ExpectString(value, field + ".datatype", tensor->mutable_datatype());
        if (key == "shape") {
          shape = &value;
          return Status::Ok();
        }
        if (key == "data") {
          data = &value;
          return Status::Ok();
        }
        if (!value.is_object()) return InvalidArgument(field + ".parameters: expected a JSON object");
        for (const auto& [name, parameter] : value.items()) {
          const std::string parameter_field = field + ".parameters" + Quoted(name);
          if (name == "binary_data_size") {
            if (!parameter.is_number_integer() || parameter.get<int64_t>() < 0) {
              return InvalidArgument(parameter_field + ": expected a byte count");
            }
            binary_size = parameter.get<int64_t>();
            continue;
          }
          Status parameter_status =
              ToInferParameter(parameter, parameter_field, &(*tensor->mutable_parameters())[name]);
          if (!parameter_status.ok()) return parameter_status;
        }
        return Status::Ok();
      });
  if (!status.ok()) return status;
  if (tensor->name().empty()) return InvalidArgument(field + ".name: required");
  if (shape == nullptr) return InvalidArgument(field + ".shape: required");
  std::vector<int64_t> dims;
  int64_t elements = 0;
  status = ShapeElements(*shape, field + ".shape", &dims, &elements);
  if (!status.ok()) return status;
  tensor->mutable_shape()->Add(dims.begin(), dims.end());
  const std::optional<DataType> dtype = DataTypeFromName(tensor->datatype());
  if (!dtype) {
    return InvalidArgument(field + ".datatype: '" + tensor->datatype() + "' is not a datatype graphserve serves");
  }
  // As Triton: the data comes from exactly one of these.
  const bool in_shared_memory = tensor->parameters().count(kSharedMemoryRegion) > 0;
  if ((data != nullptr) + binary_size.has_value() + in_shared_memory > 1) {
    return InvalidArgument(field + ": give one of data, parameters['binary_data_size'] and parameters['" +
                           kSharedMemoryRegion + "']");
  }
  // The gRPC handler reads it from its region: raw_input_contents holds the other inputs only.
  if (in_shared_memory) return Status::Ok();
  std::string* raw = request->add_raw_input_contents();
  if (binary_size) {
    const int64_t expected = elements * static_cast<int64_t>(ElementSize(*dtype));
    if (*binary_size != expected) {
      return InvalidArgument(field + ".parameters['binary_data_size']: " + std::to_string(*binary_size) +
                             " bytes, but shape " + ShapeToString(dims) + " of " + tensor->datatype() +
                             " is " + std::to_string(expected));
    }
    if (*binary_offset + size_t(expected) > binary.size()) {
      return InvalidArgument(field + ".parameters['binary_data_size']: " + std::to_string(expected) +
                             " bytes, but only " + std::to_string(binary.size() - *binary_offset) +
                             " bytes of binary data are left after the JSON header");
    }
    raw->assign(binary.substr(*binary_offset, size_t(expected)));
    *binary_offset += size_t(expected);
    return Status::Ok();
  }
  if (data == nullptr) {
    return InvalidArgument(field + ".data: required (or parameters['binary_data_size'] with the binary "
                           "data extension, or parameters['" + std::string(kSharedMemoryRegion) +
                           "'] with the shared-memory one)");
  }
  if (*dtype == DataType::kFp16 || *dtype == DataType::kBf16) {
    return InvalidArgument(field + ".data: " + tensor->datatype() +
                           " tensors have no JSON form; send them as binary data");
  }
  int64_t count = 0;
  raw->reserve(size_t(std::min<int64_t>(elements, 1 << 24)) * ElementSize(*dtype));
  status = AppendData(*data, *dtype, field + ".data", &count, raw);
  if (status.ok()) status = CheckNesting(*data, dims, field + ".data");
  if (!status.ok()) return status;
  if (count != elements) {
    return InvalidArgument(field + ".data: " + std::to_string(count) + " values, but shape " +
                           ShapeToString(dims) + " has " + std::to_string(elements));
  }
  return Status::Ok();
}

Status ParseOutput(const json& requested, const std::string& field, inference::ModelInferRequest* request,
                   RestOutputFormat* format) {
  auto* output = request->add_outputs();
  std::optional<bool> binary;
  Status status = ForEachMember(
      requested, field, {"name", "parameters"}, [&](const std::string& key, const json& value) -> Status {
        if (key == "name") return ExpectString(value, field + ".name", output->mutable_name());
        if (!value.is_object()) return InvalidArgument(field + ".parameters: expected a JSON object");
        for (const auto& [name, parameter] : value.items()) {
          const std::string parameter_field = field + ".parameters" + Quoted(name);
          if (name == "binary_data") {
            if (!parameter.is_boolean()) return InvalidArgument(parameter_field + ": expected true or false");
            binary = parameter.get<bool>();
            continue;
          }
          Status parameter_status =
              ToInferParameter(parameter, parameter_field, &(*output->mutable_parameters())[name]);
          if (!parameter_status.ok()) return parameter_status;
        }
        return Status::Ok();
      });
  if (!status.ok()) return status;
  if (binary.value_or(false) && output->parameters().count(kSharedMemoryRegion) > 0) {
    return InvalidArgument(field + ".parameters['binary_data']: an output in shared memory (parameters['" +
                           kSharedMemoryRegion + "']) has no data in the response");
  }
  // After the loop: the object's name may come after its parameters.
  if (binary) format->binary_by_output.emplace_back(output->name(), *binary);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------------
// Raw output bytes → a flat JSON array.

template <typename T>
T ReadRaw(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa × 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  const uint32_t bits = exponent == 0x1f ? (sign | 0x7f800000u | (mantissa << 13))
                                         : (sign | ((exponent + 112) << 23) | (mantissa << 13));
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

float Bf16ToFloat(uint16_t bf16) {
  const uint32_t bits = uint32_t(bf16) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

json DataArray(DataType dtype, const std::string& raw) {
  json values = json::array();
  const size_t size = ElementSize(dtype);
  values.get_ref<json::array_t&>().reserve(raw.size() / size);
  for (size_t at = 0; at + size <= raw.size(); at += size) {
    const char* p = raw.data() + at;
    switch (dtype) {
      case DataType::kBool: values.push_back(*p != 0); break;
      case DataType::kUint8: values.push_back(ReadRaw<uint8_t>(p)); break;
      case DataType::kInt8: values.push_back(ReadRaw<int8_t>(p)); break;
      case DataType::kInt16: values.push_back(ReadRaw<int16_t>(p)); break;
      case DataType::kInt32: values.push_back(ReadRaw<int32_t>(p)); break;
      case DataType::kInt64: values.push_back(ReadRaw<int64_t>(p)); break;
      case DataType::kFp16: values.push_back(HalfToFloat(ReadRaw<uint16_t>(p))); break;
      case DataType::kBf16: values.push_back(Bf16ToFloat(ReadRaw<uint16_t>(p))); break;
      case DataType::kFp32: values.push_back(ReadRaw<float>(p)); break;
      case DataType::kFp64: values.push_back(ReadRaw<double>(p)); break;
    }
  }
  return values;
}

// ---------------------------------------------------------------------------------------------------
// Protobuf → JSON by reflection.

json MessageJson(const Message& message);

json FieldJson(const Message& message, const Reflection& reflection, const FieldDescriptor& field, int index) {
  const bool repeated = index >= 0;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return repeated ? reflection.GetRepeatedInt32(message, &field, index) : reflection.GetInt32(message, &field);
    case FieldDescriptor::CPPTYPE_INT64:
      return repeated ? reflection.GetRepeatedInt64(message, &field, index) : reflection.GetInt64(message, &field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return repeated ? reflection.GetRepeatedUInt32(message, &field, index) : reflection.GetUInt32(message, &field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return repeated ? reflection.GetRepeatedUInt64(message, &field, index) : reflection.GetUInt64(message, &field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return repeated ? reflection.GetRepeatedDouble(message, &field, index) : reflection.GetDouble(message, &field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return repeated ? reflection.GetRepeatedFloat(message, &field, index) : reflection.GetFloat(message, &field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return repeated ? reflection.GetRepeatedBool(message, &field, index) : reflection.GetBool(message, &field);
    case FieldDescriptor::CPPTYPE_ENUM:
      return (repeated ? reflection.GetRepeatedEnum(message, &field, index) : reflection.GetEnum(message, &field))
          ->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return repeated ? reflection.GetRepeatedString(message, &field, index) : reflection.GetString(message, &field);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageJson(repeated ? reflection.GetRepeatedMessage(message, &field, index)
                                  : reflection.GetMessage(message, &field));
  }
  return nullptr;
}

// model_config.proto numbers graphserve's own fields from here. Triton's schema has none of them, and
// a strict parse of the config answer with it fails on any: they are left out (the effective config
// carries those settings as `parameters`), even at their defaults.
constexpr int kFirstGraphserveField = 1000;

json MessageJson(const Message& message) {
  const Reflection& reflection = *message.GetReflection();
  const google::protobuf::Descriptor& descriptor = *message.GetDescriptor();
  json object = json::object();
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const FieldDescriptor& field = *descriptor.field(i);
    if (field.number() >= kFirstGraphserveField) continue;
    if (field.is_map()) {
      json map = json::object();
      const FieldDescriptor& key = *field.message_type()->map_key();
      const FieldDescriptor& value = *field.message_type()->map_value();
      for (int entry = 0; entry < reflection.FieldSize(message, &field); ++entry) {
        const Message& pair = reflection.GetRepeatedMessage(message, &field, entry);
        const json key_json = FieldJson(pair, *pair.GetReflection(), key, -1);
        map[key_json.is_string() ? key_json.get<std::string>() : key_json.dump()] =
            FieldJson(pair, *pair.GetReflection(), value, -1);
      }
      object[field.name()] = std::move(map);
    } else if (field.is_repeated()) {
      json values = json::array();
      for (int index = 0; index < reflection.FieldSize(message, &field); ++index) {
        values.push_back(FieldJson(message, reflection, field, index));
      }
      object[field.name()] = std::move(values);
    } else if (field.cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE && !field.containing_oneof()) {
      object[field.name()] = FieldJson(message, reflection, field, -1);
    } else if (reflection.HasField(message, &field)) {  // a set sub-message or oneof member only
      object[field.name()] = FieldJson(message, reflection, field, -1);
    }
  }
  return object;
}

}  // namespace

int HttpStatusFor(StatusCode code) {
  // graphserve's codes are gRPC's numbers (status.h).
  return rest_json::HttpStatusForCode(static_cast<grpc::StatusCode>(code));
}

std::string ErrorBody(const std::string& message) { return Dump(json{{"error", message}}); }

bool RestOutputFormat::IsBinary(const std::string& output) const {
  for (const auto& [name, binary] : binary_by_output) {
    if (name == output) return binary;
  }
  return binary_by_default;
}

int64_t RestInferDeadlineUs(const inference::ModelInferRequest& request, int64_t longest_us) {
  const auto timeout = request.parameters().find("timeout");
  const bool given = timeout != request.parameters().end() &&
                     timeout->second.parameter_choice_case() == inference::InferParameter::kInt64Param &&
                     timeout->second.int64_param() > 0;
  if (!given) return longest_us;
  const int64_t bound = longest_us > 0 ? longest_us : kLongestRestDeadlineUs;
  return std::min(timeout->second.int64_param(), bound);
}

Status ParseRestInferRequest(std::string_view body, std::optional<size_t> json_length,
                             const std::string& model, const std::string& version,
                             inference::ModelInferRequest* request, RestOutputFormat* format) {
  const size_t header_size = json_length.value_or(body.size());
  if (header_size > body.size()) {
    return InvalidArgument("Inference-Header-Content-Length: " + std::to_string(header_size) +
                           " is more than the body's " + std::to_string(body.size()) + " bytes");
  }
  json document;
  Status status = ParseJson(body.substr(0, header_size), &document);
  if (!status.ok()) return status;
  request->set_model_name(model);
  request->set_model_version(version);
  const std::string_view binary = body.substr(header_size);
  size_t binary_offset = 0;
  status = ForEachMember(
      document, "body", {"id", "parameters", "inputs", "outputs"},
      [&](const std::string& key, const json& value) -> Status {
        if (key == "id") return ExpectString(value, "id", request->mutable_id());
        if (key == "parameters") {
          if (!value.is_object()) return InvalidArgument("parameters: expected a JSON object");
          for (const auto& [name, parameter] : value.items()) {
            if (name == "binary_data_output") {
              if (!parameter.is_boolean()) {
                return InvalidArgument("parameters['binary_data_output']: expected true or false");
              }
              format->binary_by_default = parameter.get<bool>();
              continue;
            }
            Status parameter_status = ToInferParameter(parameter, "parameters" + Quoted(name),
                                                       &(*request->mutable_parameters())[name]);
            if (!parameter_status.ok()) return parameter_status;
          }
          return Status::Ok();
        }
        if (!value.is_array()) return InvalidArgument(key + ": expected an array");
        for (size_t i = 0; i < value.size(); ++i) {
          const std::string field = key + "[" + std::to_string(i) + "]";
          Status item_status;
          if (key == "inputs") {
            item_status = ParseInput(value[i], field, binary, &binary_offset, request);
          } else {
            item_status = ParseOutput(value[i], field, request, format);
          }
          if (!item_status.ok()) return item_status;
        }
        return Status::Ok();
      });
  if (!status.ok()) return status;
  if (binary_offset != binary.size()) {
    return InvalidArgument("body: " + std::to_string(binary.size()) +
                           " bytes follow the JSON header, but the inputs' binary_data_size add up to " +
                           std::to_string(binary_offset));
  }
  return Status::Ok();
}

RestInferBody EncodeRestInferResponse(const inference::ModelInferResponse& response,
                                      const RestOutputFormat& format) {
  json header = {{"model_name", response.model_name()}, {"model_version", response.model_version()}};
  if (!response.id().empty()) header["id"] = response.id();
  if (!response.parameters().empty()) {
    json parameters = json::object();
    for (const auto& [name, parameter] : response.parameters()) {
      parameters[name] = rest_json::InferParameterJson(parameter);
    }
    header["parameters"] = std::move(parameters);
  }
  json outputs = json::array();
  std::vector<const std::string*> binary;  // appended after the header, in output order
  size_t binary_size = 0;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& tensor = response.outputs(i);
    static const std::string kNone;
    const std::string& raw = i < response.raw_output_contents_size() ? response.raw_output_contents(i) : kNone;
    json output = {{"name", tensor.name()}, {"datatype", tensor.datatype()}, {"shape", tensor.shape()}};
    const std::optional<DataType> dtype = DataTypeFromName(tensor.datatype());
    if (tensor.parameters().count(kSharedMemoryRegion) > 0) {
      // Written into its region: name, datatype and shape alone, as Triton answers. Its C++ client
      // reads any output `parameters` as binary data's, and failed on the shared-memory ones.
    } else if (format.IsBinary(tensor.name()) || !dtype) {
      output["parameters"] = {{"binary_data_size", raw.size()}};
      binary.push_back(&raw);
      binary_size += raw.size();
    } else {
      output["data"] = DataArray(*dtype, raw);
    }
    outputs.push_back(std::move(output));
  }
  header["outputs"] = std::move(outputs);
  RestInferBody encoded;
  encoded.body = Dump(header);
  if (!binary.empty()) {
    // One copy of each output, straight after the header (large outputs make copies the cost).
    encoded.json_length = encoded.body.size();
    encoded.body.reserve(encoded.body.size() + binary_size);
    for (const std::string* raw : binary) encoded.body += *raw;
  }
  return encoded;
}

std::string ProtoToRestJson(const google::protobuf::Message& message) { return Dump(MessageJson(message)); }

// A request body that must be empty or a JSON object of the fields `known`.
Status ParseBodyObject(std::string_view body, std::initializer_list<const char*> known, json* document) {
  if (body.empty()) {
    *document = json::object();
    return Status::Ok();
  }
  Status status = ParseJson(body, document);
  if (!status.ok()) return status;
  return ForEachMember(*document, "body", known, [](const std::string&, const json&) { return Status::Ok(); });
}

Status ParseRepositoryIndexRequest(std::string_view body, inference::RepositoryIndexRequest* request) {
  json document;
  Status status = ParseBodyObject(body, {"ready"}, &document);
  if (!status.ok()) return status;
  if (document.contains("ready")) {
    if (!document["ready"].is_boolean()) return InvalidArgument("ready: expected true or false");
    request->set_ready(document["ready"].get<bool>());
  }
  return Status::Ok();
}

std::string RepositoryIndexJson(const inference::RepositoryIndexResponse& response) {
  return Dump(MessageJson(response)["models"]);
}

Status ParseLogSettingsRequest(std::string_view body, inference::LogSettingsRequest* request) {
  json document = json::object();  // every key is a setting's name
  if (!body.empty()) {
    Status status = ParseJson(body, &document);
    if (!status.ok()) return status;
    if (!document.is_object()) return InvalidArgument("body: expected a JSON object");
  }
  for (const auto& [name, value] : document.items()) {
    inference::LogSettingsRequest::SettingValue& setting = (*request->mutable_settings())[name];
    if (value.is_boolean()) {
      setting.set_bool_param(value.get<bool>());
    } else if (value.is_number_unsigned() && value.get<uint64_t>() <= std::numeric_limits<uint32_t>::max()) {
      setting.set_uint32_param(value.get<uint32_t>());
    } else if (value.is_string()) {
      setting.set_string_param(value.get<std::string>());
    } else {
      return InvalidArgument(name + ": expected a bool, an unsigned integer or a string");
    }
  }
  return Status::Ok();
}

std::string LogSettingsJson(const inference::LogSettingsResponse& response) {
  json settings = json::object();
  for (const auto& [name, value] : response.settings()) {
    switch (value.parameter_choice_case()) {
      case inference::LogSettingsResponse::SettingValue::kBoolParam: settings[name] = value.bool_param(); break;
      case inference::LogSettingsResponse::SettingValue::kUint32Param: settings[name] = value.uint32_param(); break;
      case inference::LogSettingsResponse::SettingValue::kStringParam: settings[name] = value.string_param(); break;
      case inference::LogSettingsResponse::SettingValue::PARAMETER_CHOICE_NOT_SET: break;
    }
  }
  return Dump(settings);
}

Status ParseTraceSettingRequest(std::string_view body, inference::TraceSettingRequest* request) {
  json document = json::object();
  if (!body.empty()) {
    Status status = ParseJson(body, &document);
    if (!status.ok()) return status;
    if (!document.is_object()) return InvalidArgument("body: expected a JSON object");
  }
  for (const auto& [name, value] : document.items()) {
    // An empty list asks for the default, as the gRPC binding's does.
    auto* values = (*request->mutable_settings())[name].mutable_value();
    if (value.is_null()) continue;
    if (value.is_string()) {
      values->Add(value.get<std::string>());
      continue;
    }
    if (!value.is_array()) return InvalidArgument(name + ": expected a string, an array of strings or null");
    for (const json& item : value) {
      if (!item.is_string()) return InvalidArgument(name + ": expected an array of strings");
      values->Add(item.get<std::string>());
    }
  }
  return Status::Ok();
}

std::string TraceSettingJson(const inference::TraceSettingResponse& response) {
  json settings = json::object();
  for (const auto& [name, setting] : response.settings()) {
    if (name == "trace_level") {
      settings[name] = json(std::vector<std::string>(setting.value().begin(), setting.value().end()));
    } else {
      settings[name] = setting.value().empty() ? std::string() : setting.value(0);
    }
  }
  return Dump(settings);
}

Status ParseSystemSharedMemoryRegister(std::string_view body, inference::SystemSharedMemoryRegisterRequest* request) {
  json document;
  Status status = ParseBodyObject(body, {"key", "offset", "byte_size"}, &document);
  if (!status.ok()) return status;
  if (!document.contains("key")) return InvalidArgument("key: required");
  if (!document.contains("byte_size")) return InvalidArgument("byte_size: required");
  const auto byte_count = [&](const char* field, uint64_t* value) {
    if (!document[field].is_number_unsigned()) return InvalidArgument(std::string(field) + ": expected a byte count");
    *value = document[field].get<uint64_t>();
    return Status::Ok();
  };
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  status = ExpectString(document["key"], "key", request->mutable_key());
  if (status.ok() && document.contains("offset")) status = byte_count("offset", &offset);
  if (status.ok()) status = byte_count("byte_size", &byte_size);
  request->set_offset(offset);
  request->set_byte_size(byte_size);
  return status;
}

namespace {

// Standard base64 (RFC 4648, '=' padding), strictly: false on any other character, a length not a
// multiple of 4 or padding anywhere but the end.
bool DecodeBase64(const std::string& text, std::string* bytes) {
  const auto sextet = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return false;
  bytes->clear();
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    uint32_t group = 0;
    for (size_t j = 0; j < 4; ++j) {
      const int value = j >= 4 - padding ? 0 : sextet(text[i + j]);
      if (value < 0) return false;
      group = group << 6 | static_cast<uint32_t>(value);
    }
    for (size_t j = 0; j < 3 - padding; ++j)
      bytes->push_back(static_cast<char>(group >> (16 - 8 * j) & 0xff));
  }
  return true;
}

}  // namespace

Status ParseCudaSharedMemoryRegister(std::string_view body,
                                     inference::CudaSharedMemoryRegisterRequest* request) {
  json document;
  Status status = ParseBodyObject(body, {"raw_handle", "device_id", "byte_size"}, &document);
  if (!status.ok()) return status;
  for (const char* field : {"raw_handle", "device_id", "byte_size"}) {
    if (!document.contains(field)) return InvalidArgument(std::string(field) + ": required");
  }
  const json& handle = document["raw_handle"];
  if (!handle.is_object() || handle.size() != 1 || !handle.contains("b64") || !handle["b64"].is_string()) {
    return InvalidArgument("raw_handle: expected {\"b64\": the cudaIpcMemHandle_t's bytes in base64}");
  }
  if (!DecodeBase64(handle["b64"].get<std::string>(), request->mutable_raw_handle())) {
    return InvalidArgument("raw_handle.b64: not base64 (RFC 4648, with '=' padding)");
  }
  if (!document["device_id"].is_number_integer()) return InvalidArgument("device_id: expected an integer");
  if (!document["byte_size"].is_number_unsigned()) return InvalidArgument("byte_size: expected a byte count");
  request->set_device_id(document["device_id"].get<int64_t>());
  request->set_byte_size(document["byte_size"].get<uint64_t>());
  return Status::Ok();
}

std::string SystemSharedMemoryStatusJson(const inference::SystemSharedMemoryStatusResponse& response) {
  json regions = json::array();
  // By name: a protobuf map's order is unspecified.
  std::map<std::string, const inference::SystemSharedMemoryStatusResponse::RegionStatus*> sorted;
  for (const auto& [name, region] : response.regions()) sorted.emplace(name, &region);
  for (const auto& [name, region] : sorted) {
    regions.push_back({{"name", region->name()},
                       {"key", region->key()},
                       {"offset", region->offset()},
                       {"byte_size", region->byte_size()}});
  }
  return Dump(regions);
}

std::string CudaSharedMemoryStatusJson(const inference::CudaSharedMemoryStatusResponse& response) {
  json regions = json::array();
  std::map<std::string, const inference::CudaSharedMemoryStatusResponse::RegionStatus*> sorted;
  for (const auto& [name, region] : response.regions()) sorted.emplace(name, &region);
  for (const auto& [name, region] : sorted) {
    regions.push_back(
        {{"name", region->name()}, {"device_id", region->device_id()}, {"byte_size", region->byte_size()}});
  }
  return Dump(regions);
}

Status ParseRepositoryParameters(
    std::string_view body,
    google::protobuf::Map<std::string, inference::ModelRepositoryParameter>* parameters) {
  json document;
  Status status = ParseBodyObject(body, {"parameters"}, &document);
  if (!status.ok() || !document.contains("parameters")) return status;
  const json& value = document["parameters"];
  if (!value.is_object()) return InvalidArgument("parameters: expected a JSON object");
  for (const auto& [name, parameter] : value.items()) {
    inference::ModelRepositoryParameter& out = (*parameters)[name];
    if (parameter.is_boolean()) {
      out.set_bool_param(parameter.get<bool>());
    } else if (parameter.is_number_integer()) {
      out.set_int64_param(parameter.get<int64_t>());
    } else if (parameter.is_string()) {
      out.set_string_param(parameter.get<std::string>());
    } else {
      return InvalidArgument("parameters" + Quoted(name) + ": expected a bool, an integer or a string");
    }
  }
  return Status::Ok();
}

}  // namespace graphserve
