#include "graphserve/server/process/server.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>

#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "common/thread_name.h"
#include "graphserve/server/common/usable_cores.h"
#include "graphserve/server/grpc/cuda_driver.h"
#include "graphserve/server/observability/gpu_monitor.h"
#include "graphserve/server/observability/log_limiter.h"
#include "graphserve/server/observability/metrics.h"
#include "graphserve/server/observability/metrics_endpoint.h"
#include "graphserve/server/observability/trace_writer.h"
#include "grpc/grpc_acceptor.h"
#include "grpc/infer_path.h"
#include "grpc/inference_service.h"
#include "grpc/unary_infer_queues.h"
#include "http/rest_endpoint.h"
#include "security/grpc_security.h"
#include "security/http_tls.h"

namespace graphserve {
namespace {

// grpc.health.v1 service names. "" (the server as a whole, what grpc_health_probe, Envoy and a
// Kubernetes grpc probe without `service` ask) and the inference service follow readiness;
// "liveness" is SERVING from the moment the endpoint listens, so that a liveness probe does not
// restart a server that is still capturing its graphs.
constexpr const char* kInferenceServiceName = "inference.GRPCInferenceService";
constexpr const char* kLivenessServiceName = "liveness";
// The largest response, on either binding. Tensors of a 32×512×256 fp32 output are 16 MiB; leave
// headroom over gRPC's 4 MiB default.
constexpr int kMaxMessageBytes = 256 * 1024 * 1024;
// Requests are bounded by what the served models can take (LargestRequestBytes), never below these.
constexpr int64_t kMinRequestLimitBytes = 4 * 1024 * 1024;
constexpr int64_t kMinRestBodyLimitBytes = 16 * 1024 * 1024;

constexpr std::chrono::seconds kMemoryTrimInterval{5};
// How soon a faulted CUDA context turns liveness off.
constexpr std::chrono::seconds kDeviceFaultCheckInterval{1};
// A connection that has not completed its HTTP/2 handshake by then is closed.
constexpr int kHandshakeTimeoutMs = 10'000;

// CUDA shared memory is served where the models run on a CUDA device and the driver opens; otherwise
// registering a region is refused with the reason.
CudaSharedMemoryOptions CudaSharedMemoryFor(const std::string& device) {
  CudaSharedMemoryOptions cuda;
  std::string resolved;
  if (!ResolveDevice(device, &resolved).ok() || resolved == "cpu") {
    cuda.unavailable = "this server runs its models on the CPU (--device " + device + ")";
    return cuda;
  }
  std::string why;
  cuda.driver = CudaDriver::Open(CudaDriver::kLibrary, &why);
  if (cuda.driver == nullptr) {
    spdlog::warn("CUDA shared memory is not served: {}", why);
    cuda.unavailable = "the CUDA driver does not open on this server";
  }
  return cuda;
}

// --grpc-infer-response-compression-level (the command line has checked the word).
grpc_compression_level AnswerCompression(const std::string& level) {
  if (level == "low") return GRPC_COMPRESS_LEVEL_LOW;
  if (level == "medium") return GRPC_COMPRESS_LEVEL_MED;
  if (level == "high") return GRPC_COMPRESS_LEVEL_HIGH;
  return GRPC_COMPRESS_LEVEL_NONE;
}

// The `reason` label of graphserve_connections_refused_total{endpoint="grpc"}.
const char* RefusalName(GrpcAcceptor::Refusal refusal) {
  switch (refusal) {
    case GrpcAcceptor::Refusal::kDescriptorReserve:
      return "descriptor_reserve";
    case GrpcAcceptor::Refusal::kDescriptorsExhausted:
      return "descriptors_exhausted";
    case GrpcAcceptor::Refusal::kAddressCap:
      return "address_cap";
    case GrpcAcceptor::Refusal::kSilentAtPressure:
      return "silent";
  }
  return "unknown";
}

}  // namespace

GraphServer::GraphServer() = default;
GraphServer::~GraphServer() { Shutdown(); }

// A request's tensors travel as raw bytes, as protobuf varints (up to 10 bytes for an 8-byte value)
// or, over REST, as JSON text (up to ~21 characters for an int64 and its comma): room for each over
// the raw size, plus the message's other fields.
GraphServer::RequestLimits GraphServer::LimitsFor(const ServerOptions& options) {
  if (options.max_request_bytes > 0) return {options.max_request_bytes, options.max_request_bytes};
  const int64_t raw = LargestRequestBytes(options.repository);
  constexpr int64_t kEnvelope = 64 * 1024;
  return {std::min<int64_t>(kMaxMessageBytes, std::max(kMinRequestLimitBytes, raw * 5 / 4 + kEnvelope)),
          std::min<int64_t>(kMaxMessageBytes, std::max(kMinRestBodyLimitBytes, raw * 3 + kEnvelope))};
}

Status GraphServer::Start(const ServerOptions& options) {
  options_ = options;
  const EngineInfo engine = GetEngineInfo();
  spdlog::info("graphserve {} (gRPC {}, protobuf {}, libtorch {}, CUDA {}, {} CUDA device(s))",
               GRAPHSERVE_VERSION, grpc::Version(),
               google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION),
               engine.libtorch_version, engine.cuda_version.empty() ? "none" : engine.cuda_version,
               engine.cuda_device_count);
  ServerMetricsOptions metrics_options;
  metrics_options.version = GRAPHSERVE_VERSION;
  metrics_options.engine = engine;
  metrics_options.device_memory = GetDeviceMemory;
  metrics_options.log_limiter = &ClientLogLimiter();
  if (options.gpu_metrics) {
    std::string why;
    gpu_monitor_ = GpuMonitor::Open(GpuMonitor::kNvmlLibrary, &why);
    if (gpu_monitor_ != nullptr) {
      spdlog::info("GPU metrics: nv_gpu_* of {} GPU(s), read through NVML at each scrape",
                   gpu_monitor_->gpu_count());
    } else {
      spdlog::info("GPU metrics: none ({})", why);
    }
  }
  metrics_options.gpu_monitor = gpu_monitor_.get();
  trace_settings_ = std::make_unique<TraceSettings>(options.trace.global, options.trace.clients_may_set_file);
  trace_writer_ =
      std::make_unique<TraceWriter>(options.trace.queue_capacity, options.trace.max_traces_per_file);
  trace_writer_->Start();
  metrics_options.trace_writer = trace_writer_.get();
  metrics_ = std::make_unique<ServerMetrics>(std::move(metrics_options));

