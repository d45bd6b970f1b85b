#include "inference_service.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "graphserve/server/grpc/request_codec.h"
#include "graphserve/server/repository/model_version.h"
#include "infer_path.h"
#include "inflating_unary_handler.h"
#include "security/grpc_security.h"
#include "stream_infer_reactor.h"

namespace graphserve {
namespace {

constexpr const char* kServerName = "graphserve";

Status CheckRepositoryName(const std::string& name) {
  if (name.empty()) return Status::Ok();
  return InvalidArgument("repository_name: graphserve serves one repository; leave it empty");
}

// Triton's load parameters (a config override, files) are not supported: refused by name. Unload's
// `unload_dependents` (which tritonclient always sends) is accepted: graphserve has no ensembles, so a
// model has no dependents and both values mean the same.
template <typename Request>
Status CheckRepositoryRequest(const Request& request) {
  Status status = CheckRepositoryName(request.repository_name());
  if (!status.ok()) return status;
  for (const auto& [key, value] : request.parameters()) {
    if (key == "unload_dependents" && value.parameter_choice_case() ==
                                          inference::ModelRepositoryParameter::kBoolParam &&
        std::is_same_v<Request, inference::RepositoryModelUnloadRequest>) {
      continue;
    }
    return InvalidArgument("parameters['" + key + "']: not supported by graphserve; edit the model's "
                           "config.pbtxt in the repository and load it again");
  }
  return Status::Ok();
}

// A stream its API group refuses: finished before anything of it is read.
class RefusedStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

template <class Request, class Response>
void InferenceService::InflateRequestsOf(grpc::ServerUnaryReactor* (InferenceService::*method)(
    grpc::CallbackServerContext*, const Request*, Response*)) {
  // The generated code numbers the methods; each has request and answer types of its own, so the
  // handler it made for `method` is the one of these types.
  constexpr int kMethods = 20;  // the RPCs of inference.GRPCInferenceService
  for (int index = 0; index < kMethods; ++index) {
    if (dynamic_cast<grpc::internal::CallbackUnaryHandler<Request, Response>*>(GetHandler(index)) ==
        nullptr) {
      continue;
    }
    MarkMethodCallback(
        index, new InflatingUnaryHandler<Request, Response>(
                   [this, method](grpc::CallbackServerContext* context, const Request* request,
                                  Response* response) { return (this->*method)(context, request, response); },
                   &wire_.max_request_bytes));
    return;
  }
  throw std::logic_error(std::string("no callback handler for ") + Request().GetTypeName());
}

void InferenceService::InflateUnaryRequests() {
  InflateRequestsOf(&InferenceService::ServerLive);
  InflateRequestsOf(&InferenceService::ServerReady);
  InflateRequestsOf(&InferenceService::ModelReady);
  InflateRequestsOf(&InferenceService::ServerMetadata);
  InflateRequestsOf(&InferenceService::ModelMetadata);
  InflateRequestsOf(&InferenceService::ModelConfig);
  InflateRequestsOf(&InferenceService::ModelStatistics);
  InflateRequestsOf(&InferenceService::RepositoryIndex);
  InflateRequestsOf(&InferenceService::RepositoryModelLoad);
  InflateRequestsOf(&InferenceService::RepositoryModelUnload);
  InflateRequestsOf(&InferenceService::SystemSharedMemoryStatus);
  InflateRequestsOf(&InferenceService::SystemSharedMemoryRegister);
  InflateRequestsOf(&InferenceService::SystemSharedMemoryUnregister);
  InflateRequestsOf(&InferenceService::CudaSharedMemoryStatus);
  InflateRequestsOf(&InferenceService::CudaSharedMemoryRegister);
  InflateRequestsOf(&InferenceService::CudaSharedMemoryUnregister);
  InflateRequestsOf(&InferenceService::TraceSetting);
  InflateRequestsOf(&InferenceService::LogSettings);
}

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

InferPath InferenceService::infer_path() const {
  InferPath path(repository_, clock_, metrics_, &ready_, shared_memory_, tracing_, wire_, gate_);
  path.set_answer_write_timeout(answer_write_timeout_);
  return path;
}

grpc::ServerUnaryReactor* InferenceService::Refused(grpc::CallbackServerContext* context,
                                                    ApiGroup group) const {
  if (gate_ == nullptr) return nullptr;
  const grpc::Status admitted = gate_->Admit(*context, group);
  return admitted.ok() ? nullptr : FinishNow(context, admitted);
}

Status InferenceService::FindServedModel(const std::string& name, const std::string& version,
                                         std::shared_ptr<LoadedModel>* model) const {
  if (!ready_.load()) return Unavailable("the server is still loading its models");
  return repository_->Find(name, version, "name", "version", model);
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("ServerLive")>(context)) return refused;
  response->set_live(live_.load());
  return FinishNow(context, grpc::Status::OK);
}

bool InferenceService::Ready() const {
  return ready_.load() && (!strict_readiness_ || repository_->EveryModelServes());
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("ServerReady")>(context)) return refused;
  response->set_ready(Ready());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("ModelReady")>(context)) return refused;
  // As Triton: a version that is no version number is refused before anything else.
  std::string version;
  const Status well_formed = CanonicalModelVersion(request->version(), "version", &version);
  if (!well_formed.ok()) return FinishNow(context, ToGrpcStatus(well_formed));
  // Before readiness the repository is still being filled and must not be read.
  if (!ready_.load()) {
    response->set_ready(false);
    return FinishNow(context, grpc::Status::OK);
  }
  // As Triton: an unknown model, a known one that is not loaded, or a version that is not served is
  // not ready, and the call succeeds (a readiness probe asks a yes/no question).
  response->set_ready(repository_->Contains(request->name()) && repository_->IsReady(request->name(), version));
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(grpc::CallbackServerContext* context,
                                                           const inference::ServerMetadataRequest*,
                                                           inference::ServerMetadataResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("ServerMetadata")>(context)) return refused;
  response->set_name(kServerName);
  response->set_version(GRAPHSERVE_VERSION);
  // The KServe v2 / Triton extensions graphserve serves (on both bindings; binary_tensor_data is the
  // REST binding's).
  for (const char* extension :
       {"model_repository", "model_repository(unload_dependents)", "model_configuration", "statistics",
        "logging", "trace", "binary_tensor_data", "system_shared_memory"}) {
    response->add_extensions(extension);
  }
  // Only where registering a CUDA region can succeed (a CUDA device and its driver).
  if (shared_memory_->serves_cuda()) response->add_extensions("cuda_shared_memory");
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(grpc::CallbackServerContext* context,
                                                          const inference::ModelMetadataRequest* request,
                                                          inference::ModelMetadataResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("ModelMetadata")>(context)) return refused;
  std::shared_ptr<LoadedModel> model;
  const Status status = FindServedModel(request->name(), request->version(), &model);
  if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  FillModelMetadata(model->scheduler->spec(), model->version, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(grpc::CallbackServerContext* context,
                                                        const inference::ModelConfigRequest* request,
                                                        inference::ModelConfigResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("ModelConfig")>(context)) return refused;
  std::shared_ptr<LoadedModel> model;
  const Status status = FindServedModel(request->name(), request->version(), &model);
  if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  *response->mutable_config() = model->effective_config;
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* InferenceService::ModelStreamInfer(
    grpc::CallbackServerContext* context) {
  const InferPath path = infer_path();
  const grpc::Status admitted = path.Admit(*context);
  if (!admitted.ok()) return new RefusedStream(admitted);
  return new StreamInferReactor(context, path);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(grpc::CallbackServerContext* context,
                                                            const inference::RepositoryIndexRequest* request,
                                                            inference::RepositoryIndexResponse* response) {
  if (auto* refused = Refused<GroupOfGrpcMethod("RepositoryIndex")>(context)) return refused;
  const Status status = CheckRepositoryName(request->repository_name());
  if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  for (const ModelIndexEntry& entry : repository_->Index(request->ready())) {
    inference::RepositoryIndexResponse::ModelIndex* model = response->add_models();
    model->set_name(entry.name);
    model->set_version(entry.version);
    model->set_state(entry.state);
    model->set_reason(entry.reason);
  }
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(
    grpc::CallbackServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse*) {
  if (auto* refused = Refused<GroupOfGrpcMethod("RepositoryModelLoad")>(context)) return refused;
  if (!ready_.load()) {
    return FinishNow(context, ToGrpcStatus(Unavailable("the server is still loading its models")));
  }
  const Status status = CheckRepositoryRequest(*request);
  if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  // Loading (warm-up, graph capture) takes seconds: it runs on the repository's control thread and
  // answers from there, leaving gRPC's threads to the other models' requests.
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  repository_->LoadAsync(request->model_name(),
                         [reactor](const Status& outcome) { reactor->Finish(ToGrpcStatus(outcome)); });
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  if (auto* refused = Refused<GroupOfGrpcMethod("RepositoryModelUnload")>(context)) return refused;
  if (!ready_.load()) {
    return FinishNow(context, ToGrpcStatus(Unavailable("the server is still loading its models")));
  }
  const Status status = CheckRepositoryRequest(*request);
  if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  repository_->UnloadAsync(request->model_name(),
                           [reactor](const Status& outcome) { reactor->Finish(ToGrpcStatus(outcome)); });
  return reactor;
}

}  // namespace graphserve
