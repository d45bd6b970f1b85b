#include "unary_infer_queues.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include <grpcpp/alarm.h>

#include "common/thread_name.h"
#include "graphserve/server/grpc/compressed_message.h"
#include "graphserve/server/observability/metrics.h"
#include "grpc/answer_handover.h"

namespace graphserve {
namespace {

// Calls requested ahead on each queue: a burst finds calls waiting for it instead of queueing in
// gRPC until the queue's thread requests the next one.
constexpr int kCallsRequestedAheadPerQueue = 64;

}  // namespace

class UnaryInferQueues::Queue {
 public:
  Queue(std::unique_ptr<grpc::ServerCompletionQueue> completion_queue, std::chrono::microseconds busy_poll,
        SpinSlots* spin_slots)
      : completion_queue_(std::move(completion_queue)), busy_poll_(busy_poll), spin_slots_(spin_slots) {}

  void Start(InferenceService* service, const InferPath& path) {
    service_ = service;
    path_.emplace(path);
    for (int i = 0; i < kCallsRequestedAheadPerQueue; ++i) RequestCall();
    thread_ = std::thread([this] {
      NameThisThread("gs-infer");
      Drain();
    });
  }

  // Once the gRPC server has shut down: no call is requested after this, and Next returns false
  // once every event queued has been handled.
  void Stop() EXCLUDES(mutex_) {
    {
      MutexLock lock(&mutex_);
      shut_down_ = true;
    }
    completion_queue_->Shutdown();
    if (thread_.joinable()) {
      thread_.join();
    } else {
      Drain();  // never started (the server did not start): gRPC still wants the queue drained
    }
  }

  // A fresh call in place of one that arrived. Under the mutex: requesting on a queue already shut
  // down is a gRPC assertion.
  void RequestCall() EXCLUDES(mutex_);

  const InferPath& path() const { return *path_; }

 private:
  void Drain();

  const std::unique_ptr<grpc::ServerCompletionQueue> completion_queue_;
  const std::chrono::microseconds busy_poll_;
  SpinSlots* const spin_slots_;
  InferenceService* service_ = nullptr;
  std::optional<InferPath> path_;
  std::thread thread_;
  Mutex mutex_;
  bool shut_down_ GUARDED_BY(mutex_) = false;
};

namespace {

// One ModelInfer call, from being requested to being deleted (see the header for its course). Each
// of its events is a tag of its own; all are handled on its queue's thread, so its flags need no
// lock. Answered may run on any thread; what it sets is read on the queue's thread only after the
// finish it starts has come back.
class UnaryInferCall final : public InferenceReceiver {
 public:
  // What a completion queue hands back: the call and which of its events completed.
  struct Event {
    UnaryInferCall* call;
    void (UnaryInferCall::*handle)(bool ok);
    void Handle(bool ok) { (call->*handle)(ok); }
  };

  explicit UnaryInferCall(UnaryInferQueues::Queue* queue) : queue_(queue), responder_(&context_) {}

  void Request(InferenceService* service, grpc::ServerCompletionQueue* completion_queue) {
    completion_queue_ = completion_queue;
    context_.AsyncNotifyWhenDone(&done_event_);
    service->RequestModelInfer(&context_, &payload_, &responder_, completion_queue, completion_queue,
                               &arrived_event_);
  }

  void Answered(const Status& outcome) override { Answer(ToGrpcStatus(outcome)); }

