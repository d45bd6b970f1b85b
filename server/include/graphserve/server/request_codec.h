#pragma once
// Turns a KServe v2 ModelInferRequest into the engine's InferenceItem (validating every field against
// the model), and the engine's outputs back into a ModelInferResponse. Stateless; thread-safe.
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/batch_planner.h"
#include "grpc_service.pb.h"

namespace graphserve {

// Validates `request` against `spec` and moves its tensor data into `pending->item` (the request's
// raw contents are consumed). INVALID_ARGUMENT naming the field for: unknown, missing or repeated
// inputs, a datatype other than the model's, a shape of the wrong rank or with dims < 1 or fixed dims
// that differ, data whose size disagrees with the shape, variable lengths that differ between inputs,
// values outside the input's min_value/max_value, rows above max_batch_size, length above
// max_sequence_length, unknown requested outputs, and any
// request, input or output parameter (graphserve honours none), except Triton's request parameter
// `timeout` where `queue_policy` allows it: an int64 of microseconds, at most the policy's default
// timeout when it has one, set as `pending->timeout_override_us` (0: none). A fixed-shape model's
// item gets length kFixedShapeLength.
Status DecodeInferRequest(const ModelSpec& spec, const QueuePolicy& queue_policy,
                          inference::ModelInferRequest* request, PendingRequest* pending);

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
