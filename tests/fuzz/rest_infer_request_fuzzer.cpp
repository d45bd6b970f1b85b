// The REST infer path's decoder: the input is two little-endian bytes of
// Inference-Header-Content-Length (0xffff: no such header, the whole body is JSON) followed by the
// body. An accepted body is then decoded against every fuzz model, as the gRPC handler it is handed
// to would, and answered in the format it asked for.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "fuzz_support.h"
#include "graphserve/engine/tensor.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphserve::fuzz::SilenceLogs();
  graphserve::fuzz::Models();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using graphserve::fuzz::Models;
  if (size < 2) return -1;
  const unsigned prefix = data[0] | unsigned(data[1]) << 8;
  const std::optional<size_t> json_length =
      prefix == 0xffff ? std::nullopt : std::optional<size_t>(prefix);
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);

  inference::ModelInferRequest request;
  graphserve::RestOutputFormat format;
  const graphserve::Status status =
      graphserve::ParseRestInferRequest(body, json_length, "encoder", "", &request, &format);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == graphserve::StatusCode::kInvalidArgument, "a refusal is INVALID_ARGUMENT");
    return 0;
  }
  // rest_codec.h: every input's data as raw_input_contents, of its shape's size.
  FUZZ_CHECK(request.raw_input_contents_size() == request.inputs_size(), "one raw content per input");
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    const auto dtype = graphserve::DataTypeFromName(input.datatype());
    FUZZ_CHECK(dtype.has_value(), "an accepted input has a served datatype");
    const std::vector<int64_t> shape(input.shape().begin(), input.shape().end());
    FUZZ_CHECK(request.raw_input_contents(i).size() ==
                   size_t(graphserve::ElementCount(shape)) * graphserve::ElementSize(*dtype),
               "inputs[" + std::to_string(i) + "]'s bytes agree with its shape");
  }
  for (const graphserve::fuzz::FuzzModel& model : Models()) {
    inference::ModelInferRequest copy = request;
    copy.set_model_name(model.spec.name);
    graphserve::fuzz::DecodeAndAnswer(model, format, &copy);
  }
  return 0;
}
