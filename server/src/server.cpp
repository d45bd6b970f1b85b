#include "graphserve/server/server.h"

#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "graphserve/server/grpc_security.h"
#include "graphserve/server/http_tls.h"
#include "graphserve/server/inference_service.h"
#include "graphserve/server/metrics.h"
#include "graphserve/server/metrics_endpoint.h"
#include "graphserve/server/rest_endpoint.h"

namespace graphserve {
namespace {

// grpc.health.v1 service names. "" (the server as a whole, what grpc_health_probe, Envoy and a
// Kubernetes grpc probe without `service` ask) and the inference service follow readiness;
// "liveness" is SERVING from the moment the endpoint listens, so that a liveness probe does not
// restart a server that is still capturing its graphs.
constexpr const char* kInferenceServiceName = "inference.GRPCInferenceService";
constexpr const char* kLivenessServiceName = "liveness";
// The largest request or response, on either binding. Tensors of a 32×512×256 fp32 output are
// 16 MiB; leave headroom over gRPC's 4 MiB default.
constexpr int kMaxMessageBytes = 256 * 1024 * 1024;

}  // namespace

GraphServer::GraphServer() = default;
GraphServer::~GraphServer() { Shutdown(); }

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
  metrics_ = std::make_unique<ServerMetrics>(std::move(metrics_options));
  Status status = ValidateTlsOptions(options.tls);
  if (status.ok() && options.tls.enabled()) status = HttpTls::Load(options.tls, &http_tls_);
  if (status.ok() && options.auth.enabled()) {
    ServerMetrics* metrics = metrics_.get();
    status = TokenAuthenticator::Create(
        options.auth, [metrics](const char* endpoint) { metrics->CountAuthFailure(endpoint); }, &auth_);
  }
  if (!status.ok()) return status;
  const char* scheme = options.tls.enabled() ? (options.tls.client_ca_file.empty() ? "TLS" : "mutual TLS")
                                             : "plaintext";
  spdlog::info("security: {}{}", scheme,
               auth_ ? fmt::format(", token required{}", options.auth.protect_health ? " (health probes too)"
                                                                                     : " (not for health probes)")
                     : std::string(", no token"));
  // Before the long model warm-up: a bad --metrics-address fails at once, and Prometheus sees the
  // target (with graphserve_build_info) while the models load.
  const bool metrics_tls = http_tls_ && !options.metrics_plaintext;
  status = MetricsEndpoint::Start(options.metrics_address, metrics_.get(), &metrics_endpoint_,
                                  metrics_tls ? http_tls_ : nullptr,
                                  options.auth.protect_metrics ? auth_.get() : nullptr);
  if (!status.ok()) return status;
  spdlog::info("metrics endpoint listening on {} (port {}): {} /metrics", options.metrics_address,
               metrics_endpoint_->port(), metrics_tls ? "https" : "http");

  ModelRepository::Listener listener;
  ServerMetrics* metrics = metrics_.get();
  listener.serving = [metrics](const LoadedModel& model) { metrics->AddModel(model.scheduler.get()); };
  listener.retired = [metrics](const LoadedModel& model) { metrics->RemoveModel(model.scheduler.get()); };
  repository_ = std::make_unique<ModelRepository>(&clock_, std::move(listener));
  service_ = std::make_unique<InferenceService>(repository_.get(), &clock_, metrics_.get());

  grpc::EnableDefaultHealthCheckService(true);
  std::shared_ptr<grpc::ServerCredentials> credentials;
  status = MakeGrpcServerCredentials(options.tls, auth_.get(), &credentials);
  if (!status.ok()) return status;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.grpc_address, credentials, &grpc_port_);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  grpc_server_ = builder.BuildAndStart();
  if (!grpc_server_ || grpc_port_ == 0) {
    grpc_server_.reset();
    return Unavailable("--grpc-address: cannot listen on " + options.grpc_address);
  }
  grpc_server_->GetHealthCheckService()->SetServingStatus(kLivenessServiceName, true);
  SetReady(false);
  spdlog::info("gRPC endpoint listening on {} (port {}); not ready until the models are warmed up",
               options.grpc_address, grpc_port_);
  if (!options.http_address.empty()) {
    grpc::ChannelArguments channel_arguments;
    channel_arguments.SetMaxReceiveMessageSize(kMaxMessageBytes);
    channel_arguments.SetMaxSendMessageSize(kMaxMessageBytes);
    RestEndpointOptions rest;
    rest.address = options.http_address;
    rest.thread_count = options.http_thread_count;
    rest.max_body_bytes = kMaxMessageBytes;
    rest.tls = http_tls_;
    rest.auth = auth_.get();
    status = RestEndpoint::Start(rest, grpc_server_->InProcessChannel(channel_arguments), metrics_.get(),
                                 &rest_endpoint_);
    if (!status.ok()) return status;
    spdlog::info("REST endpoint listening on {} (port {}): KServe v2 over {}", options.http_address,
                 rest_endpoint_->port(), http_tls_ ? "HTTPS" : "HTTP");
  }

  status = repository_->Start(options.repository);
  if (!status.ok()) return status;
  SetReady(true);
  spdlog::info("ready: serving {} model(s)", repository_->Serving().size());
  return Status::Ok();
}

void GraphServer::SetReady(bool ready) {
  service_->SetReady(ready);
  grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService();
  if (health == nullptr) return;  // only when gRPC was built without the default service
  health->SetServingStatus("", ready);
  health->SetServingStatus(kInferenceServiceName, ready);
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
  if (service_ && grpc_server_) SetReady(false);
  // Before the RPCs drain: a load still queued is answered now instead of being run, and no load or
  // unload answers once the endpoint is gone.
  if (repository_) repository_->StopControl();
  if (rest_endpoint_) rest_endpoint_->StopAccepting();
  if (grpc_server_) {
    spdlog::info("shutting down: draining in-flight requests (up to {} ms)", options_.drain_timeout.count());
    // New calls are refused at once; calls in flight finish as the schedulers answer them, and any
    // still open at the deadline are cancelled.
    grpc_server_->Shutdown(std::chrono::system_clock::now() + options_.drain_timeout);
    grpc_server_->Wait();
  }
  // Once the gRPC calls it made are answered, and before the channel's server goes away.
  rest_endpoint_.reset();
  grpc_server_.reset();
  // Scrapes read the schedulers: stop serving them before the schedulers go away.
  metrics_endpoint_.reset();
  if (repository_) {
    repository_->Stop();
    repository_.reset();
  }
  service_.reset();
}

}  // namespace graphserve