  // Every check that needs no port comes first: a mistake ends the start before any port opens,
  // and a script that retries on "port in use" is not misled.
  Status status = CheckRepositoryFlags(options.repository);
  if (!status.ok()) return FailStart(StartFailure::kBadUsage, status);
  std::vector<std::string> startup_models;
  status = ListStartupModels(options.repository, &startup_models);
  if (!status.ok()) return FailStart(StartFailure::kBadRepository, status);
  status = LoadCredentials(options);
  if (!status.ok()) return FailStart(StartFailure::kBadUsage, status);
  // Before the long model warm-up: a bad --metrics-address fails at once, and Prometheus sees the
  // target (with graphserve_build_info) while the models load.
  status = StartMetricsEndpoint(options);
  if (!status.ok()) return FailStart(StartFailure::kCannotListen, status);
  CreateRepositoryAndService();
  const RequestLimits limits = LimitsFor(options);
  const std::chrono::microseconds busy_poll =
      options.busy_poll.count() >= 0 ? options.busy_poll : DefaultBusyPoll(UsableCores());
  status = StartGrpcEndpoint(options, limits, busy_poll);  // says itself when it cannot listen
  if (!status.ok()) return FailStart(StartFailure::kRuntime, status);
  if (!options.http_address.empty()) status = StartRestEndpoint(options, limits);
  if (!status.ok()) return FailStart(StartFailure::kCannotListen, status);

  StartHousekeeping();
  RepositoryOptions repository_options = options.repository;
  repository_options.scheduler_busy_poll = busy_poll;
  repository_options.max_request_bytes = limits.grpc_bytes;
  status = repository_->Start(repository_options);
  if (!status.ok()) return FailStart(StartFailure::kBadRepository, status);
  SetReady(true);
  if (service_->Ready()) {
    spdlog::info("ready: serving {} model(s)", repository_->Serving().size());
  } else {
    spdlog::warn("serving {} model(s), but not ready: a model failed to load (--strict-readiness=false reports "
                 "ready regardless)",
                 repository_->Serving().size());
  }
  return Status::Ok();
}

