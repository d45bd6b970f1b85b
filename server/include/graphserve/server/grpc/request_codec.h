#pragma once
// Turns a KServe v2 ModelInferRequest into the engine's InferenceItem (validating every field against
// the model), and the engine's outputs back into a ModelInferResponse. Stateless; thread-safe.
#include <string>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/batching/batch_planner.h"
#include "graphserve/server/batching/pending_request.h"
#include "graphserve/server/grpc/shared_memory_registry.h"
#include "grpc_service.pb.h"

namespace graphserve {

// An output the request asked for in a shared-memory region: the model's output `output`, asked for
// by the request's outputs[`requested`], goes into `span`.
struct SharedMemoryOutput {
  size_t output = 0;
  int requested = 0;
  SharedMemorySpan span;
};

// Triton's shared-memory extension for one request: the regions it may name, and once decoded, where
// its outputs in shared memory go (holding their regions' mappings until the request is done).
struct SharedMemoryTensors {
  const SharedMemoryRegistry* registry = nullptr;
  std::vector<SharedMemoryOutput> outputs;
};

// Validates `request` against `spec` and moves its tensor data into `pending->item` (the request's
// raw contents are consumed). INVALID_ARGUMENT naming the field for: unknown, missing or repeated
// inputs, a datatype other than the model's, a shape of the wrong rank or with dims < 1 or fixed dims
// that differ, data whose size disagrees with the shape, variable lengths that differ between inputs,
// values outside the input's min_value/max_value, rows above max_batch_size, length above
// max_sequence_length, unknown requested outputs, and any input or output parameter but Triton's
// shared-memory ones.
// With `shared_memory` (its registry set), an input or output may name a registered region
// (`shared_memory_region` string, `shared_memory_byte_size` int64, optional `shared_memory_offset`
// int64, as in Triton): an input's bytes are copied out of the region (its byte size must be the
// tensor's), and raw_input_contents then holds one entry per input outside shared memory; each output
// in a region is added to `shared_memory->outputs`. NOT_FOUND for a region not registered,
// INVALID_ARGUMENT for a span past its region's end or parameters of the wrong type. Without it,
// those parameters are refused like any other. Request parameters have Triton's meanings: `timeout` (int64 microseconds >= 0)
// becomes `pending->timeout_override_us`, which the model's queue policy may ignore or clamp;
// `priority` (int64 >= 0 or uint64) becomes `pending->priority`; `triton_enable_empty_final_response`
// (bool) is accepted; sequence_id/start/end (no sequence batching here) and any other `triton_` key
// are INVALID_ARGUMENT; any other key is a custom parameter, accepted and appended to
// `custom_parameters` (may be null) for the caller to report. A fixed-shape model's item gets length
// kFixedShapeLength.
Status DecodeInferRequest(const ModelSpec& spec, inference::ModelInferRequest* request, PendingRequest* pending,
                          std::vector<std::string>* custom_parameters = nullptr,
                          SharedMemoryTensors* shared_memory = nullptr);

// Fills `response` with the wanted outputs (as raw_output_contents, in the requested order, or in
// model order when none was requested), and names the model, the version that answered and the
// request id. An output in `shared_memory->outputs` is written into its region instead: its
// raw_output_contents entry is empty and it carries the request's shared-memory parameters, as
// Triton answers. INVALID_ARGUMENT naming the output when one is larger than its region's
// shared_memory_byte_size (nothing is written then), or when the client truncated the region's object.
Status EncodeInferResponse(const ModelSpec& spec, const std::string& version,
                           const inference::ModelInferRequest& request, std::vector<HostTensor>&& outputs,
                           inference::ModelInferResponse* response,
                           const SharedMemoryTensors* shared_memory = nullptr);

// Metadata shapes per Triton's convention: batch dimension first as -1, variable dimensions -1.
void FillModelMetadata(const ModelSpec& spec, const std::string& version,
                       inference::ModelMetadataResponse* response);

}  // namespace graphserve
