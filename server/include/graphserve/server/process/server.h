#pragma once
// A whole graphserve process minus its flags: the gRPC endpoint, the REST endpoint (which calls the
// gRPC service in-process), the /metrics endpoint, the model repository and their lifetime. Start
// brings the endpoints up at once (so liveness answers and
// Prometheus sees the target during warm-up), loads and warms up the models, exports their metrics,
// then reports ready. Shutdown stops accepting, lets in-flight requests finish, stops serving /metrics,
// and stops the schedulers.
// Not thread-safe: call Start, Wait-for-signal and Shutdown from one controlling thread.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/server/common/clock.h"
#include "graphserve/server/grpc/shared_memory_registry.h"
#include "graphserve/server/http/http_client_bounds.h"
#include "graphserve/server/observability/metrics_endpoint.h"
#include "graphserve/server/observability/trace_settings.h"
#include "graphserve/server/process/exit_status.h"
#include "graphserve/server/repository/model_repository.h"
#include "graphserve/server/security/api_groups.h"
#include "graphserve/server/security/auth.h"

namespace grpc {
class Server;
}

namespace graphserve {

class GrpcAcceptor;
class GpuMonitor;
class GrpcApiGate;
class HttpTls;
class InferenceService;
class RestEndpoint;
class ServerMetrics;
class TraceWriter;
class UnaryInferQueues;

struct ServerOptions {
  // The KServe v2 gRPC endpoint; empty: none (the REST endpoint still reaches the service in-process).
  std::string grpc_address = "0.0.0.0:8001";
  // Calls one gRPC connection may have open at once; more wait in the client.
  int grpc_max_concurrent_streams = 4096;
  // gRPC connections one client address may have open at once; more are closed on arrival. 0: no cap
  // (behind a proxy every client shares its address). REST's default, for the same reason: one
  // client must not take every descriptor.
  int grpc_max_connections_per_client = 256;
  // Triton's --grpc-infer-response-compression-level: none, low, medium or high. ModelInfer's and
  // ModelStreamInfer's answers are compressed with what gRPC picks for the level among the
  // algorithms the client accepts; none (Triton's default) leaves them plain.
  std::string grpc_infer_response_compression_level = "none";
  // Threads (each with its completion queue) that take ModelInfer calls; 0: half the cores, 2 to 16.
  int grpc_infer_threads = 0;
  // After each event, ModelInfer's threads poll their completion queues, and idle schedulers their
  // queues, without sleeping for this long (RepositoryOptions::scheduler_busy_poll carries the schedulers').
  // Trades CPU for the wake-ups of a lone request; 0: they sleep at once; negative: DefaultBusyPoll().
  std::chrono::microseconds busy_poll{-1};
  // How many of ModelInfer's threads may busy-poll at once (SpinSlots); the others sleep at once.
  int busy_poll_threads = 1;
  // The largest gRPC request message and REST request body accepted; 0: derived from the largest
  // request the repository's models take (LargestRequestBytes), at least 4 MiB (16 MiB of REST body).
  int64_t max_request_bytes = 0;
  // A gRPC connection without calls for this long is closed (its descriptor freed); 0: never.
  std::chrono::milliseconds connection_idle_timeout{300000};
  // Bytes gRPC's transport may hold for all connections together (grpc::ResourceQuota): read buffers
  // and the parts of messages not yet complete. Past it gRPC cancels streams (RESOURCE_EXHAUSTED) until
  // it is back under. 1 GiB: 256 requests at the 4 MiB floor of the request limit at once, and a
  // quarter of a 4 GiB container.
  int64_t grpc_memory_budget_bytes = int64_t{1} << 30;
  // A gRPC connection older than this is asked to go (GOAWAY; clients open a new one for later calls),
  // and closed once the grace has passed too, cancelling what is still open on it: a message that
  // never completes is held at most age + grace. 0: no age.
  std::chrono::milliseconds grpc_max_connection_age{600000};
  std::chrono::milliseconds grpc_max_connection_age_grace{300000};
  // A ModelInfer answer, or one answer of a ModelStreamInfer stream, not written to the client within
  // this long (a client that does not read it) is dropped and the call cancelled; 0: no limit.
  std::chrono::milliseconds grpc_answer_write_timeout{30000};
  // The KServe v2 HTTP/REST endpoint; empty: none.
  std::string http_address = "0.0.0.0:8000";
  int http_thread_count = 8;
  // What REST clients may hold of the server (memory, time, connections per address).
  HttpClientBounds http_bounds = RestClientBounds();
  // A REST infer call's deadline when its request sends no `timeout` parameter, and the cap on one
  // that does (RestEndpointOptions::infer_deadline_us); 0: none.
  std::chrono::milliseconds http_infer_deadline{60000};
  // HTTP /metrics for Prometheus, apart from the gRPC port; empty: none.
  std::string metrics_address = "0.0.0.0:8002";
  // Its bounds against clients that hold connections (metrics_endpoint.h); address and TLS are set
  // from the fields above.
  MetricsEndpointOptions metrics;
  RepositoryOptions repository;
  // TLS of the gRPC, REST and (unless metrics_plaintext) /metrics ports.
  TlsOptions tls;
  bool metrics_plaintext = false;
  // Tokens every port checks (auth.h); none: open.
  AuthOptions auth;
  // Who may call which API group on each port, after the token (api_groups.h); default: everyone.
  ApiAccessOptions api_access;
  // How long Shutdown waits for in-flight requests before cancelling them.
  std::chrono::milliseconds drain_timeout{30000};
  // Triton's --strict-readiness: the server reports ready only while every model the repository
  // loaded or tried to load serves (ModelRepository::EveryModelServes); false: once start-up is over,
  // whatever the models' states. Requests are served either way.
  bool strict_readiness = true;
  // Bounds on the system shared-memory regions clients register (Triton's shared-memory extension).
  SharedMemoryLimits shared_memory;
  // Triton's --allow-gpu-metrics: export nv_gpu_* readings of the GPUs NVML sees (gpu_monitor.h);
  // without the driver's NVML library there are none either way.
  bool gpu_metrics = true;
  // Triton's request tracing (--trace-config; trace_settings.h).
  TraceOptions trace;
};

class GraphServer {
 public:
  GraphServer();
  ~GraphServer();

