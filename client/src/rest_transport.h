#pragma once
// The load generator's KServe v2 HTTP/REST transport: infer calls as HTTP/1.1 POSTs with the binary
// tensor data extension, over keep-alive connections that libcurl's multi interface pools, driven
// by a few event-loop threads (no thread per call), so that a REST run and a gRPC run of
// graphserve-loadgen differ only in the binding.
// Thread safety: Send may be called from any thread; `done` runs on the transport's threads.
// Lifetime: the destructor waits for every call sent to be answered or to fail.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "grpc_service.pb.h"

namespace graphserve::loadgen {

// An infer request as the REST binding's body: a JSON header of *json_length bytes, then every
// input's raw bytes (binary_data_size), asking for every requested output (or all) in binary.
// `timeout_us` > 0 goes as Triton's `timeout` request parameter: over REST the call's deadline, which
// the server then enforces as a gRPC call's (HTTP carries none).
std::string RestInferBody(const inference::ModelInferRequest& request, size_t* json_length,
                          int64_t timeout_us = 0);
// A REST infer answer back into the gRPC message, so that the gRPC run's answer checks apply:
// `status` is the HTTP status, `json_length` the Inference-Header-Content-Length header (nullopt
// when absent). A non-200 status is the gRPC status the server's HTTP status stands for, with the
// body's "error" message.
grpc::Status ParseRestInferAnswer(long status, const std::string& body, std::optional<size_t> json_length,
                                  inference::ModelInferResponse* response);

class RestTransport {
 public:
  struct Answer {
    long http_status = 0;        // 0 when no answer came (transport error)
    std::string transport_error;  // libcurl's message when http_status is 0
    bool timed_out = false;
    std::string body;
    std::optional<size_t> json_length;
  };
  using Done = std::function<void(void* tag, Answer&& answer)>;

  // `base_url` like "http://127.0.0.1:8000"; each call gives up after `timeout_ms` (0: never).
  RestTransport(std::string base_url, int64_t timeout_ms, int64_t threads, Done done);
  ~RestTransport();

  RestTransport(const RestTransport&) = delete;
  RestTransport& operator=(const RestTransport&) = delete;

  // POSTs `body` to base_url + `path`; `done(tag, ...)` is called once with the answer. The body
  // must stay alive until then.
  void Send(void* tag, const std::string& path, std::shared_ptr<const std::string> body, size_t json_length);

 private:
  class Loop;
  const Done done_;  // before loops_, which call it
  std::vector<std::unique_ptr<Loop>> loops_;
  std::atomic<size_t> next_loop_{0};
};

}  // namespace graphserve::loadgen
