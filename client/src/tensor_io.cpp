// Request builders and response readers: the client's torch-free tensor plumbing.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <random>

#include "graphserve/client/client.h"

namespace graphserve {

namespace {

// Protobuf refuses to serialise a message of 2 GiB or more.
constexpr int64_t kMaxMessageBytes = INT32_MAX;

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

grpc::Status Malformed(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INTERNAL, "malformed response: " + message);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

// Product of the dimensions, or -1 when one is negative or the product overflows.
int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count)) return -1;
  }
  return count;
}

// Bytes per element of a KServe datatype: 0 for BYTES (length-prefixed, variable), -1 when unknown.
int64_t ElementBytes(std::string_view datatype) {
  if (datatype == "BOOL" || datatype == "INT8" || datatype == "UINT8") return 1;
  if (datatype == "INT16" || datatype == "UINT16" || datatype == "FP16" || datatype == "BF16") return 2;
  if (datatype == "INT32" || datatype == "UINT32" || datatype == "FP32") return 4;
  if (datatype == "INT64" || datatype == "UINT64" || datatype == "FP64") return 8;
  if (datatype == "BYTES") return 0;
  return -1;
}

// Values held by the typed field that carries `datatype`; -1 for FP16/BF16, which have none.
int64_t TypedCount(const inference::InferTensorContents& contents, std::string_view datatype) {
  if (datatype == "BOOL") return contents.bool_contents_size();
  if (datatype == "INT8" || datatype == "INT16" || datatype == "INT32") return contents.int_contents_size();
  if (datatype == "INT64") return contents.int64_contents_size();
  if (datatype == "UINT8" || datatype == "UINT16" || datatype == "UINT32") {
    return contents.uint_contents_size();
  }
  if (datatype == "UINT64") return contents.uint64_contents_size();
  if (datatype == "FP32") return contents.fp32_contents_size();
  if (datatype == "FP64") return contents.fp64_contents_size();
  if (datatype == "BYTES") return contents.bytes_contents_size();
  return -1;
}

// Explicit byte order, so that the wire format does not depend on the host's.
void AppendLittleEndian(uint64_t bits, size_t bytes, std::string* out) {
  for (size_t i = 0; i < bytes; ++i) out->push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

uint64_t LoadLittleEndian(const char* data, size_t bytes) {
  uint64_t bits = 0;
  for (size_t i = 0; i < bytes; ++i) bits |= uint64_t{static_cast<unsigned char>(data[i])} << (8 * i);
  return bits;
}

// mt19937_64's output is fixed by the standard but the std:: distributions are not, hence these
// explicit mappings: a seed gives the same request with every standard library.
int64_t RandomId(std::mt19937_64& rng) { return 1 + static_cast<int64_t>(rng() % 999); }

float RandomFloat(std::mt19937_64& rng) {
  // 24 random bits are exactly representable in a float: k / 2^23 - 1 lies in [-1, 1).
  return static_cast<float>(static_cast<double>(rng() >> 40) / (1 << 23) - 1.0);
}

bool IsMaskName(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("mask") != std::string::npos;
}

void SetInt64Data(const std::vector<int64_t>& values, InputEncoding encoding,
                  inference::ModelInferRequest::InferInputTensor* tensor,
                  inference::ModelInferRequest* request) {
  if (encoding == InputEncoding::kTyped) {
    tensor->mutable_contents()->mutable_int64_contents()->Add(values.begin(), values.end());
    return;
  }
  std::string* raw = request->add_raw_input_contents();
  raw->reserve(values.size() * 8);
  for (int64_t value : values) AppendLittleEndian(static_cast<uint64_t>(value), 8, raw);
}

void SetFloatData(const std::vector<float>& values, InputEncoding encoding,
                  inference::ModelInferRequest::InferInputTensor* tensor,
                  inference::ModelInferRequest* request) {
  if (encoding == InputEncoding::kTyped) {
    tensor->mutable_contents()->mutable_fp32_contents()->Add(values.begin(), values.end());
    return;
  }
  std::string* raw = request->add_raw_input_contents();
  raw->reserve(values.size() * 4);
  for (float value : values) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    AppendLittleEndian(bits, 4, raw);
  }
}

