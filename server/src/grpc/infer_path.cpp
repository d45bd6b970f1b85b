#include "infer_path.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graphserve/server/grpc/compressed_message.h"
#include "graphserve/server/grpc/request_codec.h"
#include "graphserve/server/observability/metrics.h"
#include "graphserve/server/security/api_groups.h"
#include "security/grpc_security.h"

namespace graphserve {
namespace {

// The gRPC deadline as an absolute time on the scheduler's clock; 0 when the call has none.
int64_t DeadlineMicros(const grpc::ServerContextBase& context, const Clock& clock) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return 0;
  const int64_t remaining_us =
      std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::system_clock::now())
          .count();
  return clock.NowMicros() + std::max<int64_t>(remaining_us, 0);
}

// A request that reached its model's scheduler, finished: counted in /metrics and in the model's
// statistics.
void CountFinished(ModelRequestMetrics* metrics, ModelStatisticsRecorder* statistics,
                   const Status& outcome, int64_t rows, int64_t latency_us, const RequestTiming& timing) {
  metrics->Finished(outcome, latency_us, timing);
  if (outcome.ok()) {
    statistics->RecordSuccess(rows, latency_us * 1000, timing);
  } else {
    statistics->RecordFailure(latency_us * 1000);
  }
}

constexpr ApiGroup kInferenceGroup = GroupOfGrpcMethod("ModelInfer");
static_assert(GroupOfGrpcMethod("ModelStreamInfer") == kInferenceGroup, "both infer RPCs take this path");

// Writes the request's trace when its model's trace settings sample it; after encoding, so that
// REQUEST_END covers it.
void TraceIfSampled(const RequestTracing& tracing, const LoadedModel& model,
                    const inference::ModelInferRequest& request, int64_t arrival_us,
                    const RequestTiming& timing, const Clock& clock) {
  if (tracing.settings == nullptr) return;
  std::optional<TraceTicket> ticket = tracing.settings->Sample(model.scheduler->spec().name);
  if (!ticket) return;
  RequestTrace trace;
  trace.ticket = std::move(*ticket);
  trace.model_name = model.scheduler->spec().name;
  // Triton's versions are numbers; graphserve's flat layout serves version "1".
  const char* version_end = model.version.data() + model.version.size();
  if (std::from_chars(model.version.data(), version_end, trace.model_version).ptr != version_end) {
    trace.model_version = -1;
  }
  trace.request_id = request.id();
  trace.timestamps = TraceTimestamps(arrival_us, timing, clock.NowMicros());
  tracing.writer->Submit(std::move(trace));
}

}  // namespace

grpc::Status InferPath::Admit(const grpc::ServerContextBase& context) const {
  return gate_ == nullptr ? grpc::Status::OK : gate_->Admit(context, kInferenceGroup);
}

Status InferPath::Parse(grpc::ByteBuffer* payload, inference::ModelInferRequest* request) const {
  return ParseGrpcMessage(payload, wire_.max_request_bytes, request);
}

void InferPath::CompressAnswers(grpc::ServerContextBase* context) const {
  if (wire_.answer_compression != GRPC_COMPRESS_LEVEL_NONE)
    context->set_compression_level(wire_.answer_compression);
}

bool InferPath::CountedByRest(const grpc::ServerContextBase& context) {
  // gRPC 1.51's in-process transport reports no peer; a network client's peer is its address
  // ("ipv4:...", "ipv6:..."), which it cannot choose. tritonclient_http checks that a REST call is
  // counted once.
  return context.peer() == "unknown";
}

void PreparedInference::Cancel() const {
  // A client cancels its call when the deadline passes (the server's own gRPC check is off,
  // server.cpp): such a call has expired rather than been cancelled. The client's clock and this
  // one are read apart, hence the slack.
  constexpr std::chrono::milliseconds kDeadlineSlack{1};
  if (deadline != std::chrono::system_clock::time_point::max() &&
      std::chrono::system_clock::now() + kDeadlineSlack >= deadline) {
    pending->deadline_expired.store(true);
  }
  pending->cancelled.store(true);
  scheduler->Poke();
}

