// graphserve's C++ client: a thin synchronous wrapper over the KServe v2 gRPC stub, plus torch-free
// helpers to build token requests and read outputs, shared by the tests, graphserve-cli and the load
// generator.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include "grpc_service.grpc.pb.h"
#include "grpc_service.pb.h"

namespace graphserve {

// Per-client settings; durations in milliseconds.
struct ClientOptions {
  // Deadline of every RPC, measured from the call; 0 or less means no deadline.
  int64_t timeout_ms = 10000;
  // Pause between two ServerReady polls in WaitForReady; values below 1 are taken as 1.
  int64_t ready_poll_interval_ms = 100;
  // Caps gRPC's reconnect backoff (120 s by default), so that a client created before the server is up
  // notices it within about this long; 0 or less keeps gRPC's default.
  int64_t max_reconnect_backoff_ms = 1000;
  // TLS: the PEM roots that signed the server's certificate (empty: the system's); for mutual TLS
  // the client's PEM certificate chain and key.
  bool tls = false;
  std::string tls_root_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // Sent as "authorization: Bearer TOKEN" with every call; empty: none.
  std::string token;
};

// Where a client's TLS files and token come from (graphserve-cli's flags).
struct ClientSecurityFlags {
  bool tls = false;  // implied by any file below
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // The token file's first token; without it, GRAPHSERVE_AUTH_TOKEN's first (never a flag's value,
  // which `ps` shows).
  std::string token_file;
};

// Reads the files into `options`; false with `error` naming the flag at fault.
bool LoadClientSecurity(const ClientSecurityFlags& flags, ClientOptions* options, std::string* error);

// Synchronous client for one graphserve (or any KServe v2 gRPC) server, over plaintext or TLS.
// Owns its channel; the connection is made lazily, on the first RPC. Each method blocks until the
// server answers or the per-call deadline passes (DEADLINE_EXCEEDED); UNAVAILABLE means the server
// could not be reached and the call may be retried later. Responses are received whatever their size.
// Thread-safe: any method may be called concurrently from any thread (the gRPC channel and stub are
// thread-safe, and nothing else changes after construction).
class InferenceClient {
 public:
  // `address` is "host:port", e.g. "localhost:8001".
  explicit InferenceClient(const std::string& address, const ClientOptions& options = ClientOptions());

  const std::string& address() const { return address_; }

  grpc::Status ServerLive(bool* live);
  grpc::Status ServerReady(bool* ready);
  grpc::Status ModelReady(const std::string& model, bool* ready);
  grpc::Status ServerMetadata(inference::ServerMetadataResponse* response);
  grpc::Status ModelMetadata(const std::string& model, inference::ModelMetadataResponse* response);
  // The model's effective configuration (Triton's ModelConfig, plus graphserve's fields).
  grpc::Status ModelConfig(const std::string& model, inference::ModelConfigResponse* response);
  grpc::Status ModelInfer(const inference::ModelInferRequest& request,
                          inference::ModelInferResponse* response);

  // Polls ServerReady until it answers true (OK) or `timeout` has passed (DEADLINE_EXCEEDED, with the
  // last answer or error in the message). Errors such as UNAVAILABLE while the server starts are
  // retried, not returned.
  grpc::Status WaitForReady(std::chrono::milliseconds timeout);

 private:
  // The call's deadline and token.
  void Prepare(grpc::ClientContext* context) const;

