#pragma once
// ModelInfer on gRPC's completion-queue (async) API, while the service's other RPCs stay on the
// callback API. Why: on the H200 at 84k calls/s, gRPC 1.51's callback server handed ModelInfer
// about 10k calls/s (its executor threads busy on 4.4 cores), so calls waited inside gRPC, ahead of
// admission control, until their clients' deadlines passed: goodput fell to zero at 4x capacity.
// Here each completion queue has a thread of its own draining it, and calls are requested ahead on
// every queue, so each call reaches InferPath (decode, admission, the scheduler) as it arrives, and
// the scheduler's answer is written from the thread that completes it.
//
// A call: requested ahead -> arrives (a fresh call is requested in its place) -> prepared and
// queued through InferPath, or refused -> answered once (InferenceReceiver) -> deleted once both its
// finish and its done notification came back. A client's cancellation or expiry, seen in the done
// notification, reaches the scheduler (PreparedInference::Cancel).
//
// Lifetime: construct (adds the queues to the builder) before ServerBuilder::BuildAndStart, Start
// after it, and Stop only once grpc::Server::Shutdown has returned and every call started has been
// answered (the schedulers have stopped): a call that gRPC cancelled at its shutdown deadline, or
// whose in-process REST channel it closed, is still in its scheduler when Shutdown returns, and its
// answer goes through its queue (finishing on a queue already shut down is a gRPC assertion). The
// service, and everything InferPath reaches, must outlive Stop.
// Thread safety: construct, Start and Stop from one controlling thread; the rest runs on the queues'
// threads and on the schedulers' threads that answer.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "graphserve/server/common/thread_annotations.h"
#include "graphserve/server/grpc/spin_slots.h"
#include "infer_path.h"
#include "inference_service.h"

namespace graphserve {

class UnaryInferQueues {
 public:
  // `thread_count` queues, one thread each. After each event a thread polls its queue without
  // sleeping for `busy_poll` (0: it sleeps at once), if fewer than `spinning_threads` others do.
  UnaryInferQueues(grpc::ServerBuilder* builder, int thread_count, std::chrono::microseconds busy_poll,
                   int spinning_threads);
  ~UnaryInferQueues();
  UnaryInferQueues(const UnaryInferQueues&) = delete;
  UnaryInferQueues& operator=(const UnaryInferQueues&) = delete;

  void Start(InferenceService* service, const InferPath& path);
  // Shuts the queues down, lets their threads drain them, joins the threads.
  void Stop();

  // One queue, its thread and whether it still takes calls; the calls (in the .cpp) reach it.
  class Queue;

 private:
  SpinSlots spin_slots_;
  std::vector<std::unique_ptr<Queue>> queues_;
};

// Threads for ModelInfer's completion queues when the flag says 0: half of `usable_cores`
// (UsableCores: affinity and CPU quota, not the host's count; gRPC's polling
// and the decoding run on them; the other half is left to the schedulers, executors and gRPC's own
// threads), at least 2, at most 16.
int DefaultInferThreadCount(int usable_cores);

// The busy poll when the flag says -1: 300 us with 8 `usable_cores` or more, which catches a lone
// client's next call (on the H200's host it took 0.07 ms off the median at concurrency 1); none
// below, where spinning threads would take the cores the work needs.
std::chrono::microseconds DefaultBusyPoll(int usable_cores);

}  // namespace graphserve
