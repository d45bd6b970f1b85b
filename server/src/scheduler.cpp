// The dynamic batcher's threads (ModelScheduler); the policy it runs is BatchPlanner's
// (batch_planner.cpp says why it decides as it does).
//
// Threads: one worker per executor. Workers sleep on a condition variable until the planner's next
// wake-up (waited for through the injected Clock), an Enqueue, a Poke or Stop. Every `done`
// callback runs with the lock released.
#include "graphserve/server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

namespace graphserve {
namespace {

// The mean over the instances of each bucket's warm-up time (instances on different devices may
// differ; one scheduler feeds them all).
BucketCosts CostsOf(const std::vector<std::unique_ptr<Executor>>& executors) {
  std::map<BucketShape, std::pair<double, int>> sums;
  for (const auto& executor : executors) {
    for (const BucketInfo& bucket : executor->Buckets()) {
      if (bucket.execute_time_us <= 0) continue;
      sums[bucket.shape].first += bucket.execute_time_us;
      ++sums[bucket.shape].second;
    }
  }
  BucketCosts costs;
  for (const auto& [shape, sum] : sums) costs[shape] = sum.first / sum.second;
  return costs;
}

}  // namespace

ModelScheduler::ModelScheduler(const ModelSpec& spec, const SchedulerOptions& options,
                               std::vector<std::unique_ptr<Executor>> executors, const Clock* clock)
    : spec_(spec),
      options_(options),
      clock_(clock),
      executors_(std::move(executors)),
      costs_(CostsOf(executors_)),
      answering_(CallbackPool::DefaultThreads()),
      planner_(spec, options, costs_) {}

ModelScheduler::~ModelScheduler() { Stop(); }

void ModelScheduler::Start() {
  MutexLock lock(&mutex_);
  if (stopping_ || !workers_.empty()) return;
  for (const auto& executor : executors_) {
    workers_.emplace_back([this, e = executor.get()] { WorkerLoop(e); });
  }
}

void ModelScheduler::Stop() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  // Joined workers leave the queue empty. Without workers (never started) the caller drains it, so
  // that every accepted request is still answered exactly once.
  if (workers_.empty() && !executors_.empty()) WorkerLoop(executors_.front().get());
  workers_.clear();
  answering_.Drain();
}

Status ModelScheduler::Enqueue(std::shared_ptr<PendingRequest> request) {
  bool wake = false;
  {
    MutexLock lock(&mutex_);
    if (stopping_) return Unavailable("model '" + spec_.name + "' is shutting down");
    if (planner_.queued_requests() >= static_cast<size_t>(options_.max_queue_size)) {
      ++counters_.rejected_queue_full;
      return ResourceExhausted("model '" + spec_.name + "': queue is full (max_queue_size " +
                               std::to_string(options_.max_queue_size) + ")");
    }
    request->enqueue_us = clock_->NowMicros();
    request->queue_timeout_us = options_.queue_policy.TimeoutFor(request->timeout_override_us);
    planner_.Add(std::move(request));
    ++counters_.accepted;
    // A busy worker looks at the queue again when its batch is done; only a sleeping one needs a
    // nudge.
    wake = idle_workers_ > 0;
  }
  if (wake) work_available_.notify_one();
  return Status::Ok();
}

void ModelScheduler::Poke() {
  {
    // Under the lock, so that the worker that next takes it sees the cancelled flag set before this
    // call, and so that the wake-up cannot fall between a worker's check and its wait.
    MutexLock lock(&mutex_);
    planner_.NoteCancellation();
  }
  work_available_.notify_all();
}

SchedulerCounters ModelScheduler::Counters() const {
  MutexLock lock(&mutex_);
  return counters_;
}

size_t ModelScheduler::QueueDepth() const {
  MutexLock lock(&mutex_);
  return planner_.queued_requests();
}

SchedulerSnapshot ModelScheduler::Snapshot() const {
  SchedulerSnapshot snapshot;
  snapshot.model = spec_.name;
  snapshot.has_sequence_length = spec_.has_sequence_length();
  {
    MutexLock lock(&mutex_);
    snapshot.counters = counters_;
    snapshot.queue_depth = planner_.queued_requests();
  }
  // Outside the lock: each executor counts under its own, and a scrape must not hold up the workers.
  snapshot.executors.reserve(executors_.size());
  for (const auto& executor : executors_) {
    ExecutorSnapshot& figures = snapshot.executors.emplace_back();
    figures.device = executor->device();
    figures.executed = executor->Counters();
    for (const BucketInfo& bucket : executor->Buckets()) {
      if (bucket.graph) figures.graph_buckets.push_back(bucket.shape);
    }
    figures.capture = executor->capture_summary();
  }
  return snapshot;
}