Status InferPath::Prepare(const grpc::ServerContextBase& context,
                          inference::ModelInferRequest* request, PreparedInference* prepared) const {
  prepared->arrival_us = clock_->NowMicros();
  if (!ready_->load()) {
    metrics_->CountUnroutedRequest(StatusCode::kUnavailable);
    // Also what a stream still open while the server drains gets for each further request.
    return Unavailable("the server is not ready: it is loading its models, shutting down, or its CUDA device failed");
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
  prepared->deadline = context.deadline();
  prepared->pending->deadline_us = DeadlineMicros(context, *clock_);
  if (prepared->pending->deadline_us > 0) {
    prepared->metrics->ArrivedWithDeadline(prepared->pending->deadline_us - prepared->arrival_us);
  }
  std::vector<std::string> custom_parameters;
  prepared->shared_memory.registry = shared_memory_;
  status = DecodeInferRequest(prepared->scheduler->spec(), request, prepared->pending.get(), &custom_parameters,
                              &prepared->shared_memory);
  if (!status.ok()) {
    prepared->metrics->Refused(status.code());
    return status;
  }
  if (!custom_parameters.empty() && !prepared->model->custom_parameters_reported.exchange(true)) {
    // Once per model version: a client sending them with every request must not fill the log. The
    // names are the client's: a few, each cut short.
    constexpr size_t kNamesLogged = 8, kNameChars = 64;
    std::string names;
    for (size_t i = 0; i < std::min(custom_parameters.size(), kNamesLogged); ++i) {
      names += (names.empty() ? "'" : ", '") + custom_parameters[i].substr(0, kNameChars) + "'";
    }
    spdlog::warn("model '{}': request parameters {} have no effect: {} models take tensors only, as in "
                 "Triton's PyTorch backend (reported once per model version)",
                 prepared->scheduler->spec().name, names, prepared->scheduler->spec().platform);
  }
  return Status::Ok();
}

void InferPath::Start(const PreparedInference& prepared, const inference::ModelInferRequest& request,
                      inference::ModelInferResponse* response, InferenceReceiver* receiver) const {
  // Copied out first: once the request is queued, its receiver may be answered and destroy
  // `prepared` before Enqueue even returns. The model is the receiver's to hold until it is
  // answered (`done` touches it only before Answered): a copy here would live as long as the
  // request, and a stream whose client stopped reading kept an unload waiting forever.
  const LoadedModel* model = prepared.model.get();
  ModelScheduler* scheduler = prepared.scheduler;
  ModelRequestMetrics* model_metrics = prepared.metrics;
  const Clock* clock = clock_;
  const int64_t arrival_us = prepared.arrival_us;
  ModelStatisticsRecorder* statistics = &scheduler->statistics();
  const RequestTracing tracing = tracing_;
  const int64_t rows = prepared.pending->item.rows;
  // `done` is the request's own member: it reaches the request through a plain pointer, since a
  // shared one would keep the request alive forever.
  const PendingRequest* self = prepared.pending.get();
  // Read by `done` only, before Answered: `prepared` is alive until then.
  const SharedMemoryTensors* shared_memory = &prepared.shared_memory;
  // Counted before the receiver answers, so that a client that has its answer finds it in the next
  // scrape; a success is counted as such only once written (ModelRequestMetrics::AnswerWritten).
  prepared.pending->done = [receiver, &request, response, model, model_metrics, statistics, clock, arrival_us,
                            rows, self, shared_memory,
                            tracing](const Status& outcome, std::vector<HostTensor>&& outputs,
                                     const RequestTiming& timing) {
    const int64_t now_us = clock->NowMicros();
    Status answer = SettleWithClient(outcome, *self, now_us);
    if (answer.ok()) {
      answer = EncodeInferResponse(model->scheduler->spec(), model->version, request, std::move(outputs),
                                   response, shared_memory);
    }
    CountFinished(model_metrics, statistics, answer, rows, now_us - arrival_us, timing);
    TraceIfSampled(tracing, *model, request, arrival_us, timing, *clock);
    receiver->Answered(answer);
  };
  model_metrics->Started(rows, scheduler->spec().has_sequence_length() ? prepared.pending->item.length : -1);
  const Status status = scheduler->Enqueue(prepared.pending);
  if (!status.ok()) {
    // Not accepted: `done` will never run, so answer here.
    CountFinished(model_metrics, statistics, status, rows, clock_->NowMicros() - arrival_us, RequestTiming{});
    receiver->Answered(status);
  }
}

}  // namespace graphserve
