#pragma once
// The KServe v2 HTTP/REST endpoint (Triton's port-8000 API: health, metadata, config, infer with JSON,
// binary or shared-memory tensors, statistics, repository index/load/unload, log settings, system
// and CUDA shared-memory regions). Each route belongs to an API group (api_groups.h: a path the table does
// not know is answered 404), whose restriction is checked before the body is read. Each call is
// translated
// (rest_codec.h) into the gRPC binding's request and handed to graphserve's own gRPC service through
// an in-process channel, so both bindings share every handler, the batcher, metrics and statistics,
// and gRPC's status codes map to HTTP ones in one place.
//
// Bodies may come in gzip or deflate and answers go back in either where the client accepts it
// (HttpServerOptions::content_codings). Refused with 501 and the reason: request tracing (graphserve
// has none); CUDA shared-memory registration on a server without a CUDA device is refused with 400
// (by the gRPC service, as every other refusal). A client that disconnects while
// its request waits for its batch has its call cancelled (HttpReply::OnClientGone), as gRPC cancels
// a gRPC client's. An infer call carries a deadline as a gRPC client's call does: its request's
// `timeout` parameter, or the endpoint's default (RestEndpointOptions::infer_deadline_us).
// Thread safety: requests run on the HTTP server's threads and answer from gRPC's. Lifetime: create
// and destroy from one controlling thread; destroy it before the gRPC server it calls is gone, or
// after every call through the channel has finished (the destructor waits for answers owed).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "graphserve/engine/status.h"
#include "graphserve/server/http/http_client_bounds.h"

namespace grpc {
class Channel;
}

namespace graphserve {

class ApiGate;
class GrpcApiGate;
class HttpServer;
class HttpTls;
class ServerMetrics;
class TokenAuthenticator;
struct RestApi;

struct RestEndpointOptions {
  std::string address = "0.0.0.0:8000";
  // Threads that parse and encode JSON and run the event loops.
  int thread_count = 8;
  // The largest request body (sent, and inflated when it comes in gzip or deflate), and the largest
  // request it may decode to: the gRPC port's largest message, since each request goes on through the
  // gRPC service.
  size_t max_body_bytes = 256u << 20;
  size_t max_request_bytes = 256u << 20;
  // What clients may hold: buffered bytes, each phase's time, connections per address (the
  // --http-* flags of docs/security.md).
  HttpClientBounds bounds = RestClientBounds();
  // An infer call's deadline when its request sends no `timeout`, and the cap on one that does
  // (RestInferDeadlineUs); 0: none. 60 s, tritonclient.http's network timeout: its caller has left
  // by then, so work still queued is dropped unrun rather than run for nobody.
  int64_t infer_deadline_us = 60'000'000;
  // HTTPS with these credentials; null: plaintext.
  std::shared_ptr<HttpTls> tls;
  // Set (outliving the endpoint): requests need a token, health probes unless it protects them too.
  const TokenAuthenticator* auth = nullptr;
  // Set (outliving the endpoint): who may call which API group over REST (api_groups.h), checked from
  // the headers, after the token; refused with 403. Null: everyone.
  const ApiGate* gate = nullptr;
  // Set (outliving the endpoint): the gRPC service's own gate, which the calls this endpoint makes
  // in-process get past (grpc_security.h): they were admitted here.
  const GrpcApiGate* grpc_gate = nullptr;
};

class RestEndpoint {
 public:
  // Listens on options.address (UNAVAILABLE naming --http-address when it cannot) and serves through
  // `service`, an in-process channel to the gRPC service. `metrics` counts infer requests the REST
  // layer refuses before they reach gRPC (malformed JSON, wrong data size), the bytes of bodies and
  // answers held, and the connections closed to hold `options.bounds`; it must outlive the endpoint.
  static Status Start(const RestEndpointOptions& options, std::shared_ptr<grpc::Channel> service,
                      ServerMetrics* metrics, std::unique_ptr<RestEndpoint>* endpoint);
  ~RestEndpoint();

  RestEndpoint(const RestEndpoint&) = delete;
  RestEndpoint& operator=(const RestEndpoint&) = delete;

  int port() const;
  // For a drain: stops taking connections, and requests still arriving on open ones are answered
  // 503. Requests already handed to gRPC finish.
  void StopAccepting();
  // For a drain, after StopAccepting and before the gRPC server shuts down: shutting gRPC down closes
  // the in-process channel at once, so the REST calls must be answered first. Blocks until every
  // request taken has been answered, or `deadline` passes; true when all were. Past it, a call that
  // gRPC then cancels is answered 503 naming the drain timeout.
  bool Drain(std::chrono::steady_clock::time_point deadline);

 private:
  RestEndpoint(std::unique_ptr<RestApi> api, std::unique_ptr<HttpServer> server);

  std::unique_ptr<RestApi> api_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace graphserve