Status GraphServer::FailStart(StartFailure failure, const Status& status) {
  // The first failure recorded is the cause; later ones follow from it.
  if (start_failure_ == StartFailure::kNone) start_failure_ = failure;
  return status;
}

Status GraphServer::LoadCredentials(const ServerOptions& options) {
  Status status = ValidateTlsOptions(options.tls);
  if (status.ok() && options.tls.enabled()) status = HttpTls::Load(options.tls, &http_tls_);
  if (status.ok() && options.auth.enabled()) {
    ServerMetrics* metrics = metrics_.get();
    status = TokenAuthenticator::Create(
        options.auth, [metrics](const char* endpoint) { metrics->CountAuthFailure(endpoint); }, &auth_);
  }
  if (!status.ok()) return status;
  const ApiAccessOptions& access = options.api_access;
  grpc_gate_ = std::make_unique<GrpcApiGate>(ApiGate(access.grpc, access.close_admin_groups, "grpc"));
  http_gate_ = std::make_unique<ApiGate>(access.http, access.close_admin_groups, "http");
  spdlog::info("API groups: gRPC {}; REST {}", grpc_gate_->Describe(), http_gate_->Describe());
  const char* scheme = options.tls.enabled() ? (options.tls.client_ca_file.empty() ? "TLS" : "mutual TLS")
                                             : "plaintext";
  spdlog::info("security: {}{}", scheme,
               auth_ ? fmt::format(", token required{}", options.auth.protect_health ? " (health probes too)"
                                                                                     : " (not for health probes)")
                     : std::string(", no token"));
  return Status::Ok();
}

Status GraphServer::StartMetricsEndpoint(const ServerOptions& options) {
  if (options.metrics_address.empty()) {
    spdlog::info("metrics endpoint off: no /metrics");
    return Status::Ok();
  }
  const bool metrics_tls = http_tls_ && !options.metrics_plaintext;
  MetricsEndpointOptions endpoint = options.metrics;
  endpoint.address = options.metrics_address;
  endpoint.tls = metrics_tls ? http_tls_ : nullptr;
  endpoint.auth = options.auth.protect_metrics ? auth_.get() : nullptr;
  const Status status = MetricsEndpoint::Start(endpoint, metrics_.get(), &metrics_endpoint_);
  if (!status.ok()) return status;
  spdlog::info(
      "metrics endpoint listening on {} (port {}): {} /metrics; at most {} connections, {} per address, {} "
      "ms "
      "for each request and answer",
      options.metrics_address, metrics_endpoint_->port(), metrics_tls ? "https" : "http",
      metrics_endpoint_->max_connections(), endpoint.max_connections_per_address,
      endpoint.client_timeout.count());
  return Status::Ok();
}

void GraphServer::CreateRepositoryAndService() {
  ModelRepository::Listener listener;
  ServerMetrics* metrics = metrics_.get();
  listener.serving = [metrics](const LoadedModel& model) {
    metrics->AddModel(model.scheduler.get(), model.version);
  };
  listener.retired = [metrics](const LoadedModel& model) { metrics->RemoveModel(model.scheduler.get()); };
  listener.states_changed = [this] { PublishReadiness(); };
  repository_ = std::make_unique<ModelRepository>(&clock_, std::move(listener));
  shared_memory_ = std::make_unique<SharedMemoryRegistry>(options_.shared_memory,
                                                          CudaSharedMemoryFor(options_.repository.device));
  service_ = std::make_unique<InferenceService>(repository_.get(), &clock_, metrics_.get(), shared_memory_.get());
  service_->set_strict_readiness(options_.strict_readiness);
  service_->set_api_gate(grpc_gate_.get());
  service_->set_answer_write_timeout(options_.grpc_answer_write_timeout);
  service_->set_tracing(RequestTracing{trace_settings_.get(), trace_writer_.get()});
}

