#include "infer_path.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "graphserve/server/metrics.h"
#include "graphserve/server/request_codec.h"

namespace graphserve {
namespace {

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

void PreparedInference::Cancel() const {
  pending->cancelled.store(true);
  scheduler->Poke();
}

Status InferPath::Prepare(const grpc::CallbackServerContext& context,
                          inference::ModelInferRequest* request, PreparedInference* prepared) const {
  prepared->arrival_us = clock_->NowMicros();
  if (!ready_->load()) {
    metrics_->CountUnroutedRequest(StatusCode::kUnavailable);
    // Also what a stream still open while the server drains gets for each further request.
    return Unavailable("the server is not ready: it is loading its models or shutting down");
  }
  Status status = repository_->Find(request->model_name(), request->model_version(), "model_name",
                                    "model_version", &prepared->model);
  if (!status.ok()) {
    metrics_->CountUnroutedRequest(status.code());
    return status;
  }
  prepared->scheduler = prepared->model->scheduler.get();
  prepared->metrics = metrics_->ForModel(prepared->scheduler->spec().name);
  prepared->pending = std::make_shared<PendingRequest>();
  status = DecodeInferRequest(prepared->scheduler->spec(), request, &prepared->pending->item);
  if (!status.ok()) {
    prepared->metrics->Refused(status.code());
    return status;
  }
  prepared->pending->deadline_us = DeadlineMicros(context, *clock_);
  return Status::Ok();
}

void InferPath::Start(const PreparedInference& prepared, const inference::ModelInferRequest& request,
                      inference::ModelInferResponse* response, InferenceReceiver* receiver) const {
  // Copied out first: once the request is queued, its receiver may be answered and destroy
  // `prepared` before Enqueue even returns.
  std::shared_ptr<LoadedModel> model = prepared.model;
  ModelScheduler* scheduler = prepared.scheduler;
  ModelRequestMetrics* model_metrics = prepared.metrics;
  const Clock* clock = clock_;
  const int64_t arrival_us = prepared.arrival_us;
  // Counted before the receiver answers, so that a client that has its answer finds it in the next
  // scrape.
  prepared.pending->done = [receiver, &request, response, model, model_metrics, clock, arrival_us](
                               const Status& outcome, std::vector<HostTensor>&& outputs,
                               const RequestTiming& timing) {
    if (outcome.ok()) {
      EncodeInferResponse(model->scheduler->spec(), model->version, request, std::move(outputs), response);
    }
    model_metrics->Finished(outcome, clock->NowMicros() - arrival_us, timing);
    receiver->Answered(outcome);
  };
  model_metrics->Started();
  const Status status = scheduler->Enqueue(prepared.pending);
  if (!status.ok()) {
    // Not accepted: `done` will never run, so answer here.
    model_metrics->Finished(status, clock_->NowMicros() - arrival_us, RequestTiming{});
    receiver->Answered(status);
  }
}

}  // namespace graphserve
