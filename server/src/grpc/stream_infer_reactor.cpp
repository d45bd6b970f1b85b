#include "stream_infer_reactor.h"

#include <iterator>
#include <utility>

#include "graphserve/server/grpc/compressed_message.h"
#include "graphserve/server/observability/metrics.h"

namespace graphserve {
namespace {

// grpc::Alarm takes system_clock deadlines; the stream times its writes on the steady clock.
std::chrono::system_clock::time_point ToSystemTime(std::chrono::steady_clock::time_point when) {
  return std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                when - std::chrono::steady_clock::now());
}

}  // namespace

// One request of the stream, from its read to the write of its answer.
struct StreamInferReactor::StreamRequest final : InferenceReceiver {
  explicit StreamRequest(StreamInferReactor* owner) : stream(owner) {}

  void Answered(const Status& outcome) override { stream->Answered(this, outcome); }

  // The answer to a request that failed: the status message a unary call would get, and what the
  // client matches the answer by.
  void Fail(const Status& outcome) {
    answer.set_error_message(outcome.message());
    inference::ModelInferResponse* echo = answer.mutable_infer_response();
    echo->set_model_name(request.model_name());
    echo->set_model_version(request.model_version());
    echo->set_id(request.id());
  }

  // Every answer on a stream is its request's last (graphserve serves no decoupled models), and says
  // so as Triton's streams do, for clients that wait for it (triton_enable_empty_final_response).
  void MarkFinal() {
    (*answer.mutable_infer_response()->mutable_parameters())["triton_final_response"].set_bool_param(true);
  }

  StreamInferReactor* const stream;
  grpc::ByteBuffer wire;  // the request as read, then the answer as written
  inference::ModelInferRequest request;
  PreparedInference prepared;
  inference::ModelStreamInferResponse answer;
  StreamRequests::iterator position;  // in queued_, while queued
  // Answered OK: counted once its answer is written or dropped (ModelRequestMetrics::AnswerWritten).
  bool succeeded = false;
};

StreamInferReactor::StreamInferReactor(grpc::CallbackServerContext* context, InferPath path)
    : context_(context), path_(path) {
  path_.CompressAnswers(context_);
  ReadNext();
}

StreamInferReactor::~StreamInferReactor() = default;

void StreamInferReactor::OnReadDone(bool ok) {
  NextCall next;
  bool serve = false;
  {
    MutexLock lock(&mutex_);
    read_in_flight_ = false;
    if (!ok) reads_ended_ = true;
    serve = ok && !abandoned_;
    // Otherwise no more requests come, and this read may have been what the stream waited for.
    if (!serve) next = NextCallLocked();
  }
  if (!serve) {
    Make(next);
    return;
  }
  std::unique_ptr<StreamRequest> request = std::move(next_request_);
  Status refusal = path_.Parse(&request->wire, &request->request);
  if (refusal.ok()) refusal = path_.Prepare(*context_, &request->request, &request->prepared);
  if (refusal.ok()) {
    Queue(std::move(request));
  } else {
    request->Fail(refusal);
    request->MarkFinal();
    {
      MutexLock lock(&mutex_);
      if (!abandoned_) to_write_.push_back(std::move(request));
      next = NextCallLocked();
    }
    Make(next);
  }
  // Reading goes on while earlier requests are still being served.
  ReadNext();
}

void StreamInferReactor::Queue(std::unique_ptr<StreamRequest> request) {
  StreamRequest* queued = request.get();
  {
    MutexLock lock(&mutex_);
    if (abandoned_) return;
    queued->position = queued_.insert(queued_.end(), std::move(request));
  }
  path_.Start(queued->prepared, queued->request, queued->answer.mutable_infer_response(), queued);
  // A cancellation that came while the request was on its way into the scheduler's queue may have
  // been looked for before it arrived there: announce it again, so that it leaves the queue promptly
  // instead of running.
  MutexLock lock(&mutex_);
  if (abandoned_) {
    for (const auto& waiting : queued_) waiting->prepared.Cancel();
  }
}

void StreamInferReactor::ReadNext() {
  {
    MutexLock lock(&mutex_);
    if (abandoned_) return;
    read_in_flight_ = true;
  }
  next_request_ = std::make_unique<StreamRequest>(this);
  StartRead(&next_request_->wire);
}

void StreamInferReactor::Answered(StreamRequest* request, const Status& outcome) {
  // The request is no longer the scheduler's and not yet to_write_'s: no other thread touches its
  // answer now.
  if (outcome.ok()) {
    request->succeeded = true;
  } else {
    request->Fail(outcome);
  }
  request->MarkFinal();
  std::unique_ptr<StreamRequest> dropped;
  std::shared_ptr<LoadedModel> released;
  NextCall next;
  {
    MutexLock lock(&mutex_);
    if (abandoned_) {
      dropped = std::move(*request->position);
      queued_.erase(request->position);
      if (dropped->succeeded) dropped->prepared.metrics->AnswerWritten(false, "grpc");
    } else {
      // Answered, so never cancelled (AbandonLocked cancels only queued_): the model may go while
      // the answer waits for a client that reads slowly, or not at all.
      released = std::move(request->prepared.model);
      to_write_.splice(to_write_.end(), queued_, request->position);
    }
    next = NextCallLocked();
  }
  dropped.reset();
  released.reset();
  Make(next);
}