Status GraphServer::StartGrpcEndpoint(const ServerOptions& options, const RequestLimits& limits,
                                      std::chrono::microseconds busy_poll) {
  ServerMetrics* metrics = metrics_.get();
  Status status;
  if (!options.grpc_address.empty()) {
    status = GrpcAcceptor::Listen(
        options.grpc_address, options.grpc_max_connections_per_client,
        [metrics](GrpcAcceptor::Refusal refusal) {
          metrics->CountRefusedConnection("grpc", RefusalName(refusal));
        },
        &grpc_acceptor_);
    if (!status.ok()) return FailStart(StartFailure::kCannotListen, status);
    grpc_port_ = grpc_acceptor_->port();
    spdlog::info(
        "gRPC: at most {} connections per client address (--grpc-max-connections-per-client; 0: none)",
        grpc_acceptor_->max_connections_per_address());
  }

  grpc::EnableDefaultHealthCheckService(true);
  std::shared_ptr<grpc::ServerCredentials> credentials;
  status = MakeGrpcServerCredentials(options.tls, auth_.get(), &credentials);
  if (!status.ok()) return status;
  grpc::ServerBuilder builder;
  // Connections come from grpc_acceptor_ (grpc_acceptor.h says why gRPC's own listener is not used);
  // without one the server has no port, and REST reaches it in-process.
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff;
  if (grpc_acceptor_) {
    handoff = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, credentials);
  }
  builder.RegisterService(service_.get());
  const int usable_cores = UsableCores();
  const int infer_threads =
      options.grpc_infer_threads > 0 ? options.grpc_infer_threads : DefaultInferThreadCount(usable_cores);
  infer_queues_ =
      std::make_unique<UnaryInferQueues>(&builder, infer_threads, busy_poll, options.busy_poll_threads);
  spdlog::info(
      "gRPC: transport memory up to {} bytes (--grpc-memory-budget-bytes), connections closed at {} s "
      "of age plus {} s of grace, answers unread for {} s dropped (0: never)",
      options.grpc_memory_budget_bytes, options.grpc_max_connection_age.count() / 1000.0,
      options.grpc_max_connection_age_grace.count() / 1000.0,
      options.grpc_answer_write_timeout.count() / 1000.0);
  spdlog::info("requests accepted up to {} bytes over gRPC and {} bytes of REST body ({})", limits.grpc_bytes,
               limits.rest_body_bytes,
               options.max_request_bytes > 0 ? "--max-request-bytes" : "from the models' largest requests");
  builder.SetMaxReceiveMessageSize(static_cast<int>(limits.grpc_bytes));
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC 1.51's message_decompress filter compares the *compressed* size with the receive limit, then
  // inflates the whole message with no bound (grpc_msg_decompress); a gzip message of 256 KiB grew
  // the server's peak memory by 267 MiB under a 4 MiB limit, and one at the limit inflates to ~4 GiB.
  // So gRPC hands compressed messages over as they came, and the service inflates them within the
  // same limit (compressed_message.h). Answers are still compressed by gRPC.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0);
  service_->set_wire_options({static_cast<size_t>(limits.grpc_bytes),
                              AnswerCompression(options.grpc_infer_response_compression_level)});
  // One client cannot open unbounded calls on one connection, and connections that never finish
  // the HTTP/2 handshake or stay idle give their descriptor back.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.grpc_max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kHandshakeTimeoutMs);
  if (options.connection_idle_timeout.count() > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               static_cast<int>(options.connection_idle_timeout.count()));
  }
  // Without a budget, every byte of a message that never completes is held: one connection of 500
  // streams stopping short of 4 MiB each took the server from 0.44 to 2.39 GB. gRPC accounts its read
  // buffers, partial messages included, to the quota and cancels streams once past it. No thread
  // quota: it bounds only the synchronous API's threads, and every RPC here is async or callback.
  grpc::ResourceQuota quota("graphserve-grpc");
  quota.Resize(static_cast<size_t>(options.grpc_memory_budget_bytes));
  builder.SetResourceQuota(quota);
  // gRPC 1.51 has no timeout on a message's arrival (a stream is handed to the server only once its
  // first message is whole): the connection's age is what ends a stalled one.
  if (options.grpc_max_connection_age.count() > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               static_cast<int>(options.grpc_max_connection_age.count()));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               static_cast<int>(options.grpc_max_connection_age_grace.count()));
  }
  // Deadlines are graphserve's to enforce: admission refuses a call that cannot make its deadline
  // and the batcher answers a queued one DEADLINE_EXCEEDED when it passes. gRPC's own check adds
  // a timer to every call, and under overload, when calls arrive already spent, its expiries ran
  // cancellations on gRPC's timer threads at 1.5 cores on the H200 while the sockets went unread.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_DEADLINE_CHECKS, 0);
  grpc_server_ = builder.BuildAndStart();
  if (!grpc_server_) return Unavailable("--grpc-address: the gRPC server did not start on " + options.grpc_address);
  infer_queues_->Start(service_.get(), service_->infer_path());
  grpc_server_->GetHealthCheckService()->SetServingStatus(kLivenessServiceName, true);
  SetReady(false);
  if (grpc_acceptor_) {
    grpc_acceptor_->Start(std::move(handoff));
    spdlog::info("gRPC endpoint listening on {} (port {}); not ready until the models are warmed up",
                 options.grpc_address, grpc_port_);
  } else {
    spdlog::info("gRPC endpoint off: KServe v2 over REST only");
  }
  spdlog::info("ModelInfer calls taken by {} threads ({} usable cores), each with its own completion queue{}",
               infer_threads, usable_cores,
               busy_poll.count() > 0
                   ? fmt::format("; up to {} of them, and idle batchers, busy-poll {} us after each event",
                                 std::min(options.busy_poll_threads, infer_threads), busy_poll.count())
                   : std::string());
  return Status::Ok();
}