 private:
  void Answer(const grpc::Status& outcome) {
    // The model goes back now, not when the answer is written: a client that does not read a large
    // answer would keep an unload of its model waiting. Under the lock, so that OnDone does not
    // cancel through a scheduler that may then be gone.
    std::shared_ptr<LoadedModel> released;
    {
      MutexLock lock(&answer_mutex_);
      answered_ = true;
      released = std::move(prepared_.model);
    }
    released.reset();
    // A client that never reads would keep the answer here, and in gRPC's buffers, until its
    // connection goes: past the timeout the call is cancelled, which fails the finish and frees both.
    const std::chrono::milliseconds write_timeout = queue_->path().answer_write_timeout();
    if (write_timeout.count() > 0) {
      write_alarm_pending_ = true;
      write_alarm_.Set(completion_queue_, std::chrono::system_clock::now() + write_timeout,
                       &write_alarm_event_);
    }
    // Read in OnFinished, once this finish came back. The peer is read now: a cancelled call's is
    // no longer known then.
    succeeded_ = outcome.ok();
    from_rest_ = succeeded_ && InferPath::CountedByRest(context_);
    // Found before the finish starts, while REST's call waits for it: once REST has the answer it
    // forgets the handover.
    if (from_rest_) handover_ = FindHandover();
    // Finish's event may be handled, and the call deleted, before Finish returns: nothing after it.
    if (outcome.ok()) {
      SerializeGrpcMessage(response_, &payload_);
      responder_.Finish(payload_, grpc::Status::OK, &finished_event_);
    } else {
      responder_.FinishWithError(outcome, &finished_event_);
    }
  }

  void OnArrived(bool ok) {
    if (!ok) {
      // The server is shutting down and no call came: gRPC sends no done notification then.
      delete this;
      return;
    }
    const InferPath& path = queue_->path();
    const grpc::Status admitted = path.Admit(context_);
    // Decoding moves the request's raw buffers out instead of copying them.
    Status refusal = admitted.ok() ? path.Parse(&payload_, &request_) : Status::Ok();
    if (admitted.ok() && refusal.ok()) refusal = path.Prepare(context_, &request_, &prepared_);
    if (!admitted.ok()) {
      Answer(admitted);
    } else if (refusal.ok()) {
      path.CompressAnswers(&context_);
      started_ = true;
      path.Start(prepared_, request_, &response_, this);
    } else {
      Answered(refusal);
    }
    // Only now a fresh call in this one's place (others wait requested ahead): the request is
    // queued first. This call is not deleted before its events come back to this thread.
    queue_->RequestCall();
  }

  void OnFinished(bool ok) {
    finished_ = true;
    if (write_alarm_pending_) write_alarm_.Cancel();  // its event still comes back, not ok
    // Not ok: the write timed out, or the client went away first; its answer reached nobody. REST
    // counts an answer handed over to it once its own client has it, unless REST gave its call up
    // as the answer came (AnswerHandover), or had already forgotten it.
    if (succeeded_) {
      if (!from_rest_) {
        prepared_.metrics->AnswerWritten(ok, "grpc");
      } else if (!ok || handover_ == nullptr || handover_->HandedOver()) {
        prepared_.metrics->AnswerWritten(false, "http");
      }
    }
    DeleteIfOver();
  }

  void OnWriteAlarm(bool fired) {
    write_alarm_pending_ = false;
    if (fired && !finished_) context_.TryCancel();
    DeleteIfOver();
  }

  // REST's handover for this in-process call; nullptr when it sent none or has forgotten it.
  std::shared_ptr<AnswerHandover> FindHandover() const {
    const auto& metadata = context_.client_metadata();
    const auto found = metadata.find(AnswerHandovers::kMetadataKey);
    if (found == metadata.end()) return nullptr;
    return AnswerHandovers::Instance().Find(std::string_view(found->second.data(), found->second.size()));
  }

  // Once every event of the call has come back.
  void DeleteIfOver() {
    if (finished_ && done_ && !write_alarm_pending_) delete this;
  }

  void OnDone(bool) {
    done_ = true;
    // The client went away (or its deadline passed) before its answer was written: a request still
    // queued leaves the queue, and its answer, when it comes, goes nowhere.
    if (started_ && context_.IsCancelled()) {
      MutexLock lock(&answer_mutex_);
      if (!answered_) prepared_.Cancel();  // an answered request has left its scheduler
    }
    DeleteIfOver();
  }