  const std::string address_;
  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

// graphserve's default gRPC port, which an address without a port gets.
inline constexpr int kDefaultGrpcPort = 8001;

// Checks a server address as a person types it and writes the one gRPC connects to: "HOST:PORT",
// "[IPv6]:PORT", or either without a port (`kDefaultGrpcPort` appended); "unix:PATH" passes as is.
// On a mistake returns false with `error` saying what to type instead: a scheme ("http://..."), a
// port that is not 1..65535, an IPv6 address without brackets, an empty host.
bool NormalizeServerAddress(const std::string& address, std::string* normalized, std::string* error);

inline constexpr int kDefaultHttpPort = 8000;

// The same for the KServe v2 REST port (graphserve-loadgen --http-address): `kDefaultHttpPort` when
// the port is left out; no unix: paths.
bool NormalizeHttpAddress(const std::string& address, std::string* normalized, std::string* error);

// A failed call as a person can act on it: a server that refused the connection is "cannot reach
// graphserve at ADDRESS (connection refused); is it running?", a host that does not resolve or an
// HTTP/1.x server (the metrics port) says so; any other status is "CODE: message", the server's own
// words.
std::string DescribeCallError(const grpc::Status& status, const std::string& address);

// "UNAVAILABLE", "DEADLINE_EXCEEDED", ...: the canonical name of a gRPC status code.
const char* StatusCodeName(grpc::StatusCode code);

// ---- Building requests ----------------------------------------------------------------------------

// How a request carries its input data.
enum class InputEncoding {
  kRaw,    // raw_input_contents: little-endian bytes, one entry per input (graphserve's fast path)
  kTyped,  // InferTensorContents.int64_contents / fp32_contents
};

// What a generated request holds.
struct RequestSpec {
  std::string model;
  std::string request_id;  // echoed back in the response; may be empty
  // Size of generated data when `ids` is empty: rows is the batch, length the tokens per row.
  int64_t rows = 1;
  int64_t length = 8;
  // Token ids are drawn uniformly from [1, 1000) and floats from [-1, 1), by a generator seeded with
  // `seed`: the same spec gives the same request on every platform.
  uint64_t seed = 0;
  // Non-empty: one row of exactly these ids (rows = 1, length = ids.size()); they are not range-checked.
  std::vector<int64_t> ids;
  InputEncoding encoding = InputEncoding::kRaw;
  // Names of the outputs to return; empty asks for all of them.
  std::vector<std::string> outputs;
};

// Replaces *request with one for a token model whose inputs are input_ids and attention_mask, both
// INT64 [rows, length]: input_ids holds the ids, attention_mask ones. INVALID_ARGUMENT for an empty
// model name or rows/length below 1.
grpc::Status MakeTokenRequest(const RequestSpec& spec, inference::ModelInferRequest* request);

// Replaces *request with one holding every input that `metadata` declares, in its order. A -1 in the
// leading (batch) dimension becomes rows, any other -1 becomes length. INT64 inputs get the token ids
// (every one the same ids); FP32 inputs get random floats; inputs whose name contains "mask" (any case)
// get ones instead. The model name is spec.model, or metadata.name() when that is empty.
// INVALID_ARGUMENT for another datatype, a malformed shape, given ids that do not fill an input's
// shape a whole number of times, or a request over 2 GiB.
grpc::Status MakeRequestFromMetadata(const inference::ModelMetadataResponse& metadata,
                                     const RequestSpec& spec, inference::ModelInferRequest* request);

// ---- Reading responses ----------------------------------------------------------------------------

// One output of a response, checked for consistency. Views into the response: valid while it lives
// and is not modified.
struct OutputView {
  std::string_view name;
  std::string_view datatype;
  std::vector<int64_t> shape;
  int64_t element_count = 0;
  // The output's bytes (little-endian, row-major) when the response is in raw form.
  std::string_view raw;
  // The typed contents when the response is not in raw form (graphserve always answers raw); nullptr
  // otherwise.
  const inference::InferTensorContents* typed = nullptr;
};

// Finds output `name`. NOT_FOUND when the response has no such output; INTERNAL when the response is
// malformed: a negative dimension, raw_output_contents not one per output, an unknown datatype, or a
// size that does not match shape and datatype.
grpc::Status FindOutput(const inference::ModelInferResponse& response, std::string_view name,
                        OutputView* output);

// Copies an FP32 (resp. INT64) output's values, row-major; INVALID_ARGUMENT for another datatype.
grpc::Status OutputAsFloats(const OutputView& output, std::vector<float>* values);
grpc::Status OutputAsInt64s(const OutputView& output, std::vector<int64_t>* values);

}  // namespace graphserve
