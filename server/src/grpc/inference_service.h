#pragma once
// The KServe v2 gRPC service: no RPC thread ever waits on inference. ModelInfer runs on gRPC's
// completion-queue API (unary_infer_queues.h, which says why): its queues' threads validate and
// enqueue into the model's scheduler, and the scheduler's completion finishes the RPC. The other RPCs
// are on gRPC's callback API. ModelStreamInfer does the same for each request of a bidirectional stream and
// writes each answer (or its error_message) as it finishes. Converts graphserve::Status to
// grpc::Status here and nowhere else, and counts every inference request's final status and latency
// in ServerMetrics and in its model's statistics just before answering it, alike for both RPCs.
// Triton's other RPCs (statistics, log and trace settings, shared memory) are answered at once, from
// inference_service_admin.cpp.
// Thread safety: all methods are called by gRPC from any thread; the readiness flag is atomic.
// Lifetime: the repository, clock, metrics and shared-memory registry must outlive the service and
// every request it queued.
#include <atomic>
#include <chrono>

#include <grpcpp/grpcpp.h>

#include "graphserve/server/common/clock.h"
#include "graphserve/server/grpc/shared_memory_registry.h"
#include "graphserve/server/observability/trace_writer.h"
#include "graphserve/server/repository/model_repository.h"
#include "graphserve/server/security/api_groups.h"
#include "grpc_service.grpc.pb.h"
#include "infer_path.h"

namespace graphserve {

class GrpcApiGate;
class ServerMetrics;

grpc::Status ToGrpcStatus(const Status& status);

// An RPC answered on the calling thread: finishes `context`'s default reactor with `status`.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, const grpc::Status& status);

// Every RPC on the callback API except ModelInfer, which is left to completion queues: the async
// marking has to come first (innermost), since gRPC marks a method async by dropping the handler
// that only a not-yet-callback method has. ModelInfer and ModelStreamInfer take their requests raw,
// to inflate compressed ones within the request limit (compressed_message.h).
// clang-format off
using InferenceServiceBase = inference::GRPCInferenceService::WithCallbackMethod_ServerLive<
    inference::GRPCInferenceService::WithCallbackMethod_ServerReady<
    inference::GRPCInferenceService::WithCallbackMethod_ModelReady<
    inference::GRPCInferenceService::WithCallbackMethod_ServerMetadata<
    inference::GRPCInferenceService::WithCallbackMethod_ModelMetadata<
    inference::GRPCInferenceService::WithCallbackMethod_ModelConfig<
    inference::GRPCInferenceService::WithRawCallbackMethod_ModelStreamInfer<
    inference::GRPCInferenceService::WithCallbackMethod_ModelStatistics<
    inference::GRPCInferenceService::WithCallbackMethod_RepositoryIndex<
    inference::GRPCInferenceService::WithCallbackMethod_RepositoryModelLoad<
    inference::GRPCInferenceService::WithCallbackMethod_RepositoryModelUnload<
    inference::GRPCInferenceService::WithCallbackMethod_SystemSharedMemoryStatus<
    inference::GRPCInferenceService::WithCallbackMethod_SystemSharedMemoryRegister<
    inference::GRPCInferenceService::WithCallbackMethod_SystemSharedMemoryUnregister<
    inference::GRPCInferenceService::WithCallbackMethod_CudaSharedMemoryStatus<
    inference::GRPCInferenceService::WithCallbackMethod_CudaSharedMemoryRegister<
    inference::GRPCInferenceService::WithCallbackMethod_CudaSharedMemoryUnregister<
    inference::GRPCInferenceService::WithCallbackMethod_TraceSetting<
    inference::GRPCInferenceService::WithCallbackMethod_LogSettings<
    inference::GRPCInferenceService::WithRawMethod_ModelInfer<
    inference::GRPCInferenceService::Service>>>>>>>>>>>>>>>>>>>>;
// clang-format on

class InferenceService final : public InferenceServiceBase {
 public:
  // `shared_memory`: the system shared-memory regions clients register and their requests name.
  InferenceService(ModelRepository* repository, const Clock* clock, ServerMetrics* metrics,
                   SharedMemoryRegistry* shared_memory)
      : repository_(repository), clock_(clock), metrics_(metrics), shared_memory_(shared_memory) {
    InflateUnaryRequests();
  }

