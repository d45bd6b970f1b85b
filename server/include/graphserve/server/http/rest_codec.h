#pragma once
// The KServe v2 HTTP/REST binding's message formats, translated to and from the gRPC binding's
// protobuf messages, so that the REST endpoint hands every call to the very gRPC handlers (one path
// for batching, validation, metrics and errors). Covers the JSON tensor form and Triton's binary
// tensor data extension: a JSON header of Inference-Header-Content-Length bytes followed by the
// tensors' raw bytes (input parameter `binary_data_size`, output parameter `binary_data`, request
// parameter `binary_data_output`). Triton's shared-memory parameters pass through to the gRPC request,
// which reads and writes the regions; an output in shared memory comes back with its name, datatype
// and shape alone, as from Triton.
// Stateless functions; thread-safe. Errors are INVALID_ARGUMENT naming the JSON field
// (`inputs[1].shape`), the form gRPC's refusals take.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/message.h>

#include "graphserve/engine/status.h"
#include "grpc_service.pb.h"

namespace graphserve {

// The HTTP status Triton's REST endpoint answers a status code with (NOT_FOUND 404, UNAVAILABLE
// 503, UNIMPLEMENTED 501, INTERNAL 500, most others 400), plus what HTTP has a closer word for:
// RESOURCE_EXHAUSTED 429 and DEADLINE_EXCEEDED 504.
int HttpStatusFor(StatusCode code);
// The protocol's error body: {"error": "<message>"}.
std::string ErrorBody(const std::string& message);

// How each output of an infer response goes back: as JSON `data` or as binary data after the header.
struct RestOutputFormat {
  // From the request parameter `binary_data_output`: outputs without their own choice go binary.
  bool binary_by_default = false;
  // Outputs that chose with their `binary_data` parameter.
  std::vector<std::pair<std::string, bool>> binary_by_output;

  bool IsBinary(const std::string& output) const;
};

// Parses an infer request body. `json_length` is the Inference-Header-Content-Length header (nullopt
// when absent: the whole body is JSON); the bytes after it are the binary tensors, in the order of the
// inputs that declare `binary_data_size`. Fills `request` for `model`/`version` (from the URL), with
// the data of every input outside shared memory as raw_input_contents; parameters graphserve's REST
// layer does not consume are
// passed on, so that the gRPC handler refuses or honours them exactly as it does over gRPC.
Status ParseRestInferRequest(std::string_view body, std::optional<size_t> json_length,
                             const std::string& model, const std::string& version,
                             inference::ModelInferRequest* request, RestOutputFormat* format);

// The longest REST infer deadline (RestInferDeadlineUs): a day, far past any batch, and within what
// a gRPC deadline added to the clock can hold.
inline constexpr int64_t kLongestRestDeadlineUs = int64_t{86'400} * 1'000'000;
// A REST infer call's deadline, in microseconds from its arrival; 0: none. HTTP carries no deadline,
// so a REST client's is Triton's `timeout` request parameter (int64 µs, what tritonclient.http's
// `infer(timeout=)` sends), capped at `longest_us`; a call without one (or with 0, Triton's "none")
// gets `longest_us` (--http-infer-deadline-ms; 0: no cap and no default, a `timeout` then counting
// up to kLongestRestDeadlineUs). A negative or mistyped `timeout` counts as none here: the gRPC
// service then refuses it, naming the parameter. The parameter also goes on to the model's queue policy
// (allow_timeout_override) as over gRPC.
int64_t RestInferDeadlineUs(const inference::ModelInferRequest& request, int64_t longest_us);

// An encoded infer response: `body` is the JSON header followed by the binary outputs;
// `json_length` is the header's size when any output is binary (send it as
// Inference-Header-Content-Length), nullopt when the body is plain JSON.
struct RestInferBody {
  std::string body;
  std::optional<size_t> json_length;
};
RestInferBody EncodeRestInferResponse(const inference::ModelInferResponse& response,
                                      const RestOutputFormat& format);

// A protobuf message as the REST binding's JSON: proto field names, enums by name, 64-bit integers as
// JSON numbers (protobuf's own JSON printer quotes them, which Triton's REST clients do not expect),
// maps as objects, every scalar field present (as Triton prints model configs) but graphserve's own
// fields of model_config.proto (numbered from 1000), which Triton's schema lacks.
std::string ProtoToRestJson(const google::protobuf::Message& message);
// The repository index body ({"ready": true}, or empty) and the answer: a JSON array of the models.
Status ParseRepositoryIndexRequest(std::string_view body, inference::RepositoryIndexRequest* request);
std::string RepositoryIndexJson(const inference::RepositoryIndexResponse& response);
// Log settings as Triton's REST binding has them: one flat JSON object of setting → bool, unsigned
// integer or string, in the request body (the settings to change) and in the answer (all of them).
Status ParseLogSettingsRequest(std::string_view body, inference::LogSettingsRequest* request);
std::string LogSettingsJson(const inference::LogSettingsResponse& response);
// Trace settings as Triton's REST binding has them: a JSON object of setting → string, array of
// strings, or null (back to the default), in the request body; in the answer trace_level is an array
// and every other setting its one string.
Status ParseTraceSettingRequest(std::string_view body, inference::TraceSettingRequest* request);
std::string TraceSettingJson(const inference::TraceSettingResponse& response);
// Triton's system shared-memory register body ({"key": string, "offset": byte count, optional,
// "byte_size": byte count}), for the region the URL names.
Status ParseSystemSharedMemoryRegister(std::string_view body, inference::SystemSharedMemoryRegisterRequest* request);
// Triton's CUDA shared-memory register body ({"raw_handle": {"b64": the cudaIpcMemHandle_t's bytes in
// base64}, "device_id": integer, "byte_size": byte count}), for the region the URL names; the handle's
// size and the device are checked by the gRPC service.
Status ParseCudaSharedMemoryRegister(std::string_view body,
                                     inference::CudaSharedMemoryRegisterRequest* request);
// The status answers as Triton's REST binding has them: a JSON array of the regions, by name, each
// {"name", "key", "offset", "byte_size"} (system) or {"name", "device_id", "byte_size"} (CUDA).
std::string SystemSharedMemoryStatusJson(const inference::SystemSharedMemoryStatusResponse& response);
std::string CudaSharedMemoryStatusJson(const inference::CudaSharedMemoryStatusResponse& response);
// The parameters of a repository load/unload body ({"parameters": {...}}), into the gRPC request's
// map, so that the gRPC handler refuses the ones graphserve does not support by name.
Status ParseRepositoryParameters(
    std::string_view body,
    google::protobuf::Map<std::string, inference::ModelRepositoryParameter>* parameters);

}  // namespace graphserve
