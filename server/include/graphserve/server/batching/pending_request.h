#pragma once
// One inference request while the server holds it: what the RPC layer queues in a model's scheduler
// (PendingRequest), what becomes of its client meanwhile (ClientFate), and what the scheduler
// reports back with the answer (RequestTiming).
//
// Ownership: shared between the RPC layer, which made it, and the scheduler while it is queued or
// running. Thread safety: the RPC layer may set `cancelled` and `deadline_expired` from any thread
// at any time; every other field is written before the request is queued or, for the scheduler's
// own fields, under the scheduler's lock.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"

namespace graphserve {

// What happened to a request, for the caller and for metrics.
struct RequestTiming {
  int64_t queue_us = 0;    // enqueue → batch dispatch
  int64_t compute_us = 0;  // the batch's Execute call
  BucketShape padded_shape;
  // The batch's stages as its executor timed them (zeros for a request that did not run).
  BatchStageTimes stages;
  // When, on the scheduler's clock, the request was queued, its batch was launched and its batch
  // completed (0: not reached), for its trace.
  int64_t enqueue_us = 0;
  int64_t batch_start_us = 0;
  int64_t batch_end_us = 0;
};

// What has become of a request's client. A client cancels its call when its deadline passes, so a
// call that is both cancelled and past its deadline has expired: the deadline is looked at first,
// wherever the scheduler notices the client first (in the queue, at dispatch or at the answer).
enum class ClientFate {
  kWaiting,          // still waiting for its answer
  kCancelled,        // went away before its deadline
  kDeadlineExpired,  // its deadline passed (or gRPC said so)
};

struct PendingRequest {
  InferenceItem item;
  // The client's deadline, absolute on the scheduler's clock; 0 = none. An expired request is
  // dropped before it runs, with DEADLINE_EXCEEDED.
  int64_t deadline_us = 0;
  // Triton's `timeout` request parameter in µs (0 = not given); the model's QueuePolicy decides
  // whether it counts (QueuePolicy::TimeoutFor).
  int64_t timeout_override_us = 0;
  // Triton's `priority` request parameter: 1 is the highest level; 0 (not given), or a level the
  // model does not have, means the model's default level (SchedulerOptions::default_priority_level).
  uint64_t priority = 0;
  // Set by the RPC layer when the client goes away, followed by ModelScheduler::Poke; a cancelled
  // request leaves the queue (CANCELLED).
  std::atomic<bool> cancelled{false};
  // Set, before `cancelled`, when the client went away because its deadline passed (the client
  // cancels its call at the deadline): the request is then answered and counted as DEADLINE_EXCEEDED.
  std::atomic<bool> deadline_expired{false};
  // Called exactly once with the outcome. `outputs` holds one tensor per ModelSpec output (empty
  // where not wanted) when the status is OK.
  std::function<void(const Status&, std::vector<HostTensor>&& outputs, const RequestTiming&)> done;

  // Filled in by the scheduler, under its lock.
  int64_t enqueue_us = 0;
  int64_t queue_timeout_us = 0;  // the QueuePolicy's timeout for this request; 0 = none
  double work_us = 0.0;          // the scheduler's estimate of the device time it needs; 0 = unknown
  // Admitted behind queued work: that work (µs, scaled by the work scale) and the request's own
  // batch time, as admission estimated them; 0 when nothing was queued ahead worth measuring.
  double admitted_ahead_us = 0.0;
  double admitted_own_us = 0.0;
  bool queued = false;  // in a BatchPlanner's queue right now
  // Admitted to measure its bucket although the estimate said it would end late (ModelScheduler::
  // Enqueue): it runs even where the estimate says its batch ends after its expiry.
  bool probe = false;

  // The client's deadline has passed by `now_us`, or gRPC has said so.
  bool ClientDeadlinePassed(int64_t now_us) const {
    return deadline_expired.load() || (deadline_us != 0 && now_us >= deadline_us);
  }
  // What has become of the client by `now_us`: the one place that decides it (ClientFate).
  ClientFate ClientFateAt(int64_t now_us) const {
    if (ClientDeadlinePassed(now_us)) return ClientFate::kDeadlineExpired;
    if (cancelled.load()) return ClientFate::kCancelled;
    return ClientFate::kWaiting;
  }
  // When the request's queue timeout runs out; 0 = never, as for a timeout too long to add to the
  // clock (a `timeout` of 2^63-1 us wrapped negative and expired the request at once).
  int64_t QueueTimeoutEndUs() const {
    if (queue_timeout_us <= 0 || queue_timeout_us > std::numeric_limits<int64_t>::max() - enqueue_us) return 0;
    return enqueue_us + queue_timeout_us;
  }
  // When the planner drops the request unrun: the earlier of the client's deadline and the end of
  // its queue timeout; 0 = never.
  int64_t ExpiryUs() const {
    const int64_t timeout_end_us = QueueTimeoutEndUs();
    if (deadline_us == 0 || timeout_end_us == 0) return deadline_us + timeout_end_us;
    return std::min(deadline_us, timeout_end_us);
  }
};

}  // namespace graphserve