  // Returns once every model is ready (or failed to load). Checks the flags and the repository's
  // folder before it opens any port; start_failure() then says which kind of failure it was.
  Status Start(const ServerOptions& options);
  // Why Start failed (kNone before Start, or after it succeeded): what the process exits with.
  StartFailure start_failure() const { return start_failure_; }
  void Shutdown();
  // SIGHUP: re-reads the token file and the HTTP ports' certificates at once (gRPC's at its next
  // reload interval); on an error keeps what it had, and says so in the log.
  void Reload();

  // The port the gRPC endpoint is bound to (useful with port 0); 0 without one.
  int grpc_port() const { return grpc_port_; }

 private:
  // The largest request accepted over gRPC and the largest REST body (LimitsFor).
  struct RequestLimits {
    int64_t grpc_bytes;
    int64_t rest_body_bytes;
  };
  // --max-request-bytes, else what the repository's largest request needs on each binding.
  static RequestLimits LimitsFor(const ServerOptions& options);

  // Records `failure` as start_failure() unless one already is, and returns `status`.
  Status FailStart(StartFailure failure, const Status& status);

  // Start's steps, in order. Each returns the error that stops the start.
  // TLS files and tokens, before any port opens.
  Status LoadCredentials(const ServerOptions& options);
  Status StartMetricsEndpoint(const ServerOptions& options);
  void CreateRepositoryAndService();
  // Listens, builds the gRPC server and starts ModelInfer's queues; the server is live, not ready.
  Status StartGrpcEndpoint(const ServerOptions& options, const RequestLimits& limits,
                           std::chrono::microseconds busy_poll);
  Status StartRestEndpoint(const ServerOptions& options, const RequestLimits& limits);

  // Whether requests are served (InferenceService::SetReady), then what readiness reports. Needs
  // service_ and grpc_server_.
  void SetReady(bool ready);
  // ServerReady's answer onto the grpc.health.v1 statuses; called again whenever a model's state
  // changes. Needs service_ and grpc_server_; any thread.
  void PublishReadiness();
  // ServerLive and the grpc.health.v1 "liveness" status together. Needs service_ and grpc_server_.
  void SetLive(bool live);
  // Until Shutdown: returns free heap memory to the system every few seconds, and turns liveness
  // and readiness off once the engine reports a CUDA fault (DeviceFault).
  void StartHousekeeping();

  ServerOptions options_;
  SteadyClock clock_;
  // Before every endpoint, which check tokens and present certificates through them.
  std::unique_ptr<TokenAuthenticator> auth_;
  // Before the service and the REST endpoint, which ask them.
  std::unique_ptr<GrpcApiGate> grpc_gate_;
  std::unique_ptr<ApiGate> http_gate_;
  std::shared_ptr<HttpTls> http_tls_;
  // Outlives the repository: requests drained by its schedulers are still counted.
  std::unique_ptr<GpuMonitor> gpu_monitor_;  // before metrics_, which reads it until destroyed
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<MetricsEndpoint> metrics_endpoint_;
  std::unique_ptr<ModelRepository> repository_;
  // Before service_, which registers regions in it and whose requests read and write them.
  std::unique_ptr<SharedMemoryRegistry> shared_memory_;
  // Before service_, which samples requests and answers TraceSetting with them; the writer outlives
  // the repository, whose drained requests are still traced, and goes before metrics_, which reads it.
  std::unique_ptr<TraceSettings> trace_settings_;
  std::unique_ptr<TraceWriter> trace_writer_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<GrpcAcceptor> grpc_acceptor_;
  std::unique_ptr<grpc::Server> grpc_server_;
  // One publication at a time, so that the last one published reads the latest state.
  std::mutex readiness_mutex_;
  std::unique_ptr<UnaryInferQueues> infer_queues_;
  int grpc_port_ = 0;
  StartFailure start_failure_ = StartFailure::kNone;
  // After grpc_server_: it calls the gRPC service through an in-process channel.
  std::unique_ptr<RestEndpoint> rest_endpoint_;
  std::thread trimmer_;
  std::mutex trimmer_mutex_;
  std::condition_variable trimmer_wake_;
  bool trimmer_stop_ = false;
};

}  // namespace graphserve
