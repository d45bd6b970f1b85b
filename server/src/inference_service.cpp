#include "graphserve/server/inference_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <type_traits>

#include "graphserve/server/metrics.h"
#include "graphserve/server/request_codec.h"

namespace graphserve {
namespace {

constexpr const char* kServerName = "graphserve";

// One ModelInfer call in flight. Lives until gRPC reports the RPC done; the scheduler's completion
// callback finishes it from a worker thread, so no RPC thread waits for inference.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  InferReactor(ModelScheduler* scheduler, std::shared_ptr<PendingRequest> pending)
      : scheduler_(scheduler), pending_(std::move(pending)) {}

  void OnCancel() override {
    pending_->cancelled.store(true);
    scheduler_->Poke();
  }
  void OnDone() override { delete this; }

 private:
  ModelScheduler* const scheduler_;
  const std::shared_ptr<PendingRequest> pending_;
};

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// The gRPC deadline as an absolute time on the scheduler's clock; 0 when the call has none.
int64_t DeadlineMicros(const grpc::CallbackServerContext& context, const Clock& clock) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return 0;
  const int64_t remaining_us =
      std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::system_clock::now())
          .count();
  return clock.NowMicros() + std::max<int64_t>(remaining_us, 0);
}

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

}  // namespace

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(ready_.load());
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  // Before readiness the repository is still being filled and must not be read.
  if (!ready_.load()) {
    response->set_ready(false);
    return FinishNow(context, grpc::Status::OK);
  }
  // As Triton: a known model that is not loaded, or a version that is not served, is not ready.
  if (!repository_->Contains(request->name())) {
    return FinishNow(context, ToGrpcStatus(NotFound("name: unknown model '" + request->name() + "'")));
  }
  response->set_ready(repository_->IsReady(request->name(), request->version()));
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(grpc::CallbackServerContext* context,
                                                           const inference::ServerMetadataRequest*,
                                                           inference::ServerMetadataResponse* response) {
  response->set_name(kServerName);
  response->set_version(GRAPHSERVE_VERSION);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(grpc::CallbackServerContext* context,
                                                          const inference::ModelMetadataRequest* request,
                                                          inference::ModelMetadataResponse* response) {
  if (!ready_.load()) {
    return FinishNow(context, ToGrpcStatus(Unavailable("the server is still loading its models")));
  }
  std::shared_ptr<LoadedModel> model;
  const Status status = repository_->Find(request->name(), request->version(), "name", "version", &model);
  if (!status.ok()) return FinishNow(context, ToGrpcStatus(status));
  FillModelMetadata(model->scheduler->spec(), model->version, response);
  return FinishNow(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  const int64_t arrival_us = clock_->NowMicros();
  if (!ready_.load()) {
    metrics_->CountUnroutedRequest(StatusCode::kUnavailable);
    return FinishNow(context, ToGrpcStatus(Unavailable("the server is still loading its models")));
  }
  std::shared_ptr<LoadedModel> model;
  Status status = repository_->Find(request->model_name(), request->model_version(), "model_name",
                                    "model_version", &model);
  if (!status.ok()) {
    metrics_->CountUnroutedRequest(status.code());
    return FinishNow(context, ToGrpcStatus(status));
  }
  ModelScheduler* scheduler = model->scheduler.get();
  const ModelSpec& spec = scheduler->spec();
  ModelRequestMetrics* model_metrics = metrics_->ForModel(spec.name);

  auto pending = std::make_shared<PendingRequest>();
  // The request belongs to this RPC until it finishes; decoding moves its raw buffers out instead of
  // copying them, hence the const_cast.
  status = DecodeInferRequest(spec, const_cast<inference::ModelInferRequest*>(request), &pending->item);
  if (!status.ok()) {
    model_metrics->Refused(status.code());
    return FinishNow(context, ToGrpcStatus(status));
  }
  pending->deadline_us = DeadlineMicros(*context, *clock_);

  auto* reactor = new InferReactor(scheduler, pending);
  const Clock* clock = clock_;
  // Counted before Finish, so that a client that has its answer finds it in the next scrape. Holds
  // the model version until the answer is out, so that an unload or reload waits for it.
  pending->done = [reactor, request, response, model, model_metrics, clock, arrival_us](
                      const Status& outcome, std::vector<HostTensor>&& outputs,
                      const RequestTiming& timing) {
    if (outcome.ok()) {
      EncodeInferResponse(model->scheduler->spec(), model->version, *request, std::move(outputs), response);
    }
    model_metrics->Finished(outcome, clock->NowMicros() - arrival_us, timing);
    reactor->Finish(ToGrpcStatus(outcome));
  };
  model_metrics->Started();
  status = scheduler->Enqueue(pending);
  if (!status.ok()) {
    // Not accepted: `done` will never run, so finish here.
    model_metrics->Finished(status, clock_->NowMicros() - arrival_us, RequestTiming{});
    reactor->Finish(ToGrpcStatus(status));
  }
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(grpc::CallbackServerContext* context,
                                                            const inference::RepositoryIndexRequest* request,
                                                            inference::RepositoryIndexResponse* response) {
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
