#pragma once
// The per-model dynamic batcher: requests queue here, are binned by the smallest bucket length that
// holds them, and are handed to the model's executors (one worker thread per executor instance) as
// batches padded to a bucket of the grid.
//
// Thread safety: Enqueue may be called from any thread; Start and Stop from one controlling thread.
// Ownership: the scheduler owns its executors; a queued request is owned by the scheduler until its
// `done` callback has run, which happens exactly once per accepted request, on a worker thread (or on
// the caller's thread when Stop drains or rejects it).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/clock.h"

namespace graphserve {

// What happened to a request, for the caller and for metrics.
struct RequestTiming {
  int64_t queue_us = 0;    // enqueue → batch dispatch
  int64_t compute_us = 0;  // the batch's Execute call
  BucketShape padded_shape;
};

struct PendingRequest {
  InferenceItem item;
  // Absolute deadline on the scheduler's clock; 0 = none. An expired request is dropped before it runs,
  // with DEADLINE_EXCEEDED.
  int64_t deadline_us = 0;
  // Set by the RPC layer when the client goes away; a cancelled request leaves the queue (CANCELLED).
  std::atomic<bool> cancelled{false};
  // Called exactly once with the outcome. `outputs` holds one tensor per ModelSpec output (empty where
  // not wanted) when the status is OK.
  std::function<void(const Status&, std::vector<HostTensor>&& outputs, const RequestTiming&)> done;

  // Filled in by the scheduler.
  int64_t enqueue_us = 0;
};

struct SchedulerOptions {
  // How long the oldest request of a bin may wait for the bin to fill before it is dispatched anyway.
  int64_t max_queue_delay_us = 500;
  // Requests (not rows) waiting at most; Enqueue refuses more with RESOURCE_EXHAUSTED.
  int64_t max_queue_size = 1024;

  // Returns INVALID_ARGUMENT naming the field when an option is out of range.
  Status Validate() const;
};

// Outcome counts, monotonic, for the metrics exporter.
struct SchedulerCounters {
  uint64_t accepted = 0;
  uint64_t rejected_queue_full = 0;
  uint64_t deadline_exceeded = 0;
  uint64_t cancelled = 0;
  uint64_t batches = 0;
  uint64_t batch_rows = 0;  // real rows summed over batches
};

// One batch the scheduler decided to run, and on which bucket shape.
struct DispatchDecision {
  std::vector<std::shared_ptr<PendingRequest>> requests;
  BucketShape padded_shape;
};

// The pure decision part of the scheduler, apart from threads, so that tests can drive it with a fake
// clock. Not thread-safe: the ModelScheduler calls it under its lock.
class BatchPlanner {
 public:
  BatchPlanner(const ModelSpec& spec, const SchedulerOptions& options);

  void Add(std::shared_ptr<PendingRequest> request);
  size_t queued_requests() const { return queued_; }

  // Removes and returns the requests that expired or were cancelled by `now_us`.
  std::vector<std::shared_ptr<PendingRequest>> TakeDead(int64_t now_us);

  // The batch to run now, if any. `executor_idle`: a worker is waiting for work right now.
  std::optional<DispatchDecision> Next(int64_t now_us, bool executor_idle);

  // Earliest time at which Next could return a batch without new arrivals (the oldest request's
  // delay running out) or TakeDead a request (its deadline), or nullopt when nothing is queued.
  std::optional<int64_t> NextWakeUp() const;

 private:
  struct Bin {
    int64_t length = 0;  // the bucket length this bin pads to
    std::deque<std::shared_ptr<PendingRequest>> requests;
    int64_t rows = 0;
  };
  DispatchDecision TakeFromBin(Bin& bin);

  const ModelSpec spec_;
  const SchedulerOptions options_;
  std::vector<Bin> bins_;  // one per bucket length, plus one for oversize requests, in length order
  size_t queued_ = 0;
};

class ModelScheduler {
 public:
  // `executors` must be non-empty and already warmed up.
  ModelScheduler(const ModelSpec& spec, const SchedulerOptions& options,
                 std::vector<std::unique_ptr<Executor>> executors, const Clock* clock);
  ~ModelScheduler();  // Stop()s

  ModelScheduler(const ModelScheduler&) = delete;
  ModelScheduler& operator=(const ModelScheduler&) = delete;

  void Start();
  // Stops accepting work, runs what is queued, then joins the workers.
  void Stop();

  // Queues `request` and returns at once; never blocks on inference. On OK the scheduler owns the
  // request until `done` runs. RESOURCE_EXHAUSTED (queue full) and UNAVAILABLE (stopping) mean
  // "retry later": `done` is not called and the caller still owns the request.
  Status Enqueue(std::shared_ptr<PendingRequest> request);

  // Wakes the workers to notice cancelled requests promptly.
  void Poke();

  const ModelSpec& spec() const { return spec_; }
  const std::vector<std::unique_ptr<Executor>>& executors() const { return executors_; }
  SchedulerCounters Counters() const;
  size_t QueueDepth() const;

 private:
  void WorkerLoop(Executor* executor);
  void Finish(const std::shared_ptr<PendingRequest>& request, const Status& status);

  const ModelSpec spec_;
  const SchedulerOptions options_;
  const Clock* const clock_;
  std::vector<std::unique_ptr<Executor>> executors_;
  std::vector<std::thread> workers_;

  mutable std::mutex mutex_;
  std::condition_variable work_available_;
  BatchPlanner planner_;            // guarded by mutex_
  SchedulerCounters counters_;      // guarded by mutex_
  int idle_workers_ = 0;            // guarded by mutex_
  bool stopping_ = false;           // guarded by mutex_
};

}  // namespace graphserve