void ModelScheduler::Finish(const std::shared_ptr<PendingRequest>& request, const Status& status) {
  RequestTiming timing;
  timing.queue_us = clock_->NowMicros() - request->enqueue_us;
  request->done(status, {}, timing);
}

// A batch handed to an executor's Launch and not yet answered.
struct ModelScheduler::InFlightBatch {
  DispatchDecision decision;
  Batch batch;
  BatchStageTimes stage_times;  // where the executor writes them (batch.stage_times)
  std::unique_ptr<LaunchedBatch> launched;
  Status launch_status;  // a failed Launch leaves nothing to complete
  int64_t start_us = 0;
};

std::unique_ptr<ModelScheduler::InFlightBatch> ModelScheduler::LaunchBatch(Executor* executor,
                                                                           DispatchDecision decision) {
  auto run = std::make_unique<InFlightBatch>();
  run->decision = std::move(decision);
  run->batch.padded_shape = run->decision.padded_shape;
  run->batch.stage_times = &run->stage_times;
  run->batch.items.reserve(run->decision.requests.size());
  for (const auto& request : run->decision.requests) run->batch.items.push_back(&request->item);
  run->start_us = clock_->NowMicros();
  run->launch_status = executor->Launch(run->batch, &run->launched);
  return run;
}

void ModelScheduler::CompleteBatch(Executor* executor, std::unique_ptr<InFlightBatch> run) {
  const DispatchDecision& decision = run->decision;
  BatchOutputs outputs;
  Status status = run->launch_status;
  if (status.ok()) status = executor->Complete(std::move(run->launched), &outputs);
  const int64_t end_us = clock_->NowMicros();
  if (status.ok() && outputs.size() != decision.requests.size()) {
    status = Internal("model '" + spec_.name + "': executor returned " +
                      std::to_string(outputs.size()) + " results for a batch of " +
                      std::to_string(decision.requests.size()) + " requests");
  }
  if (status.ok()) {
    int64_t batch_rows = 0;
    for (const auto& request : decision.requests) batch_rows += request->item.rows;
    const auto finished = std::chrono::system_clock::now().time_since_epoch();
    statistics_.RecordExecution(
        batch_rows, run->stage_times,
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(finished).count()));
    // Checked first: the arguments cost a few allocations per batch, at tens of thousands a second.
    if (spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug(
          "model '{}' on {}: batch requests={} (ride-alongs {}) padded to {} ran in {} us",
          spec_.name, executor->device(), decision.requests.size(), decision.ride_alongs,
          spec_.BucketLabel(decision.padded_shape), end_us - run->start_us);
    }
  } else {
    spdlog::error("model '{}' on {}: batch of {} requests padded to {} failed: {}", spec_.name,
                  executor->device(), decision.requests.size(), spec_.BucketLabel(decision.padded_shape),
                  status.ToString());
  }

  // Answered on the answering threads, one task per request, so that encoding large responses
  // runs in parallel and the worker is free to launch the next batch.
  struct Answers {
    std::unique_ptr<InFlightBatch> run;
    Status status;
    BatchOutputs outputs;
    int64_t end_us;
  };
  auto answers = std::make_shared<Answers>(Answers{std::move(run), status, std::move(outputs), end_us});
  for (size_t i = 0; i < answers->run->decision.requests.size(); ++i) {
    answering_.Post([answers, i] {
      const auto& request = answers->run->decision.requests[i];
      RequestTiming timing;
      timing.queue_us = answers->run->start_us - request->enqueue_us;
      timing.compute_us = answers->end_us - answers->run->start_us;
      timing.padded_shape = answers->run->decision.padded_shape;
      timing.stages = answers->run->stage_times;
      std::vector<HostTensor> own =
          answers->status.ok() ? std::move(answers->outputs[i]) : std::vector<HostTensor>{};
      request->done(answers->status, std::move(own), timing);
    });
  }
}