Status GraphServer::StartRestEndpoint(const ServerOptions& options, const RequestLimits& limits) {
  grpc::ChannelArguments channel_arguments;
  channel_arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
  channel_arguments.SetMaxSendMessageSize(kMaxMessageBytes);
  const std::pair<const char*, uint64_t> budgets[] = {
      {"--http-max-buffered-bytes", options.http_bounds.max_buffered_bytes},
      {"--http-max-buffered-bytes-per-client", options.http_bounds.max_buffered_bytes_per_client}};
  for (const auto& [flag, budget] : budgets) {
    if (budget > 0 && budget < static_cast<uint64_t>(limits.rest_body_bytes)) {
      return InvalidArgument(fmt::format(
          "{} {}: below the largest REST body accepted ({} bytes), which could never be taken; raise it, or "
          "lower --max-request-bytes",
          flag, budget, limits.rest_body_bytes));
    }
  }
  RestEndpointOptions rest;
  rest.address = options.http_address;
  rest.thread_count = options.http_thread_count;
  rest.max_body_bytes = static_cast<size_t>(limits.rest_body_bytes);
  rest.max_request_bytes = static_cast<size_t>(limits.grpc_bytes);
  rest.bounds = options.http_bounds;
  rest.infer_deadline_us =
      std::chrono::duration_cast<std::chrono::microseconds>(options.http_infer_deadline).count();
  rest.tls = http_tls_;
  rest.auth = auth_.get();
  rest.gate = http_gate_.get();
  rest.grpc_gate = grpc_gate_.get();
  const Status status = RestEndpoint::Start(rest, grpc_server_->InProcessChannel(channel_arguments),
                                            metrics_.get(), &rest_endpoint_);
  if (!status.ok()) return status;
  spdlog::info("REST endpoint listening on {} (port {}): KServe v2 over {}", options.http_address,
               rest_endpoint_->port(), http_tls_ ? "HTTPS" : "HTTP");
  return Status::Ok();
}

void GraphServer::StartHousekeeping() {
  // glibc keeps freed heap pages for reuse: after a spike of large requests the process would hold
  // its peak for good. Handing the free pages back now and then costs a walk of the heap, not the
  // request path.
  //
  // The same thread watches for a CUDA fault that no later batch survives (DeviceFault): the server
  // then reports itself neither live nor ready, so that an orchestrator restarts it rather than
  // route requests to a process whose every batch fails.
  trimmer_ = std::thread([this] {
    NameThisThread("gs-housekeeper");
    std::unique_lock<std::mutex> lock(trimmer_mutex_);
    auto last_trim = std::chrono::steady_clock::now();
    bool fault_reported = false;
    while (!trimmer_stop_) {
      trimmer_wake_.wait_for(lock, kDeviceFaultCheckInterval);
      if (trimmer_stop_) break;
      if (!fault_reported) {
        const std::string fault = DeviceFault();
        if (!fault.empty()) {
          fault_reported = true;
          spdlog::critical("CUDA fault on {}: every later batch would fail; liveness and readiness are off, "
                           "restart the process", fault);
          metrics_->SetDeviceFaulted();
          SetReady(false);
          SetLive(false);
        }
      }
      if (std::chrono::steady_clock::now() - last_trim >= kMemoryTrimInterval) {
        malloc_trim(0);
        last_trim = std::chrono::steady_clock::now();
      }
    }
  });
}

