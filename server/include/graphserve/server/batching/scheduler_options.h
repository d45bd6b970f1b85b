#pragma once
// How a model's scheduler batches and queues: the options the config loader fills from config.pbtxt
// (dynamic_batching) and the server's flags, and their defaults. Plain values; Validate names the
// field of an option out of range.
#include <cstdint>

#include "graphserve/engine/status.h"

namespace graphserve {

// How queued requests become batches.
enum class BatchingPolicy {
  // Binned by bucket length, padding-aware (BatchPlanner below): graphserve's policy.
  kSizeBinned,
  // Arrival order, each batch padded to the smallest bucket holding its longest request: what
  // batchers without size binning do. For comparing the two on the same server and traffic.
  kFifo,
};

// Requests a model's queue holds when its config does not say (dynamic_batching.max_queue_size):
// several full grids' worth before Enqueue pushes back. The one default, for SchedulerOptions and
// the config loader alike.
inline constexpr int64_t kDefaultMaxQueueSize = 4096;
// The delay when a config does not say (dynamic_batching.max_queue_delay_microseconds): about one
// short bucket's execution on a GPU (a BERT-base forward at 1x64 takes ~0.7 ms on an H200), so
// under load a batch forms while the previous one runs, and a lone caller pays at most that much.
inline constexpr int64_t kDefaultMaxQueueDelayUs = 500;

// Triton's dynamic_batching.default_queue_policy, the part graphserve honours: how long a request
// may wait in the queue before it is answered DEADLINE_EXCEEDED unrun (Triton's timeout_action
// REJECT), and whether a request may shorten that with Triton's `timeout` parameter.
struct QueuePolicy {
  // 0: a request waits as long as it takes (or until its client's deadline).
  int64_t default_timeout_us = 0;
  // Triton's allow_timeout_override: a request's `timeout` replaces the default when it is shorter
  // (or when there is no default); a longer one is clamped to the default, and without the override
  // every request keeps the default, as in Triton.
  bool allow_timeout_override = false;

  // The queue timeout of a request whose `timeout` parameter is `requested_us` (0: not given).
  int64_t TimeoutFor(int64_t requested_us) const {
    if (!allow_timeout_override || requested_us <= 0) return default_timeout_us;
    return default_timeout_us == 0 ? requested_us : std::min(requested_us, default_timeout_us);
  }
};

// The longest busy poll accepted (SchedulerOptions::busy_poll_us, --busy-poll-us): a few batches'
// time, past which a spinning thread only burns a core.
inline constexpr int64_t kMaxBusyPollUs = 10'000;

struct SchedulerOptions {
  // How long the oldest request of a bin may wait for company before it is dispatched anyway. The
  // planner dispatches sooner when it expects nobody to join (see BatchPlanner), so the delay is a
  // bound, not a fixed cost.
  int64_t max_queue_delay_us = kDefaultMaxQueueDelayUs;
  // Requests (not rows) waiting at most; Enqueue refuses more with RESOURCE_EXHAUSTED.
  int64_t max_queue_size = kDefaultMaxQueueSize;
  BatchingPolicy policy = BatchingPolicy::kSizeBinned;
  // dynamic_batching { disable: true }: every request is a batch of its own, oldest first, at once
  // (see BatchPlanner). max_queue_delay_us must then be 0: nothing waits for company.
  bool batching_disabled = false;
  QueuePolicy queue_policy;
  // An idle worker polls the queue without sleeping for this long before it waits on its condition
  // variable: a request arriving then starts without a thread wake-up. A server setting
  // (--busy-poll-us), not a model's; 0: the worker sleeps at once. A second instance on the same
  // device never polls (it takes no lone request at once).
  int64_t busy_poll_us = 0;

  // Triton's dynamic_batching.priority_levels: 0 serves every request alike (a request's `priority`
  // is then ignored, as in Triton); N > 0 queues each level apart, 1 the highest, and a request
  // without a priority (or with one beyond N) at default_priority_level, in [1, N].
  int64_t priority_levels = 0;
  int64_t default_priority_level = 0;

  // Returns INVALID_ARGUMENT naming the field when an option is out of range.
  Status Validate() const;
};

}  // namespace graphserve