std::vector<Status> ModelScheduler::CountDead(
    const std::vector<std::shared_ptr<PendingRequest>>& dead, int64_t now_us) {
  std::vector<Status> outcomes;
  outcomes.reserve(dead.size());
  for (const auto& request : dead) {
    const std::string waited = std::to_string(now_us - request->enqueue_us) + " us in queue";
    // The client's deadline first: a call gRPC cancelled at its deadline is an expired one.
    if (request->ClientDeadlinePassed(now_us)) {
      outcomes.emplace_back(StatusCode::kDeadlineExceeded,
                            "request deadline expired after " + waited);
    } else if (request->cancelled.load(std::memory_order_relaxed)) {
      outcomes.emplace_back(StatusCode::kCancelled, "request cancelled while queued");
    } else {
      // TakeDead hands back only cancelled and expired requests: this one's queue timeout ran out.
      const bool requested = request->timeout_override_us == request->queue_timeout_us;
      outcomes.emplace_back(
          StatusCode::kDeadlineExceeded,
          "model '" + spec_.name + "': queue timeout of " + std::to_string(request->queue_timeout_us) +
              " us (" + (requested ? "the request's parameters['timeout']" : "the model's default") +
              ") expired after " + waited);
    }
    if (outcomes.back().code() == StatusCode::kCancelled) {
      ++counters_.cancelled;
    } else {
      ++counters_.deadline_exceeded;
    }
  }
  return outcomes;
}

Status SettleWithClient(const Status& outcome, const PendingRequest& request, int64_t now_us) {
  if (!outcome.ok() && outcome.code() != StatusCode::kCancelled) return outcome;
  if (request.ClientDeadlinePassed(now_us)) {
    return Status(StatusCode::kDeadlineExceeded, "request deadline expired before its answer");
  }
  if (outcome.ok() && request.cancelled.load()) {
    return Status(StatusCode::kCancelled, "request cancelled before its answer");
  }
  return outcome;
}

void ModelScheduler::CountDispatched(const DispatchDecision& decision) {
  ++counters_.batches;
  counters_.ride_alongs += static_cast<uint64_t>(decision.ride_alongs);
  for (const auto& request : decision.requests) counters_.batch_rows += request->item.rows;
}

void ModelScheduler::WorkerLoop(Executor* executor) {
  const size_t depth = static_cast<size_t>(std::max(executor->pipeline_depth(), 1));
  // Launched and not yet completed, oldest first; at most `depth`.
  std::deque<std::unique_ptr<InFlightBatch>> in_flight;
  MutexLock lock(&mutex_);
  while (true) {
    const int64_t now_us = clock_->NowMicros();

    std::vector<std::shared_ptr<PendingRequest>> dead = planner_.TakeDead(now_us);
    if (!dead.empty()) {
      const std::vector<Status> outcomes = CountDead(dead, now_us);
      lock.Unlock();
      for (size_t i = 0; i < dead.size(); ++i) Finish(dead[i], outcomes[i]);
      lock.Lock();
      continue;
    }

    // With a batch in flight the executor is busy: the planner then offers only batches that are
    // ready anyway (full or due), so that a batch still worth waiting for keeps waiting.
    std::optional<DispatchDecision> decision;
    if (in_flight.size() < depth) {
      decision = planner_.Next(stopping_ ? BatchPlanner::kEndOfTime : now_us,
                               /*executor_idle=*/in_flight.empty());
    }
    if (decision) {
      CountDispatched(*decision);
      // Work may remain that another sleeping worker could take right away.
      if (planner_.queued_requests() > 0 && idle_workers_ > 0) work_available_.notify_one();
      lock.Unlock();
      // The new batch is assembled and queued on the device while the one before it still runs;
      // only then is the older one waited for and answered.
      in_flight.push_back(LaunchBatch(executor, std::move(*decision)));
      if (in_flight.size() >= depth) {
        CompleteBatch(executor, std::move(in_flight.front()));
        in_flight.pop_front();
      }
      lock.Lock();
      continue;
    }
    if (!in_flight.empty()) {
      // Nothing is ready to overlap with it: answer the batch in flight, then look again as an
      // idle executor.
      lock.Unlock();
      CompleteBatch(executor, std::move(in_flight.front()));
      in_flight.pop_front();
      lock.Lock();
      continue;
    }

    // Stopping makes every queued request dispatchable, so no decision means an empty queue.
    if (stopping_) return;

    ++idle_workers_;
    const std::optional<int64_t> wake_us = planner_.NextWakeUp(now_us, /*executor_idle=*/true);
    if (wake_us) {
      // Through the clock that set the wake-up time, so that a test's clock decides when it comes.
      clock_->WaitUntil(work_available_, lock.native(), *wake_us);
    } else {
      lock.Wait(work_available_);
    }
    --idle_workers_;
  }
}

}  // namespace graphserve
