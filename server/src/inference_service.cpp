#include "graphserve/server/inference_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>

#include "graphserve/server/metrics.h"
#include "graphserve/server/request_codec.h"

namespace graphserve {
namespace {

constexpr const char* kServerName = "graphserve";

// One ModelInfer call in flight. Lives until gRPC reports the RPC done; the scheduler's completion
// callback finishes it from a worker thread, so no RPC thread waits for inference.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  InferReactor(ModelScheduler* scheduler, std::shared_ptr<PendingRequest> pending,
               std::chrono::system_clock::time_point deadline)
      : scheduler_(scheduler), pending_(std::move(pending)), deadline_(deadline) {}

  void OnCancel() override {
    // gRPC cancels a call when its deadline passes: such a call has expired rather than been
    // cancelled. Its timer and the system clock are read apart, hence the slack.
    if (deadline_ != std::chrono::system_clock::time_point::max() &&
        std::chrono::system_clock::now() + kDeadlineSlack >= deadline_) {
      pending_->deadline_expired.store(true);
    }
    pending_->cancelled.store(true);
    scheduler_->Poke();
  }
  void OnDone() override { delete this; }

 private:
  static constexpr std::chrono::milliseconds kDeadlineSlack{1};

  ModelScheduler* const scheduler_;
  const std::shared_ptr<PendingRequest> pending_;
  const std::chrono::system_clock::time_point deadline_;
};

// A ModelInfer call that reached its model's scheduler, finished: counted in /metrics and in the
// model's statistics.
void CountFinished(ModelRequestMetrics* metrics, ModelStatisticsRecorder* statistics,
                   const Status& outcome, int64_t rows, int64_t latency_us,
                   const RequestTiming& timing) {
  metrics->Finished(outcome, latency_us, timing);
  if (outcome.ok()) {
    statistics->RecordSuccess(rows, latency_us * 1000, timing);
  } else {
    statistics->RecordFailure(latency_us * 1000);
  }
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

}  // namespace

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
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
  if (repository_->Find(request->name()) == nullptr) {
    return FinishNow(context, ToGrpcStatus(NotFound("name: unknown model '" + request->name() + "'")));
  }
  response->set_ready(true);
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
  const LoadedModel* model = repository_->Find(request->name());
  if (model == nullptr) {
    return FinishNow(context, ToGrpcStatus(NotFound("name: unknown model '" + request->name() + "'")));
  }
  FillModelMetadata(model->scheduler->spec(), response);
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
  const LoadedModel* model = repository_->Find(request->model_name());
  if (model == nullptr) {
    metrics_->CountUnroutedRequest(StatusCode::kNotFound);
    return FinishNow(context, ToGrpcStatus(NotFound("model_name: unknown model '" +
                                                    request->model_name() + "'")));
  }
  ModelScheduler* scheduler = model->scheduler.get();
  const ModelSpec& spec = scheduler->spec();
  ModelRequestMetrics* model_metrics = metrics_->ForModel(spec.name);

  auto pending = std::make_shared<PendingRequest>();
  // The request belongs to this RPC until it finishes; decoding moves its raw buffers out instead of
  // copying them, hence the const_cast.
  Status status = DecodeInferRequest(spec, scheduler->options().queue_policy,
                                     const_cast<inference::ModelInferRequest*>(request), pending.get());
  if (!status.ok()) {
    model_metrics->Refused(status.code());
    return FinishNow(context, ToGrpcStatus(status));
  }
  pending->deadline_us = DeadlineMicros(*context, *clock_);

  auto* reactor = new InferReactor(scheduler, pending, context->deadline());
  const Clock* clock = clock_;
  ModelStatisticsRecorder* statistics = &scheduler->statistics();
  const int64_t rows = pending->item.rows;
  // `done` is the request's own member: it reaches the request through a plain pointer, since a
  // shared one would keep the request alive forever.
  const PendingRequest* self = pending.get();
  // Counted before Finish, so that a client that has its answer finds it in the next scrape.
  pending->done = [reactor, request, response, &spec, model_metrics, statistics, clock, arrival_us,
                   rows, self](const Status& outcome, std::vector<HostTensor>&& outputs,
                               const RequestTiming& timing) {
    const int64_t now_us = clock->NowMicros();
    const Status answer = SettleWithClient(outcome, *self, now_us);
    if (answer.ok()) EncodeInferResponse(spec, *request, std::move(outputs), response);
    CountFinished(model_metrics, statistics, answer, rows, now_us - arrival_us, timing);
    reactor->Finish(ToGrpcStatus(answer));
  };
  model_metrics->Started();
  status = scheduler->Enqueue(pending);
  if (!status.ok()) {
    // Not accepted: `done` will never run, so finish here.
    CountFinished(model_metrics, statistics, status, rows, clock_->NowMicros() - arrival_us,
                  RequestTiming{});
    reactor->Finish(ToGrpcStatus(status));
  }
  return reactor;
}

}  // namespace graphserve
