#pragma once
// The per-model dynamic batcher: requests queue here, are binned by the smallest bucket length that
// holds them, and are handed to the model's executors (one worker thread per executor instance) as
// batches padded to a bucket of the grid. Which batch runs next is decided by BatchPlanner
// (batch_planner.h), a pure, clock-injected policy that weighs each bucket's measured execution time
// against its real work; this header adds the threads around it.
//
// Thread safety: Enqueue, Poke, Counters, QueueDepth and Snapshot may be called from any thread;
// Start and Stop from one controlling thread. Ownership: the scheduler owns its executors; a queued
// request is owned by the scheduler until its `done` callback has run, which happens exactly once
// per accepted request, on one of the scheduler's answering threads (CallbackPool), whether it ran
// or expired or was cancelled in the queue; the lone request of a batch of one is answered on the
// executor's worker thread instead (`done` must not wait on the scheduler).
// Errors: Enqueue refuses a request it cannot queue (RESOURCE_EXHAUSTED, UNAVAILABLE) or whose
// deadline or queue timeout it cannot meet given the work queued ahead of it and the bucket times
// learnt from replays (DEADLINE_EXCEEDED, at once rather than after the wait); every other outcome,
// failures included, reaches the request's `done` callback. A queued request expires at its
// client's deadline or at the end of its queue timeout (SchedulerOptions::queue_policy), whichever
// comes first, with DEADLINE_EXCEEDED; it leaves the queue with that status as soon as no batch
// could end before it, rather than run and be answered late.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/batching/batch_planner.h"
#include "graphserve/server/batching/callback_pool.h"
#include "graphserve/server/common/clock.h"
#include "graphserve/server/common/thread_annotations.h"
#include "graphserve/server/observability/model_statistics_recorder.h"

namespace graphserve {

// Outcome counts, monotonic, for the metrics exporter.
struct SchedulerCounters {
  uint64_t accepted = 0;
  uint64_t rejected_queue_full = 0;
  uint64_t rejected_deadline = 0;  // refused on arrival: their deadline could not be met
  // Admitted although the estimate said their deadline could not be met, to measure a bucket whose
  // figure is not settled yet, on an idle scheduler (see ModelScheduler::Enqueue).
  uint64_t probes = 0;
  uint64_t deadline_exceeded = 0;
  uint64_t cancelled = 0;
  uint64_t batches = 0;
  uint64_t batch_rows = 0;   // real rows summed over batches
  uint64_t ride_alongs = 0;  // requests that filled padding rows of a longer bin's batch
  uint64_t busy_polls = 0;   // spins idle workers started (SchedulerOptions::busy_poll_us)
};

// What one executor has counted and holds, as the metrics exporter reads it.
struct ExecutorSnapshot {
  std::string device;
  ExecutionCounters executed;              // from one Counters() call, so that its sums agree
  std::vector<BucketShape> graph_buckets;  // the buckets that replay as CUDA graphs
  std::map<BucketShape, double> bucket_execute_us;  // each bucket's measured warm-up time
  CaptureSummary capture;
};

// A copy of what a scheduler and its executors have counted, for the metrics exporter, which then
// needs no access to the executors themselves.
struct SchedulerSnapshot {
  std::string model;
  bool has_sequence_length = true;  // false: a fixed-shape model, whose buckets read "8x-"
  int64_t max_batch_tokens = 0;     // the grid's token budget (ModelSpec::max_batch_tokens)
  // Both taken under the scheduler's lock, so that they agree with each other.
  SchedulerCounters counters;
  size_t queue_depth = 0;
  double work_scale = 1.0;  // ModelScheduler::work_scale_
  double wait_scale = 1.0;  // ModelScheduler::wait_scale_
  BucketCosts learned_costs;  // each bucket's estimate as replays corrected it (LearnedBucketCosts)
  std::vector<ExecutorSnapshot> executors;  // one per instance, in instance order
};

// The status a finished request is answered and counted with, given its client's fate by `now_us`
// (PendingRequest::ClientFateAt). A client that has gone got no answer: an OK or CANCELLED outcome
// becomes DEADLINE_EXCEEDED when the client's deadline expired, an OK one CANCELLED when the client
// cancelled. Other failures stay what they are.
Status SettleWithClient(const Status& outcome, const PendingRequest& request, int64_t now_us);

class ModelScheduler {
 public:

