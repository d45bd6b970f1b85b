// The gRPC infer path's decoder: the input is a serialized ModelInferRequest (as gRPC hands it to
// the handler), decoded against the model its model_name names (fuzz_support.h), then answered.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphserve::fuzz::SilenceLogs();
  graphserve::fuzz::Models();  // config errors surface before the first input, not inside one
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest request;
  // Bytes that are no message never reach the handler: gRPC refuses them.
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;
  const graphserve::fuzz::FuzzModel& model = graphserve::fuzz::ModelFor(request.model_name());
  // Both REST answer forms: the same response goes out as JSON data and as binary data.
  for (bool binary : {false, true}) {
    inference::ModelInferRequest copy = request;  // decoding consumes the raw contents
    graphserve::RestOutputFormat format;
    format.binary_by_default = binary;
    if (!graphserve::fuzz::DecodeAndAnswer(model, format, &copy)) break;
  }
  return 0;
}
