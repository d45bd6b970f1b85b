#pragma once
// A REST infer call's answer on its way from the gRPC service to REST, which calls the service in
// process (rest_endpoint.cpp). REST counts an answer once its own client has it; the gRPC side
// counts one whose write failed. A REST call cancelled (its client gone, or the drain over) just as
// the service hands its answer over ends CANCELLED on REST's side while the service's write
// succeeded, and each side would leave the count to the other. With a handover between them,
// whichever side learns its part second counts the answer as not delivered.
//
// AnswerHandovers is the process's registry: REST opens a handover for each infer call and sends
// its id in the call's metadata (kMetadataKey); the service finds it by that id for calls that
// come in process (InferPath::CountedByRest), never for a network client's.
// Thread safety: every member of both classes may be called from any thread.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "graphserve/server/common/thread_annotations.h"

namespace graphserve {

class AnswerHandover {
 public:
  // The service wrote the answer to REST's call. True when REST had given up on it first: the
  // caller counts the answer as not delivered.
  bool HandedOver() { return state_.exchange(kHandedOver) == kGivenUp; }
  // REST's call ended without its answer. True when the service had handed it over first: the
  // caller counts the answer as not delivered.
  bool GivenUp() { return state_.exchange(kGivenUp) == kHandedOver; }

 private:
  static constexpr int kPending = 0;
  static constexpr int kHandedOver = 1;
  static constexpr int kGivenUp = 2;
  std::atomic<int> state_{kPending};
};

class AnswerHandovers {
 public:
  // The metadata key under which a REST call carries its handover's id.
  static constexpr const char* kMetadataKey = "graphserve-answer-handover";

  static AnswerHandovers& Instance();

  // A new handover, found by its id (the returned string) until Forget.
  std::pair<std::string, std::shared_ptr<AnswerHandover>> Open() EXCLUDES(mutex_);
  // The open handover of `id`; nullptr when none is (REST forgot it, or the id is no handover's).
  std::shared_ptr<AnswerHandover> Find(std::string_view id) const EXCLUDES(mutex_);
  void Forget(const std::string& id) EXCLUDES(mutex_);
  size_t open() const EXCLUDES(mutex_);

 private:
  mutable Mutex mutex_;
  uint64_t next_id_ GUARDED_BY(mutex_) = 0;
  std::unordered_map<std::string, std::shared_ptr<AnswerHandover>> open_ GUARDED_BY(mutex_);
};

}  // namespace graphserve