  // `executors` must be non-empty and already warmed up: their measured bucket times (averaged over
  // the instances) are the planner's cost table.
  ModelScheduler(const ModelSpec& spec, const SchedulerOptions& options,
                 std::vector<std::unique_ptr<Executor>> executors, const Clock* clock);
  ~ModelScheduler();  // Stop()s

  ModelScheduler(const ModelScheduler&) = delete;
  ModelScheduler& operator=(const ModelScheduler&) = delete;

  void Start() EXCLUDES(mutex_);
  // Stops accepting work, runs what is queued, joins the workers and returns once every accepted
  // request has been answered.
  void Stop() EXCLUDES(mutex_);

  // Queues `request` and returns at once; never blocks on inference. On OK the scheduler owns the
  // request until `done` runs. RESOURCE_EXHAUSTED (queue full) and UNAVAILABLE (stopping) mean
  // "retry later"; DEADLINE_EXCEEDED means that the estimated end of the request (the work queued
  // ahead at full batches, shared by the instances and scaled by how batches and waits really went,
  // then its own batch, at the bucket times learnt from replays) comes after its deadline or queue
  // timeout. The one exception: on an idle scheduler a request whose own bucket's figure is not
  // settled yet (LearnedBucketCosts::Settled) is admitted as a probe, since its figure may be the
  // one that is wrong (a busy start-up). In each case `done` is not called and the caller still
  // owns the request.
  Status Enqueue(std::shared_ptr<PendingRequest> request) EXCLUDES(mutex_);

  // Wakes the workers to notice cancelled requests promptly; call after setting `cancelled`.
  void Poke() EXCLUDES(mutex_);

  const ModelSpec& spec() const { return spec_; }
  const SchedulerOptions& options() const { return options_; }
  // The model's statistics since this scheduler was created: the scheduler records its executed
  // batches; the RPC edge records each request's final outcome.
  ModelStatisticsRecorder& statistics() { return statistics_; }
  const ModelStatisticsRecorder& statistics() const { return statistics_; }
  // The executors' warm-up figures, as read at construction; the planner starts from them and then
  // follows the replays (SchedulerSnapshot::learned_costs).
  const BucketCosts& bucket_costs() const { return costs_; }
  SchedulerCounters Counters() const EXCLUDES(mutex_);
  size_t QueueDepth() const EXCLUDES(mutex_);
  SchedulerSnapshot Snapshot() const EXCLUDES(mutex_);

 private:
  struct InFlightBatch;
  // Each worker keeps up to its executor's pipeline_depth() batches launched: it launches the next
  // ready batch before it waits for the one the device is running. A `shares_device` worker's
  // executor runs on the same device as an earlier instance's: it takes only batches that are ready
  // anyway (full or due), never cuts one short because it is idle, since its device is not.
  void WorkerLoop(Executor* executor, bool shares_device) EXCLUDES(mutex_);
  // Wakes a sleeping worker that can take new work: with an instance sharing its device, every
  // sleeping worker (the one woken alone might take only due batches).
  void WakeAnIdleWorker();