  // Ready: models loaded and warmed up, and not draining: requests are served. Every model of the
  // repository must have been added to the metrics (ServerMetrics::AddModel) before the service
  // turns ready.
  void SetReady(bool ready) { ready_.store(ready); }
  // Where requests' traces are sampled and written, and what TraceSetting changes; set before
  // serving. Without it requests are not traced and TraceSetting answers tracing off (trace_settings.h).
  void set_tracing(RequestTracing tracing) { tracing_ = tracing; }
  // How ModelInfer's and ModelStreamInfer's requests are bounded and answers compressed
  // (infer_path.h); max_request_bytes bounds every RPC's compressed request. Set before serving.
  void set_wire_options(InferWireOptions wire) { wire_ = wire; }
  // Triton's --strict-readiness (ServerOptions::strict_readiness); set before serving.
  void set_strict_readiness(bool strict) { strict_readiness_ = strict; }
  // Who may call which API group (security/grpc_security.h); every RPC asks it first. Null: everyone.
  // Set before serving; it must outlive the service.
  void set_api_gate(const GrpcApiGate* gate) { gate_ = gate; }
  // How long an answer may wait for its client to read it (ServerOptions::grpc_answer_write_timeout);
  // set before serving.
  void set_answer_write_timeout(std::chrono::milliseconds timeout) { answer_write_timeout_ = timeout; }
  // What ServerReady answers: serving, and with strict readiness every model serving too.
  bool Ready() const;
  // Live until the process cannot serve any more (a faulted CUDA context): ServerLive answers it.
  void SetLive(bool live) { live_.store(live); }

  // What ModelInfer's completion queues and ModelStreamInfer prepare and queue requests with.
  InferPath infer_path() const;

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* context) override;

  // Triton's model repository extension (model_repository.h has the control modes and the states).
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* context,
                                                const inference::RepositoryModelLoadRequest* request,
                                                inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(grpc::CallbackServerContext* context,
                                                  const inference::RepositoryModelUnloadRequest* request,
                                                  inference::RepositoryModelUnloadResponse* response) override;

  // Triton's extensions, in inference_service_admin.cpp (docs/protocol.md says what each answers).
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* LogSettings(grpc::CallbackServerContext* context,
                                        const inference::LogSettingsRequest* request,
                                        inference::LogSettingsResponse* response) override;
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* context,
                                         const inference::TraceSettingRequest* request,
                                         inference::TraceSettingResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryStatus(
      grpc::CallbackServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryRegister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* SystemSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryStatus(
      grpc::CallbackServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
      inference::CudaSharedMemoryStatusResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryRegister(
      grpc::CallbackServerContext* context, const inference::CudaSharedMemoryRegisterRequest* request,
      inference::CudaSharedMemoryRegisterResponse* response) override;
  grpc::ServerUnaryReactor* CudaSharedMemoryUnregister(
      grpc::CallbackServerContext* context,
      const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;

 private:
  // Every unary RPC's request parsed by InflatingUnaryHandler, so that compressed ones are inflated
  // within the request limit.
  void InflateUnaryRequests();
  template <class Request, class Response>
  void InflateRequestsOf(grpc::ServerUnaryReactor* (InferenceService::*method)(grpc::CallbackServerContext*,
                                                                               const Request*, Response*));

  // The model version a metadata or config call names: UNAVAILABLE before readiness, NOT_FOUND
  // naming `name` or `version` for a model or version not served.
  Status FindServedModel(const std::string& name, const std::string& version,
                         std::shared_ptr<LoadedModel>* model) const;

  // The gate's refusal of a call of `group`, already finished: the handler returns it. nullptr: the
  // call goes on. The template makes each handler's GroupOfGrpcMethod a constant, so that a method
  // missing from api_groups.h's table does not compile.
  template <ApiGroup group>
  grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* context) const {
    return Refused(context, group);
  }
  grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* context, ApiGroup group) const;

  ModelRepository* const repository_;
  const Clock* const clock_;
  ServerMetrics* const metrics_;
  SharedMemoryRegistry* const shared_memory_;
  std::atomic<bool> ready_{false};
  bool strict_readiness_ = true;
  std::atomic<bool> live_{true};
  const GrpcApiGate* gate_ = nullptr;
  std::chrono::milliseconds answer_write_timeout_{0};
  RequestTracing tracing_;
  InferWireOptions wire_;
};

}  // namespace graphserve