  UnaryInferQueues::Queue* const queue_;
  grpc::ServerCompletionQueue* completion_queue_ = nullptr;
  grpc::ServerContext context_;
  // The request as it came (compressed or not), then the answer as it goes.
  grpc::ByteBuffer payload_;
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_;
  PreparedInference prepared_;
  Mutex answer_mutex_;
  bool answered_ GUARDED_BY(answer_mutex_) = false;
  bool started_ = false;
  bool finished_ = false;
  bool done_ = false;
  grpc::Alarm write_alarm_;
  bool write_alarm_pending_ = false;          // set before Finish, so read safely once Finish came back
  bool succeeded_ = false;                    // likewise: counted once written (AnswerWritten)
  std::shared_ptr<AnswerHandover> handover_;  // likewise
  bool from_rest_ = false;
  Event arrived_event_{this, &UnaryInferCall::OnArrived};
  Event finished_event_{this, &UnaryInferCall::OnFinished};
  Event done_event_{this, &UnaryInferCall::OnDone};
  Event write_alarm_event_{this, &UnaryInferCall::OnWriteAlarm};
};

}  // namespace

void UnaryInferQueues::Queue::RequestCall() {
  MutexLock lock(&mutex_);
  if (shut_down_) return;
  (new UnaryInferCall(this))->Request(service_, completion_queue_.get());
}

void UnaryInferQueues::Queue::Drain() {
  using SteadyClock = std::chrono::steady_clock;
  void* tag = nullptr;
  bool ok = false;
  // After each event the queue is polled without sleeping for busy_poll_: a call arriving then is
  // taken at once instead of after a wake-up, which costs tens of microseconds on a host whose idle
  // cores sleep deeply. Only the threads holding a spin slot poll; the others sleep in Next.
  bool spinning = false;
  SteadyClock::time_point poll_until = SteadyClock::now() + busy_poll_;
  while (true) {
    if (busy_poll_.count() > 0 && SteadyClock::now() < poll_until && (spinning || spin_slots_->TryTake())) {
      spinning = true;
      const grpc::CompletionQueue::NextStatus status =
          completion_queue_->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
      if (status == grpc::CompletionQueue::SHUTDOWN) {
        spin_slots_->Give();
        return;
      }
      if (status == grpc::CompletionQueue::TIMEOUT) continue;
    } else {
      if (spinning) {
        spin_slots_->Give();
        spinning = false;
      }
      if (!completion_queue_->Next(&tag, &ok)) return;
    }
    static_cast<UnaryInferCall::Event*>(tag)->Handle(ok);
    poll_until = SteadyClock::now() + busy_poll_;
  }
}

UnaryInferQueues::UnaryInferQueues(grpc::ServerBuilder* builder, int thread_count,
                                   std::chrono::microseconds busy_poll, int spinning_threads)
    : spin_slots_(spinning_threads) {
  for (int i = 0; i < thread_count; ++i) {
    queues_.push_back(std::make_unique<Queue>(builder->AddCompletionQueue(), busy_poll, &spin_slots_));
  }
}

UnaryInferQueues::~UnaryInferQueues() { Stop(); }

void UnaryInferQueues::Start(InferenceService* service, const InferPath& path) {
  for (auto& queue : queues_) queue->Start(service, path);
}

void UnaryInferQueues::Stop() {
  for (auto& queue : queues_) queue->Stop();
  queues_.clear();
}

int DefaultInferThreadCount(int usable_cores) {
  return std::clamp(usable_cores / 2, 2, 16);
}

std::chrono::microseconds DefaultBusyPoll(int usable_cores) {
  constexpr int kFewestCoresToPoll = 8;
  return usable_cores >= kFewestCoresToPoll ? std::chrono::microseconds(300) : std::chrono::microseconds(0);
}

}  // namespace graphserve