  // Returns the batch's work_us summed.
  double CountDispatched(const DispatchDecision& decision) REQUIRES(mutex_);
  // Folds in one batch's device time over its requests' estimated work (see work_scale_).
  void CalibrateWorkScale(double sample) REQUIRES(mutex_);
  // Folds in how long a completed batch's requests waited against what admission expected of the
  // work queued ahead of them (see wait_scale_).
  void CalibrateWaitScale(const std::vector<std::shared_ptr<PendingRequest>>& requests, int64_t end_us)
      EXCLUDES(mutex_);
  // Device time `request` needs at the best rows-per-microsecond of its length's buckets; 0 when its
  // length has no measured bucket.
  double EstimateWorkUs(const PendingRequest& request) const REQUIRES(mutex_);
  // Folds a batch's measured duration into its bucket's learned cost (a grid bucket, run
  // successfully) and rebuilds what admission and the planner derive from the costs when they moved.
  void LearnFromBatch(const BucketShape& padded_shape, double spent_us) REQUIRES(mutex_);
  // Whether a request whose estimate misses its expiry, `left_us` away, is admitted anyway to
  // measure `bucket`.
  bool MayProbe(const BucketShape& bucket, int64_t left_us) const REQUIRES(mutex_);
  void LeaveQueue(const PendingRequest& request) REQUIRES(mutex_);
  // A request dropped from a batch, with the status it is answered and counted with.
  struct DoomedRequest {
    std::shared_ptr<PendingRequest> request;
    Status outcome;
  };
  // Removes from `decision` the requests that would be answered after their deadline or queue
  // timeout if the batch ended at `finish_us`, and counts them: under overload the oldest requests
  // are the ones batched, and running them late would spend the device on answers nobody takes.
  // One whose client has already cancelled (before its deadline, at `now_us`) is CANCELLED, as a
  // cancelled request taken from the queue is; the others DEADLINE_EXCEEDED.
  std::vector<DoomedRequest> TakeDoomed(DispatchDecision* decision, int64_t now_us, double finish_us)
      REQUIRES(mutex_);
  // Counts the requests TakeDead removed, each with the status it is answered with.
  std::vector<DoomedRequest> CountDead(std::vector<std::shared_ptr<PendingRequest>> dead, int64_t now_us)
      REQUIRES(mutex_);
  // Answers them on the answering threads: under overload requests expire by the thousand a second,
  // and answering each on a worker would keep its executor waiting for the next batch.
  void AnswerDoomed(std::vector<DoomedRequest> doomed, int64_t now_us);

  // WorkerLoop's steps. A worker's own state (Worker) is touched by its thread only.
  struct Worker;
  // What PlanBatch took from the queue: a batch to launch (empty when every request of it was
  // doomed) and the requests dropped from it.
  struct PlannedBatch {
    DispatchDecision decision;
    std::vector<DoomedRequest> doomed;
    double work_us = 0.0;     // the batch's requests' work_us summed
    bool backlogged = false;  // requests were left queued when it was taken
  };
  // Takes and counts the requests no batch could finish before their expiry, given `ahead_us` of
  // work already launched on this worker's executor.
  std::vector<DoomedRequest> TakeHopeless(int64_t now_us, double ahead_us) REQUIRES(mutex_);
  // The planner's next batch for this worker, with its doomed requests taken out; none when the
  // executor's pipeline is full or nothing is ready.
  std::optional<PlannedBatch> PlanBatch(Worker* worker, int64_t now_us, double ahead_us) REQUIRES(mutex_);
  // Answers the doomed, launches the batch and, with the pipeline full, completes the oldest one.
  void RunPlannedBatch(Worker* worker, PlannedBatch planned, int64_t now_us) EXCLUDES(mutex_);
  void CompleteOldest(Worker* worker) EXCLUDES(mutex_);
  // A busy poll (options_.busy_poll_us): spin without the lock until `until` or until the queue
  // changes from `seen_changes` (queue_changes_).
  struct BusyPoll {
    std::chrono::steady_clock::time_point until;
    uint64_t seen_changes = 0;
  };
  // Once after each sleep, returns the busy poll to run; otherwise sleeps until the planner's next
  // wake-up or new work and returns none. `lock` holds mutex_ on entry and on return.
  std::optional<BusyPoll> WaitForWork(Worker* worker, int64_t now_us, MutexLock* lock) REQUIRES(mutex_);
  void SpinWhileQueueUnchanged(const BusyPoll& poll) const;
  // The executor's and the requests' work runs without the lock, so that Enqueue never waits for it.
  std::unique_ptr<InFlightBatch> LaunchBatch(Executor* executor, DispatchDecision decision)
      EXCLUDES(mutex_);
  // Waits for the batch and answers each of its requests exactly once. `launched_after` holds the
  // batches launched on the executor after it (completed first when the batch's failure needs reruns);
  // `last_end_us`, when the executor's previous batch ended, is advanced to this one's end.
  void CompleteBatch(Executor* executor, std::unique_ptr<InFlightBatch> run,
                     std::deque<std::unique_ptr<InFlightBatch>>* launched_after, int64_t* last_end_us)
      EXCLUDES(mutex_);
  void RecordBatch(Executor* executor, const InFlightBatch& run, int64_t end_us);
  // Reruns the requests of a failed batch in halves, on this worker, until each failure is pinned on
  // the requests that fail alone; the others get their outputs. Fills `statuses` and `outputs`.
  void IsolateFailures(Executor* executor, const BucketShape& padded_shape,
                       const std::vector<std::shared_ptr<PendingRequest>>& requests,
                       std::vector<Status>* statuses, BatchOutputs* outputs) EXCLUDES(mutex_);
  // What a client is told of an execution failure numbered `error_id`, `logged` or suppressed.
  Status ForClient(const Status& failure, uint64_t error_id, bool logged) const;