void GraphServer::SetReady(bool ready) {
  service_->SetReady(ready);
  PublishReadiness();
}

void GraphServer::PublishReadiness() {
  std::lock_guard<std::mutex> lock(readiness_mutex_);
  if (!service_ || !grpc_server_) return;
  const bool ready = service_->Ready();
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  if (health == nullptr) return;  // only when gRPC was built without the default service
  health->SetServingStatus("", ready);
  health->SetServingStatus(kInferenceServiceName, ready);
}

void GraphServer::SetLive(bool live) {
  service_->SetLive(live);
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(kLivenessServiceName, live);
}

void GraphServer::Reload() {
  spdlog::info("reloading the token file and the TLS certificates");
  if (auth_) {
    const Status status = auth_->Reload();
    if (!status.ok()) spdlog::error("tokens not reloaded, still accepting the previous ones: {}", status.message());
  }
  if (http_tls_) http_tls_->Reload(/*force=*/true);  // logs its own outcome
}

void GraphServer::Shutdown() {
  // From here new inference calls are refused UNAVAILABLE on both bindings (InferPath::Prepare; REST
  // answers 503 once it stops accepting), while the calls taken are drained.
  if (service_ && grpc_server_) SetReady(false);
  // Before the RPCs drain: a load still queued is answered now instead of being run, and no load or
  // unload answers once the endpoint is gone.
  if (repository_) repository_->StopControl();
  if (rest_endpoint_) rest_endpoint_->StopAccepting();
  if (grpc_acceptor_) grpc_acceptor_->Stop();
  const auto drain_until = std::chrono::steady_clock::now() + options_.drain_timeout;
  if (grpc_server_) {
    spdlog::info("shutting down: draining in-flight requests (up to {} ms)", options_.drain_timeout.count());
    // REST first: its calls travel through the in-process channel, which gRPC's shutdown closes at
    // once instead of draining it (each call failed "Transport closed"). gRPC's own calls go on
    // meanwhile.
    if (rest_endpoint_ && !rest_endpoint_->Drain(drain_until)) {
      spdlog::warn("drain timeout: the REST requests still unanswered are cancelled");
    }
    // Calls in flight finish as the schedulers answer them, and any still open at the deadline are
    // cancelled.
    grpc_server_->Shutdown(std::chrono::system_clock::now() + (drain_until - std::chrono::steady_clock::now()));
    grpc_server_->Wait();
  }
  // Every REST call has its gRPC answer by now: those gRPC cancelled answered at once.
  rest_endpoint_.reset();
  // Scrapes read the schedulers: stop serving them before the schedulers go away.
  metrics_endpoint_.reset();
  if (repository_) {
    const std::string fault = DeviceFault();
    if (!fault.empty()) {
      // Every CUDA call of a faulted context fails, freeing the models' device memory included, and
      // libtorch throws from the destructors that free it: the process ends here, every call answered.
      spdlog::critical("exiting with status 1 without releasing the models: CUDA fault on {}", fault);
      spdlog::shutdown();
      _exit(kExitRuntimeFailure);
    }
    // Before the ModelInfer queues stop: a call that gRPC cancelled as it shut down may still be
    // queued or running, and its answer goes through its queue. Stop returns once every request is
    // answered.
    repository_->Stop();
  }
  // Only now: the queues' threads deliver the last answers, then their completion queues shut down.
  if (infer_queues_) infer_queues_->Stop();
  // Every request is answered, and traced: the traces still queued are written.
  if (trace_writer_) trace_writer_->Stop();
  grpc_server_.reset();
  infer_queues_.reset();
  grpc_acceptor_.reset();
  repository_.reset();
  service_.reset();
  // Every request is answered: the mappings left are the registry's own.
  shared_memory_.reset();
  if (trimmer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(trimmer_mutex_);
      trimmer_stop_ = true;
    }
    trimmer_wake_.notify_all();
    trimmer_.join();
  }
}

}  // namespace graphserve
