#pragma once
// Turns a KServe v2 ModelInferRequest into the engine's InferenceItem (validating every field against
// the model), and the engine's outputs back into a ModelInferResponse. Stateless; thread-safe.
#include <string>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/batching/pending_request.h"
#include "grpc_service.pb.h"

namespace graphserve {

// Validates `request` against `spec` and moves its tensor data into `pending->item` (the request's
// raw contents are consumed). INVALID_ARGUMENT naming the field for: unknown, missing or repeated
// inputs, a datatype other than the model's, a shape of the wrong rank or with dims < 1 or fixed dims
// that differ, data whose size disagrees with the shape, variable lengths that differ between inputs,
// values outside the input's min_value/max_value, rows above max_batch_size, length above
// max_sequence_length, unknown requested outputs, and any input or output parameter (graphserve
// honours none). Request parameters have Triton's meanings: `timeout` (int64 microseconds >= 0)
// becomes `pending->timeout_override_us`, which the model's queue policy may ignore or clamp;
// `priority` (int64 >= 0 or uint64) becomes `pending->priority`; `triton_enable_empty_final_response`
// (bool) is accepted; sequence_id/start/end (no sequence batching here) and any other `triton_` key
// are INVALID_ARGUMENT; any other key is a custom parameter, accepted and appended to
// `custom_parameters` (may be null) for the caller to report. A fixed-shape model's item gets length
// kFixedShapeLength.
Status DecodeInferRequest(const ModelSpec& spec, inference::ModelInferRequest* request, PendingRequest* pending,
                          std::vector<std::string>* custom_parameters = nullptr);

// Fills `response` with the wanted outputs (as raw_output_contents, in the requested order, or in
// model order when none was requested), and names the model, the version that answered and the
// request id.
void EncodeInferResponse(const ModelSpec& spec, const std::string& version,
                         const inference::ModelInferRequest& request,
                         std::vector<HostTensor>&& outputs, inference::ModelInferResponse* response);

// Metadata shapes per Triton's convention: batch dimension first as -1, variable dimensions -1.
void FillModelMetadata(const ModelSpec& spec, const std::string& version,
                       inference::ModelMetadataResponse* response);

}  // namespace graphserve