  const ModelSpec spec_;
  const SchedulerOptions options_;
  const Clock* const clock_;
  std::vector<std::unique_ptr<Executor>> executors_;
  const BucketCosts costs_;
  // Per executor: whether an earlier instance runs on the same device (see WorkerLoop); with any,
  // WakeAnIdleWorker wakes them all.
  const std::vector<bool> shares_device_;
  const bool device_shared_;
  std::vector<std::thread> workers_;
  // Runs the `done` callbacks of executed requests, off the workers (see CallbackPool).
  CallbackPool answering_;
  ModelStatisticsRecorder statistics_;
  // Numbers execution failures in the log, so that a client's error message can point at its entry.
  std::atomic<uint64_t> next_error_id_{0};

  mutable Mutex mutex_;
  std::condition_variable work_available_;
  // Seeded by costs_, corrected by every batch that ran on a grid bucket; the planner, row_costs_us_,
  // token_cost_us_ and cheapest_batch_us_ follow it.
  LearnedBucketCosts learned_ GUARDED_BY(mutex_);
  // (bucket length, fewest µs per row over that length's batch sizes), by length.
  std::vector<std::pair<int64_t, double>> row_costs_us_ GUARDED_BY(mutex_);
  // A ragged model's: the cheapest device time per token (EstimateWorkUs).
  double token_cost_us_ GUARDED_BY(mutex_);
  // The fastest bucket's time; 0 when none is known.
  double cheapest_batch_us_ GUARDED_BY(mutex_);
  // Batches launched and not yet completed, over all workers: with none and an empty queue the
  // scheduler is idle, and a probe (Enqueue) delays nobody.
  int batches_running_ GUARDED_BY(mutex_) = 0;
  // Probes (Enqueue) still queued: TakeHopeless then leaves the cheapest bucket's figure out.
  int probes_queued_ GUARDED_BY(mutex_) = 0;
  PriorityPlanner planner_ GUARDED_BY(mutex_);
  SchedulerCounters counters_ GUARDED_BY(mutex_);
  // Sum of the queued requests' work_us.
  double queued_work_us_ GUARDED_BY(mutex_) = 0.0;
  // What the device really spends per µs of estimated work (work_us counts full batches of the
  // request's own length; partial batches, padding and a busy host cost more), measured on batches
  // taken while others stayed queued, when the estimate matters. Admission scales by it.
  double work_scale_ GUARDED_BY(mutex_) = 1.0;
  // How much longer requests admitted behind queued work really waited than that work (scaled)
  // promised, at about the 95th percentile: batches still in flight, and bins the planner serves
  // before older requests of another length, are not in the estimate. Admission scales the work
  // queued ahead by it, so that what it admits ends within its share of the deadline; answers that
  // come late make clients cancel, and on one host their cancellations starve the server of calls.
  double wait_scale_ GUARDED_BY(mutex_) = 1.0;
  int idle_workers_ GUARDED_BY(mutex_) = 0;
  bool stopping_ GUARDED_BY(mutex_) = false;
  // Counts Enqueue, Poke and Stop, so that a worker polling without the lock (options_.busy_poll_us)
  // sees that the queue changed.
  std::atomic<uint64_t> queue_changes_{0};
};

}  // namespace graphserve