void StreamInferReactor::OnWriteDone(bool ok) {
  std::unique_ptr<StreamRequest> written;
  NextCall next;
  {
    MutexLock lock(&mutex_);
    write_in_flight_ = false;
    written = std::move(to_write_.front());
    to_write_.pop_front();
    if (written->succeeded) written->prepared.metrics->AnswerWritten(ok, "grpc");
    // A failed write means the stream is broken: nothing more can reach the client.
    if (!ok) AbandonLocked();
    next = NextCallLocked();
  }
  written.reset();
  Make(next);
}

void StreamInferReactor::OnCancel() {
  NextCall next;
  {
    MutexLock lock(&mutex_);
    AbandonLocked();
    next = NextCallLocked();
  }
  Make(next);
}

void StreamInferReactor::OnDone() { delete this; }

void StreamInferReactor::ArmAlarmLocked(NextCall* next) {
  const std::chrono::milliseconds timeout = path_.answer_write_timeout();
  if (timeout.count() <= 0 || alarm_set_) return;
  alarm_set_ = true;
  // The alarm being replaced may be the one whose callback runs now: it is kept until the next.
  previous_alarm_ = std::move(write_alarm_);
  write_alarm_ = std::make_unique<grpc::Alarm>();
  next->alarm = write_alarm_.get();
  next->alarm_deadline = write_started_ + timeout;
}

void StreamInferReactor::OnWriteAlarm(bool fired) {
  NextCall next;
  bool dropped = false;
  {
    MutexLock lock(&mutex_);
    alarm_set_ = false;
    if (fired && write_in_flight_ && !abandoned_) {
      if (std::chrono::steady_clock::now() - write_started_ >= path_.answer_write_timeout()) {
        // The client has not read this answer in time: it and the ones behind it go nowhere.
        dropped = true;
        AbandonLocked();
      } else {
        ArmAlarmLocked(&next);  // a later write than the one the alarm was set for
      }
    }
    if (next.alarm == nullptr) next = NextCallLocked();
  }
  if (dropped) context_->TryCancel();  // fails the write in flight, which counts it
  Make(next);
}

void StreamInferReactor::AbandonLocked() {
  if (abandoned_) return;
  abandoned_ = true;
  // Under mutex_, so that no request leaves queued_ meanwhile. A scheduler never holds its own lock
  // while it answers a request, so taking it here (Poke) cannot deadlock with Answered.
  for (const auto& queued : queued_) queued->prepared.Cancel();
  auto unwritten = to_write_.begin();
  if (write_in_flight_ && unwritten != to_write_.end()) ++unwritten;  // gRPC still reads the front
  for (auto it = unwritten; it != to_write_.end(); ++it) {
    if ((*it)->succeeded) (*it)->prepared.metrics->AnswerWritten(false, "grpc");
  }
  to_write_.erase(unwritten, to_write_.end());
}

StreamInferReactor::NextCall StreamInferReactor::NextCallLocked() {
  NextCall next;
  if (finishing_) return next;
  if (!abandoned_ && !write_in_flight_ && !to_write_.empty()) {
    write_in_flight_ = true;
    write_started_ = std::chrono::steady_clock::now();
    next.write = to_write_.front().get();
    ArmAlarmLocked(&next);
    return next;
  }
  // Finish only once nothing of the stream is left with gRPC or a scheduler: OnDone deletes the
  // reactor, and a scheduler answering later would reach a deleted one.
  if (read_in_flight_ || write_in_flight_ || !queued_.empty()) return next;
  if (alarm_set_) {
    // Its callback, once cancelled, comes back here to finish.
    if (abandoned_ || (reads_ended_ && to_write_.empty())) next.alarm = write_alarm_.get();
    return next;
  }
  if (abandoned_) {
    finishing_ = true;
    next.finish = grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled");
  } else if (reads_ended_ && to_write_.empty()) {
    finishing_ = true;
    next.finish = grpc::Status::OK;
  }
  return next;
}

void StreamInferReactor::Make(const NextCall& next) {
  if (next.alarm != nullptr) {
    if (next.alarm_deadline) {
      next.alarm->Set(ToSystemTime(*next.alarm_deadline), [this](bool fired) { OnWriteAlarm(fired); });
    } else {
      next.alarm->Cancel();
    }
  }
  if (next.write != nullptr) {
    // The front of to_write_, which nothing else touches while its write is in flight.
    SerializeGrpcMessage(next.write->answer, &next.write->wire);
    StartWrite(&next.write->wire);
  } else if (next.finish) {
    Finish(*next.finish);
  }
}

}  // namespace graphserve