// Checks that a raw view has as many bytes as its shape says, before anything decodes it (a view may
// be made by hand, not by FindOutput).
grpc::Status CheckRawSize(const OutputView& output, int64_t element_bytes) {
  if (output.element_count < 0 || output.element_count > kMaxMessageBytes ||
      static_cast<int64_t>(output.raw.size()) != output.element_count * element_bytes) {
    return Malformed("output '" + std::string(output.name) + "' has " +
                     std::to_string(output.raw.size()) + " raw bytes for " +
                     std::to_string(output.element_count) + " " + std::string(output.datatype) +
                     " values");
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status MakeTokenRequest(const RequestSpec& spec, inference::ModelInferRequest* request) {
  if (spec.model.empty()) return Invalid("a token request needs a model name");
  // The encoder's own metadata: the token path and the metadata path then build identical requests.
  inference::ModelMetadataResponse metadata;
  metadata.set_name(spec.model);
  for (const char* name : {"input_ids", "attention_mask"}) {
    auto* input = metadata.add_inputs();
    input->set_name(name);
    input->set_datatype("INT64");
    input->add_shape(-1);
    input->add_shape(-1);
  }
  return MakeRequestFromMetadata(metadata, spec, request);
}

grpc::Status MakeRequestFromMetadata(const inference::ModelMetadataResponse& metadata,
                                     const RequestSpec& spec, inference::ModelInferRequest* request) {
  const bool given_ids = !spec.ids.empty();
  if (!given_ids && (spec.rows < 1 || spec.length < 1)) {
    return Invalid("rows and length must be at least 1, got rows=" + std::to_string(spec.rows) +
                   " length=" + std::to_string(spec.length));
  }
  const int64_t rows = given_ids ? 1 : spec.rows;
  const int64_t length = given_ids ? static_cast<int64_t>(spec.ids.size()) : spec.length;
  const std::string& model = spec.model.empty() ? metadata.name() : spec.model;
  if (metadata.inputs_size() == 0) return Invalid("model '" + model + "' declares no inputs");

  // Built aside, so that *request is left untouched on error.
  inference::ModelInferRequest built;
  built.set_model_name(model);
  built.set_id(spec.request_id);
  for (const std::string& output : spec.outputs) built.add_outputs()->set_name(output);

  int64_t total_bytes = 0;
  for (const auto& input : metadata.inputs()) {
    const std::string where = "input '" + input.name() + "' of model '" + model + "'";
    std::vector<int64_t> shape;
    for (int i = 0; i < input.shape_size(); ++i) {
      const int64_t dim = input.shape(i);
      if (dim < -1) return Invalid(where + " has dimension " + std::to_string(dim));
      shape.push_back(dim != -1 ? dim : i == 0 ? rows : length);
    }
    if (input.datatype() != "INT64" && input.datatype() != "FP32") {
      return Invalid(where + " has datatype " + input.datatype() +
                     "; only INT64 and FP32 inputs can be generated");
    }
    const int64_t element_bytes = ElementBytes(input.datatype());
    const int64_t count = ElementCount(shape);
    if (count < 0 || count > (kMaxMessageBytes - total_bytes) / element_bytes) {
      return Invalid("shape " + ShapeString(shape) + " for " + where +
                     " would make the request exceed 2 GiB");
    }
    total_bytes += count * element_bytes;

    auto* tensor = built.add_inputs();
    tensor->set_name(input.name());
    tensor->set_datatype(input.datatype());
    for (int64_t dim : shape) tensor->add_shape(dim);

    const bool mask = IsMaskName(input.name());
    // Seeded afresh per input, so that every INT64 input carries the same ids.
    std::mt19937_64 rng(spec.seed);
    if (input.datatype() == "INT64") {
      std::vector<int64_t> values(static_cast<size_t>(count), 1);
      if (!mask && given_ids) {
        if (count % static_cast<int64_t>(spec.ids.size()) != 0) {
          return Invalid(where + " of shape " + ShapeString(shape) + " holds " +
                         std::to_string(count) + " values, not a multiple of the " +
                         std::to_string(spec.ids.size()) + " given ids");
        }
        for (size_t i = 0; i < values.size(); ++i) values[i] = spec.ids[i % spec.ids.size()];
      } else if (!mask) {
        for (int64_t& value : values) value = RandomId(rng);
      }
      SetInt64Data(values, spec.encoding, tensor, &built);
    } else {
      std::vector<float> values(static_cast<size_t>(count), 1.0f);
      if (!mask) {
        for (float& value : values) value = RandomFloat(rng);
      }
      SetFloatData(values, spec.encoding, tensor, &built);
    }
  }
  request->Swap(&built);
  return grpc::Status::OK;
}

grpc::Status FindOutput(const inference::ModelInferResponse& response, std::string_view name,
                        OutputView* output) {
  // KServe: raw_output_contents is either empty or has one entry per output, in order.
  const bool raw = response.raw_output_contents_size() > 0;
  if (raw && response.raw_output_contents_size() != response.outputs_size()) {
    return Malformed(std::to_string(response.raw_output_contents_size()) +
                     " raw_output_contents for " + std::to_string(response.outputs_size()) +
                     " outputs");
  }
  std::string available;
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& tensor = response.outputs(i);
    if (tensor.name() != name) {
      available += (available.empty() ? "" : ", ") + tensor.name();
      continue;
    }
    OutputView view;
    view.name = tensor.name();
    view.datatype = tensor.datatype();
    view.shape.assign(tensor.shape().begin(), tensor.shape().end());
    const std::string where = "output '" + tensor.name() + "'";
    view.element_count = ElementCount(view.shape);
    if (view.element_count < 0) {
      return Malformed(where + " has shape " + ShapeString(view.shape));
    }
    const int64_t element_bytes = ElementBytes(tensor.datatype());
    if (element_bytes < 0) {
      return Malformed(where + " has unknown datatype '" + tensor.datatype() + "'");
    }
    if (raw) {
      view.raw = response.raw_output_contents(i);
      // BYTES elements are length-prefixed, so their total size says nothing about the count.
      if (element_bytes > 0) {
        grpc::Status status = CheckRawSize(view, element_bytes);
        if (!status.ok()) return status;
      }
    } else {
      view.typed = &tensor.contents();
      const int64_t have = TypedCount(tensor.contents(), tensor.datatype());
      if (have < 0) {
        return Malformed(where + " is " + tensor.datatype() + ", which has no typed field, but " +
                         "the response has no raw_output_contents");
      }
      if (have != view.element_count) {
        return Malformed(where + " has " + std::to_string(have) + " typed values for shape " +
                         ShapeString(view.shape));
      }
    }
    *output = std::move(view);
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      "response has no output '" + std::string(name) + "' (it has: " +
                          (available.empty() ? "none" : available) + ")");
}

grpc::Status OutputAsFloats(const OutputView& output, std::vector<float>* values) {
  if (output.datatype != "FP32") {
    return Invalid("output '" + std::string(output.name) + "' is " + std::string(output.datatype) +
                   ", not FP32");
  }
  if (output.typed != nullptr) {
    if (output.typed->fp32_contents_size() != output.element_count) {
      return Malformed("output '" + std::string(output.name) + "' has " +
                       std::to_string(output.typed->fp32_contents_size()) + " values for " +
                       std::to_string(output.element_count) + " elements");
    }
    values->assign(output.typed->fp32_contents().begin(), output.typed->fp32_contents().end());
    return grpc::Status::OK;
  }
  grpc::Status status = CheckRawSize(output, 4);
  if (!status.ok()) return status;
  values->resize(static_cast<size_t>(output.element_count));
  for (size_t i = 0; i < values->size(); ++i) {
    const auto bits = static_cast<uint32_t>(LoadLittleEndian(output.raw.data() + 4 * i, 4));
    std::memcpy(&(*values)[i], &bits, sizeof bits);
  }
  return grpc::Status::OK;
}

grpc::Status OutputAsInt64s(const OutputView& output, std::vector<int64_t>* values) {
  if (output.datatype != "INT64") {
    return Invalid("output '" + std::string(output.name) + "' is " + std::string(output.datatype) +
                   ", not INT64");
  }
  if (output.typed != nullptr) {
    if (output.typed->int64_contents_size() != output.element_count) {
      return Malformed("output '" + std::string(output.name) + "' has " +
                       std::to_string(output.typed->int64_contents_size()) + " values for " +
                       std::to_string(output.element_count) + " elements");
    }
    values->assign(output.typed->int64_contents().begin(), output.typed->int64_contents().end());
    return grpc::Status::OK;
  }
  grpc::Status status = CheckRawSize(output, 8);
  if (!status.ok()) return status;
  values->resize(static_cast<size_t>(output.element_count));
  for (size_t i = 0; i < values->size(); ++i) {
    (*values)[i] = static_cast<int64_t>(LoadLittleEndian(output.raw.data() + 8 * i, 8));
  }
  return grpc::Status::OK;
}

}  // namespace graphserve
