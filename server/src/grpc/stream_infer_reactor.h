#pragma once
// One ModelStreamInfer call: a bidirectional stream of ModelInferRequests, each prepared and queued
// through InferPath exactly as a ModelInfer call is, and each answered with its own
// ModelStreamInferResponse as soon as it finishes (not in arrival order). A success carries the
// encoded ModelInferResponse; a failure (a refusal, a full queue, an execution error, an expired
// deadline) carries the status message a unary call would get in error_message, with the request's
// id, model_name and model_version in infer_response so that the client can match it; it does not
// end the stream, and the other requests are unaffected.
//
// Reading goes on while answers are pending. One write is in flight at a time (gRPC's rule); the
// answers finished meanwhile wait in a queue, in the order they finished. After the client's
// half-close the stream finishes OK once every request has been answered and every answer written.
// When the client cancels (or the server's drain timeout does), the requests still queued are
// cancelled, unwritten answers are dropped and the stream finishes CANCELLED. Answers the client has
// not read yet wait here in memory (gRPC's flow control holds the writes back), until a write has
// waited for the path's answer_write_timeout: then the stream is cancelled, and that answer and those
// behind it are dropped. Each successful answer is counted once written or dropped
// (ModelRequestMetrics::AnswerWritten).
//
// Thread safety: gRPC's reactions and the schedulers' answering threads call in concurrently; the
// state they share is guarded by mutex_, and gRPC's Start*/Finish calls are made without it.
// Lifetime: the reactor deletes itself in OnDone. It calls Finish only once no read, no write and no
// request of the stream is left in flight, and starts none after that, so no scheduler callback can
// reach a deleted reactor.
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <list>
#include <memory>
#include <optional>

#include "graphserve/engine/status.h"
#include "graphserve/server/common/thread_annotations.h"
#include "grpc_service.pb.h"
#include "infer_path.h"

namespace graphserve {

// Requests are read raw and parsed here, so that a compressed one is inflated within the request
// limit (compressed_message.h); a refusal of that kind is one request's answer like any other.
class StreamInferReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Starts reading at once.
  StreamInferReactor(grpc::CallbackServerContext* context, InferPath path);

  void OnReadDone(bool ok) override EXCLUDES(mutex_);
  void OnWriteDone(bool ok) override EXCLUDES(mutex_);
  void OnCancel() override EXCLUDES(mutex_);
  void OnDone() override;

 private:
  struct StreamRequest;
  using StreamRequests = std::list<std::unique_ptr<StreamRequest>>;

  // The gRPC call a reaction makes once it has released mutex_: at most one of a write and a
  // finish.
  struct NextCall {
    StreamRequest* write = nullptr;  // its answer, serialized outside the lock
    std::optional<grpc::Status> finish;
    // The write timeout's alarm: set for `alarm_deadline`, or (without a deadline) cancelled so that
    // the stream can finish.
    grpc::Alarm* alarm = nullptr;
    std::optional<std::chrono::steady_clock::time_point> alarm_deadline;
  };

  ~StreamInferReactor() override;

  // Queues a prepared request with its model's scheduler.
  void Queue(std::unique_ptr<StreamRequest> request) EXCLUDES(mutex_);
  // Starts reading the next request, unless the stream is abandoned.
  void ReadNext() EXCLUDES(mutex_);
  // A queued request's outcome, from its scheduler (or from Start, when the scheduler refused it).
  void Answered(StreamRequest* request, const Status& outcome) EXCLUDES(mutex_);
  // Cancels every queued request and drops the answers not yet being written.
  void AbandonLocked() REQUIRES(mutex_);
  // Claims the next write, or the finish once nothing is left to wait for.
  NextCall NextCallLocked() REQUIRES(mutex_);
  // Makes the call; the last thing a reaction does, since a Finish may lead to OnDone.
  void Make(const NextCall& next);
  // The write timeout's alarm went off (`fired`) or was cancelled.
  void OnWriteAlarm(bool fired) EXCLUDES(mutex_);
  // Claims the alarm for the write in flight, unless it is already set.
  void ArmAlarmLocked(NextCall* next) REQUIRES(mutex_);

  grpc::CallbackServerContext* const context_;
  const InferPath path_;
  // The buffer the read in flight fills; touched only by the chain of OnReadDone reactions.
  std::unique_ptr<StreamRequest> next_request_;

  Mutex mutex_;
  // Queued with a scheduler, to be answered through Answered. Each knows its position, so that it
  // moves to to_write_ without a search or an allocation.
  StreamRequests queued_ GUARDED_BY(mutex_);
  // Answered and not yet written, in the order they were answered; the front is being written while
  // write_in_flight_.
  StreamRequests to_write_ GUARDED_BY(mutex_);
  bool read_in_flight_ GUARDED_BY(mutex_) = false;
  bool write_in_flight_ GUARDED_BY(mutex_) = false;
  bool reads_ended_ GUARDED_BY(mutex_) = false;  // the client half-closed, or the stream broke
  bool abandoned_ GUARDED_BY(mutex_) = false;    // cancelled, or a write failed
  bool finishing_ GUARDED_BY(mutex_) = false;    // Finish was claimed: nothing more starts
  // The write timeout: when the write in flight started, and whether an alarm is set (the stream
  // does not finish before its callback has run). A fresh alarm each time: one may be set from
  // within the previous one's callback; the previous one is kept until then.
  std::chrono::steady_clock::time_point write_started_ GUARDED_BY(mutex_);
  bool alarm_set_ GUARDED_BY(mutex_) = false;
  std::unique_ptr<grpc::Alarm> write_alarm_ GUARDED_BY(mutex_);
  std::unique_ptr<grpc::Alarm> previous_alarm_ GUARDED_BY(mutex_);
};

}  // namespace graphserve
