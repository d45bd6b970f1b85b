// The dynamic batcher's threads (ModelScheduler); the policy it runs is BatchPlanner's
// (batch_planner.cpp says why it decides as it does).
//
// Threads: one worker per executor. Workers sleep on a condition variable until the planner's next
// wake-up (waited for through the injected Clock), an Enqueue, a Poke or Stop; with
// options.busy_poll_us an idle worker (not a second one on the same device) first spins that long,
// without the lock, on a counter of those events. Every `done` callback runs with the lock released.
#include "graphserve/server/batching/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "graphserve/server/observability/log_limiter.h"
#include "common/thread_name.h"

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

// For each bucket length, the cheapest device time per row among its batch sizes: a lower bound on
// what a queued row of that length costs however it is batched.
std::vector<std::pair<int64_t, double>> RowCosts(const BucketCosts& costs) {
  std::map<int64_t, double> best;
  for (const auto& [shape, cost_us] : costs) {
    if (shape.batch <= 0 || cost_us <= 0) continue;
    const double per_row = cost_us / static_cast<double>(shape.batch);
    auto [entry, inserted] = best.emplace(shape.length, per_row);
    if (!inserted) entry->second = std::min(entry->second, per_row);
  }
  return {best.begin(), best.end()};
}

// A ragged model's bucket (rows, tokens) costs by its tokens, and its rows share them: the cheapest
// device time per token over the grid, a lower bound on what a queued token costs.
double CheapestTokenUs(const BucketCosts& costs) {
  double cheapest = 0.0;
  for (const auto& [shape, cost_us] : costs) {
    if (shape.length <= 0 || cost_us <= 0) continue;
    const double per_token = cost_us / static_cast<double>(shape.length);
    if (cheapest == 0.0 || per_token < cheapest) cheapest = per_token;
  }
  return cheapest;
}

// The cheapest bucket's time: no batch ends sooner than this after it starts.
double CheapestBatchUs(const BucketCosts& costs) {
  double cheapest = 0.0;
  for (const auto& [shape, cost_us] : costs) {
    if (cost_us > 0 && (cheapest == 0.0 || cost_us < cheapest)) cheapest = cost_us;
  }
  return cheapest;
}

std::vector<bool> SharesDevice(const std::vector<std::unique_ptr<Executor>>& executors) {
  std::set<std::string> devices;
  std::vector<bool> shares;
  for (const auto& executor : executors) shares.push_back(!devices.insert(executor->device()).second);
  return shares;
}

// When a batch finished, as model statistics record it (Triton's last_inference).
uint64_t MillisecondsSinceEpoch() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count());
}

}  // namespace

ModelScheduler::ModelScheduler(const ModelSpec& spec, const SchedulerOptions& options,
                               std::vector<std::unique_ptr<Executor>> executors, const Clock* clock)
    : spec_(spec),
      options_(options),
      clock_(clock),
      executors_(std::move(executors)),
      costs_(CostsOf(executors_)),
      shares_device_(SharesDevice(executors_)),
      device_shared_(std::find(shares_device_.begin(), shares_device_.end(), true) != shares_device_.end()),
      answering_(CallbackPool::DefaultThreads()),
      learned_(costs_),
      row_costs_us_(RowCosts(learned_.Costs())),
      token_cost_us_(CheapestTokenUs(learned_.Costs())),
      cheapest_batch_us_(CheapestBatchUs(learned_.Costs())),
      planner_(spec, options, learned_.Costs()) {}

ModelScheduler::~ModelScheduler() { Stop(); }

void ModelScheduler::Start() {
  MutexLock lock(&mutex_);
  if (stopping_ || !workers_.empty()) return;
  for (size_t i = 0; i < executors_.size(); ++i) {
    workers_.emplace_back([this, e = executors_[i].get(), shares_device = shares_device_[i]] {
      NameThisThread("gs-batch");
      WorkerLoop(e, shares_device);
    });
  }
}

void ModelScheduler::Stop() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
    queue_changes_.fetch_add(1, std::memory_order_release);
  }
  work_available_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  // Joined workers leave the queue empty. Without workers (never started) the caller drains it, so
  // that every accepted request is still answered exactly once.
  if (workers_.empty() && !executors_.empty()) {
    WorkerLoop(executors_.front().get(), /*shares_device=*/false);
  }
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
    const int64_t now_us = clock_->NowMicros();
    request->enqueue_us = now_us;
    request->queue_timeout_us = options_.queue_policy.TimeoutFor(request->timeout_override_us);
    request->work_us = EstimateWorkUs(*request);
    const int64_t expiry_us = request->ExpiryUs();
    if (expiry_us != 0) {
      // Every instance busy on the queue at full batches, none running yet, scaled by what batches
      // really took; then the request's own batch, no shorter than its smallest bucket takes (a
      // full batch of its length would overstate it at low load: on a staircase grid that is
      // hundreds of rows). The bucket times are the learnt ones, and the scales are measured at
      // about the 95th percentile: a request is refused only when the estimate itself ends after
      // its expiry, never to keep headroom, so that a refusal says something true.
      // A ragged model's bucket is found by the request's tokens (ItemExtent), a padded one's by its length.
      const BucketShape own_bucket =
          spec_.BucketFor(request->item.rows, spec_.ItemExtent(request->item.rows, request->item.length));
      const double ahead_us = queued_work_us_ * work_scale_ / static_cast<double>(executors_.size());
      const double own_us =
          request->work_us > 0 ? std::max(request->work_us * work_scale_, planner_.CostUs(own_bucket)) : 0.0;
      const double end_in_us = ahead_us * wait_scale_ + own_us;
      const int64_t left_us = expiry_us - now_us;
      if (end_in_us > static_cast<double>(left_us)) {
        if (!MayProbe(own_bucket, left_us)) {
          ++counters_.rejected_deadline;
          return Status(StatusCode::kDeadlineExceeded,
                        "model '" + spec_.name + "': the request's deadline or queue timeout (in " +
                            std::to_string(left_us) + " us) cannot be met: it would end in about " +
                            std::to_string(static_cast<int64_t>(end_in_us)) + " us (" +
                            std::to_string(static_cast<int64_t>(ahead_us * wait_scale_)) +
                            " us of work queued ahead, " + std::to_string(static_cast<int64_t>(own_us)) +
                            " us for its own batch)");
        }
        request->probe = true;
        ++counters_.probes;
        ++probes_queued_;
      }
      // Only a wait behind work at least a batch long says how good the estimate of that work is.
      if (own_us > 0 && ahead_us >= own_us) {
        request->admitted_ahead_us = ahead_us;
        request->admitted_own_us = own_us;
      }
    }
    queued_work_us_ += request->work_us;
    planner_.Add(std::move(request));
    ++counters_.accepted;
    queue_changes_.fetch_add(1, std::memory_order_release);
    // A busy worker looks at the queue again when its batch is done; only a sleeping one needs a
    // nudge.
    wake = idle_workers_ > 0;
  }
  if (wake) WakeAnIdleWorker();
  return Status::Ok();
}

void ModelScheduler::WakeAnIdleWorker() {
  if (device_shared_) {
    work_available_.notify_all();
  } else {
    work_available_.notify_one();
  }
}

void ModelScheduler::Poke() {
  {
    // Under the lock, so that the worker that next takes it sees the cancelled flag set before this
    // call, and so that the wake-up cannot fall between a worker's check and its wait.
    MutexLock lock(&mutex_);
    planner_.NoteCancellation();
    queue_changes_.fetch_add(1, std::memory_order_release);
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
  snapshot.max_batch_tokens = spec_.max_batch_tokens;
  {
    MutexLock lock(&mutex_);
    snapshot.counters = counters_;
    snapshot.queue_depth = planner_.queued_requests();
    snapshot.work_scale = work_scale_;
    snapshot.wait_scale = wait_scale_;
    snapshot.learned_costs = learned_.Costs();
  }
  // Outside the lock: each executor counts under its own, and a scrape must not hold up the workers.
  snapshot.executors.reserve(executors_.size());
  for (const auto& executor : executors_) {
    ExecutorSnapshot& figures = snapshot.executors.emplace_back();
    figures.device = executor->device();
    figures.executed = executor->Counters();
    for (const BucketInfo& bucket : executor->Buckets()) {
      if (bucket.graph) figures.graph_buckets.push_back(bucket.shape);
      if (bucket.execute_time_us > 0) figures.bucket_execute_us[bucket.shape] = bucket.execute_time_us;
    }
    figures.capture = executor->capture_summary();
  }
  return snapshot;
}

// A batch handed to an executor's Launch and not yet answered.
struct ModelScheduler::InFlightBatch {
  DispatchDecision decision;
  double work_us = 0.0;     // its requests' work_us summed
  bool backlogged = false;  // requests were left queued when it was taken
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

void ModelScheduler::CompleteBatch(Executor* executor, std::unique_ptr<InFlightBatch> run,
                                   std::deque<std::unique_ptr<InFlightBatch>>* launched_after,
                                   int64_t* last_end_us) {
  const DispatchDecision& decision = run->decision;
  BatchOutputs outputs;
  Status status = run->launch_status;
  if (status.ok()) status = executor->Complete(std::move(run->launched), &outputs);
  const int64_t end_us = clock_->NowMicros();
  // Back to back, the time between two batches' ends is what the second cost the device.
  const double spent_us = static_cast<double>(end_us - std::max(run->start_us, *last_end_us));
  {
    // One lock for both: this runs once per batch, tens of thousands a second on a GPU.
    MutexLock lock(&mutex_);
    --batches_running_;
    if (status.ok()) LearnFromBatch(decision.padded_shape, spent_us);
    if (status.ok() && run->backlogged && run->work_us > 0) CalibrateWorkScale(spent_us / run->work_us);
  }
  *last_end_us = std::max(*last_end_us, end_us);
  if (status.ok() && outputs.size() != decision.requests.size()) {
    status = Internal("model '" + spec_.name + "': executor returned " +
                      std::to_string(outputs.size()) + " results for a batch of " +
                      std::to_string(decision.requests.size()) + " requests");
  }
  // One status per request: a failed batch is rerun in smaller groups so that only the requests
  // that fail alone are answered with the failure.
  std::vector<Status> statuses(decision.requests.size(), status);
  if (status.ok()) {
    RecordBatch(executor, *run, end_us);
    CalibrateWaitScale(decision.requests, end_us);
  } else {
    const uint64_t error_id = next_error_id_.fetch_add(1) + 1;
    // Rate-limited: clients choose the inputs that fail, and the engine's message can be long.
    const bool logged =
        LogLimited(LogKind::kBatchFailure, spec_.name, spdlog::level::err,
                   "model '{}' on {}: batch of {} requests padded to {} failed (error {}): {}", spec_.name,
                   executor->device(), decision.requests.size(), spec_.BucketLabel(decision.padded_shape),
                   error_id, status.ToString());
    outputs.assign(decision.requests.size(), {});
    if (decision.requests.size() > 1) {
      // The reruns need the executor to themselves: batches launched after this one complete first
      // (an executor completes in launch order and reuses their staging).
      while (!launched_after->empty()) {
        std::unique_ptr<InFlightBatch> next = std::move(launched_after->front());
        launched_after->pop_front();
        CompleteBatch(executor, std::move(next), launched_after, last_end_us);
      }
      IsolateFailures(executor, decision.padded_shape, decision.requests, &statuses, &outputs);
    } else {
      statuses[0] = ForClient(status, error_id, logged);
    }
  }

  // Answered on the answering threads, one task per request, so that encoding large responses
  // runs in parallel and the worker is free to launch the next batch.
  struct Answers {
    std::unique_ptr<InFlightBatch> run;
    std::vector<Status> statuses;
    BatchOutputs outputs;
    int64_t end_us;
  };
  auto answers =
      std::make_shared<Answers>(Answers{std::move(run), std::move(statuses), std::move(outputs), end_us});
  const auto answer = [](Answers* answers, size_t i) {
    const auto& request = answers->run->decision.requests[i];
    RequestTiming timing;
    timing.queue_us = answers->run->start_us - request->enqueue_us;
    timing.compute_us = answers->end_us - answers->run->start_us;
    timing.padded_shape = answers->run->decision.padded_shape;
    timing.stages = answers->run->stage_times;
    timing.enqueue_us = request->enqueue_us;
    timing.batch_start_us = answers->run->start_us;
    timing.batch_end_us = answers->end_us;
    std::vector<HostTensor> own =
        answers->statuses[i].ok() ? std::move(answers->outputs[i]) : std::vector<HostTensor>{};
    request->done(answers->statuses[i], std::move(own), timing);
  };
  const size_t count = answers->run->decision.requests.size();
  if (count == 1) {
    // A lone request is answered here: handing it to an answering thread would add that thread's
    // wake-up to its latency, and at the low load that forms batches of one there is seldom a
    // next batch waiting for this worker.
    answer(answers.get(), 0);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    answering_.Post([answers, i, answer] { answer(answers.get(), i); });
  }
}

void ModelScheduler::RecordBatch(Executor* executor, const InFlightBatch& run, int64_t end_us) {
  const DispatchDecision& decision = run.decision;
  int64_t batch_rows = 0;
  for (const auto& request : decision.requests) batch_rows += request->item.rows;
  statistics_.RecordExecution(batch_rows, run.stage_times, MillisecondsSinceEpoch());
  // Checked first: the arguments cost a few allocations per batch, at tens of thousands a second.
  if (spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("model '{}' on {}: batch requests={} (ride-alongs {}) padded to {} ran in {} us",
                  spec_.name, executor->device(), decision.requests.size(), decision.ride_alongs,
                  spec_.BucketLabel(decision.padded_shape), end_us - run.start_us);
  }
}

Status ModelScheduler::ForClient(const Status& failure, uint64_t error_id, bool logged) const {
  // The engine's message can hold the model's TorchScript source and host paths: it stays in the
  // log, and the client gets the code and an id to find it there.
  const std::string reference =
      " (error " + std::to_string(error_id) +
      (logged ? " in the server log)" : "; not in the server log, which rate-limits failures alike)");
  if (failure.code() == StatusCode::kInvalidArgument) {
    return InvalidArgument("model '" + spec_.name + "' rejected this request's input values" + reference);
  }
  return Internal("model '" + spec_.name + "' failed to run this request" + reference);
}

void ModelScheduler::IsolateFailures(Executor* executor, const BucketShape& padded_shape,
                                     const std::vector<std::shared_ptr<PendingRequest>>& requests,
                                     std::vector<Status>* statuses, BatchOutputs* outputs) {
  // Halving finds one culprit in about 2·log2(n) reruns, and each culprit found earns that many
  // more, so that several bad requests in one batch cost their batch mates nothing. What fails
  // everything (a faulted device, a model that fails every input) would take 2n reruns: once the
  // first culprit is found without any rerun having passed (every range tried held a failure: all
  // fail, or nearly), what is left fails together.
  int per_culprit = 2;
  for (size_t n = requests.size(); n > 1; n /= 2) per_culprit += 2;
  int reruns_left = 8 + per_culprit;
  size_t culprits = 0;
  size_t passes = 0;
  // Ranges [begin, end) known to hold a failure: either they failed when run, or their sibling
  // passed (a failure follows a request, not its batch mates). `ran` says whether this range failed
  // as run: one request is blamed only after failing alone.
  struct Failing {
    size_t begin, end;
    bool ran;
  };
  std::vector<Failing> failing{{0, requests.size(), true}};
  // Runs [begin, end) as one batch; their statuses and outputs take its outcome.
  const auto rerun = [&](size_t begin, size_t end) {
    --reruns_left;
    Batch part;
    part.padded_shape = padded_shape;  // fewer rows than the bucket holds is an ordinary batch
    int64_t rows = 0;
    for (size_t i = begin; i < end; ++i) {
      part.items.push_back(&requests[i]->item);
      rows += requests[i]->item.rows;
    }
    BatchStageTimes stages;
    part.stage_times = &stages;
    std::unique_ptr<LaunchedBatch> launched;
    BatchOutputs part_outputs;
    Status status = executor->Launch(part, &launched);
    if (status.ok()) status = executor->Complete(std::move(launched), &part_outputs);
    if (status.ok() && part_outputs.size() != end - begin) {
      status = Internal("executor returned " + std::to_string(part_outputs.size()) + " results for " +
                        std::to_string(end - begin) + " requests");
    }
    for (size_t i = begin; i < end; ++i) {
      (*statuses)[i] = status;
      if (status.ok()) (*outputs)[i] = std::move(part_outputs[i - begin]);
    }
    if (status.ok()) {
      // An execution like any other: its requests count as answered in the statistics, so it does.
      ++passes;
      statistics_.RecordExecution(rows, stages, MillisecondsSinceEpoch());
    }
    return status.ok();
  };
  const auto fail = [&](size_t begin, size_t end, const char* how) {
    const uint64_t error_id = next_error_id_.fetch_add(1) + 1;
    const bool logged = LogLimited(LogKind::kBatchFailure, spec_.name, spdlog::level::err,
                                   "model '{}' on {}: {} request(s) fail{} (error {}): {}", spec_.name,
                                   executor->device(), end - begin, how, error_id, (*statuses)[begin].ToString());
    for (size_t i = begin; i < end; ++i) (*statuses)[i] = ForClient((*statuses)[i], error_id, logged);
  };
  while (!failing.empty()) {
    const Failing group = failing.back();
    failing.pop_back();
    if (group.end - group.begin == 1 && group.ran) {
      fail(group.begin, group.end, "s alone");
      ++culprits;
      reruns_left += per_culprit;
      continue;
    }
    if (reruns_left <= 0 || (culprits > 0 && passes == 0)) {
      fail(group.begin, group.end, " together, reruns stopped");
      continue;
    }
    if (group.end - group.begin == 1) {  // inferred: its failure is confirmed alone, or it passes
      if (!rerun(group.begin, group.end)) failing.push_back({group.begin, group.end, true});
      continue;
    }
    const size_t middle = group.begin + (group.end - group.begin) / 2;
    if (rerun(group.begin, middle)) {
      failing.push_back({middle, group.end, false});
    } else {
      failing.push_back({group.begin, middle, true});
      if (!rerun(middle, group.end)) failing.push_back({middle, group.end, true});
    }
  }
}

std::vector<ModelScheduler::DoomedRequest> ModelScheduler::CountDead(
    std::vector<std::shared_ptr<PendingRequest>> dead, int64_t now_us) {
  std::vector<Status> outcomes;
  outcomes.reserve(dead.size());
  for (const auto& request : dead) {
    LeaveQueue(*request);
    const std::string waited = std::to_string(now_us - request->enqueue_us) + " us in queue";
    const ClientFate fate = request->ClientFateAt(now_us);
    if (fate == ClientFate::kDeadlineExpired) {
      outcomes.emplace_back(StatusCode::kDeadlineExceeded,
                            "request deadline expired after " + waited);
    } else if (fate == ClientFate::kCancelled) {
      outcomes.emplace_back(StatusCode::kCancelled, "request cancelled while queued");
    } else if (request->ExpiryUs() > now_us) {
      // Taken before its expiry: no batch could end in time (see WorkerLoop).
      outcomes.emplace_back(StatusCode::kDeadlineExceeded,
                            "model '" + spec_.name + "': the request could not finish before its deadline "
                            "or queue timeout after " + waited + "; not run");
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
  std::vector<DoomedRequest> doomed;
  doomed.reserve(dead.size());
  for (size_t i = 0; i < dead.size(); ++i) doomed.push_back({std::move(dead[i]), std::move(outcomes[i])});
  return doomed;
}

Status SettleWithClient(const Status& outcome, const PendingRequest& request, int64_t now_us) {
  if (!outcome.ok() && outcome.code() != StatusCode::kCancelled) return outcome;
  switch (request.ClientFateAt(now_us)) {
    case ClientFate::kDeadlineExpired:
      return Status(StatusCode::kDeadlineExceeded, "request deadline expired before its answer");
    case ClientFate::kCancelled:
      return outcome.ok() ? Status(StatusCode::kCancelled, "request cancelled before its answer") : outcome;
    case ClientFate::kWaiting:
      break;
  }
  return outcome;
}

std::vector<ModelScheduler::DoomedRequest> ModelScheduler::TakeDoomed(DispatchDecision* decision,
                                                                     int64_t now_us, double finish_us) {
  std::vector<DoomedRequest> doomed;
  auto& requests = decision->requests;
  // A probe runs whatever the estimate says: the estimate is what it is there to check.
  const auto in_time = [finish_us](const std::shared_ptr<PendingRequest>& request) {
    const int64_t expiry_us = request->ExpiryUs();
    return expiry_us == 0 || request->probe || static_cast<double>(expiry_us) >= finish_us;
  };
  // Ride-alongs come last in a decision (batch_planner.h): those dropped no longer ride.
  for (size_t i = requests.size() - static_cast<size_t>(decision->ride_alongs); i < requests.size(); ++i) {
    if (!in_time(requests[i])) --decision->ride_alongs;
  }
  auto kept_end = std::stable_partition(requests.begin(), requests.end(), in_time);
  for (auto it = kept_end; it != requests.end(); ++it) {
    LeaveQueue(**it);
    const PendingRequest& request = **it;
    // Dropped because it could not finish in time, unless its client had gone before its deadline.
    if (request.ClientFateAt(now_us) == ClientFate::kCancelled) {
      ++counters_.cancelled;
      doomed.push_back({std::move(*it), Status(StatusCode::kCancelled, "request cancelled while queued")});
    } else {
      ++counters_.deadline_exceeded;
      doomed.push_back({std::move(*it), Status(StatusCode::kDeadlineExceeded,
                                               "model '" + spec_.name +
                                                   "': the request would finish after its deadline or "
                                                   "queue timeout; not run")});
    }
  }
  requests.erase(kept_end, requests.end());
  return doomed;
}

void ModelScheduler::AnswerDoomed(std::vector<DoomedRequest> doomed, int64_t now_us) {
  for (DoomedRequest& dropped : doomed) {
    answering_.Post([dropped = std::move(dropped), now_us] {
      RequestTiming timing;
      timing.queue_us = now_us - dropped.request->enqueue_us;
      timing.enqueue_us = dropped.request->enqueue_us;
      dropped.request->done(dropped.outcome, {}, timing);
    });
  }
}

void ModelScheduler::CalibrateWorkScale(double sample) {
  // Smoothed over about ten batches: quick enough to follow a change of mix within a fraction of a
  // deadline, slow enough that one odd batch does not swing admission.
  constexpr double kSmoothing = 0.1;
  constexpr double kMinScale = 0.5;
  constexpr double kMaxScale = 50.0;
  work_scale_ = std::clamp(work_scale_ + kSmoothing * (sample - work_scale_), kMinScale, kMaxScale);
}

void ModelScheduler::CalibrateWaitScale(const std::vector<std::shared_ptr<PendingRequest>>& requests,
                                        int64_t end_us) {
  // A streaming 95th percentile, one step per batch: the scale rises by the share of the batch's
  // requests that waited longer than it allows, beyond the 5% that may, and falls otherwise. A
  // batch's requests waited alike, so a step per request would overshoot. A batch with no request
  // admitted behind a queue counts as one whose requests kept within the scale: a high scale keeps
  // the queue short, and would otherwise never be measured again.
  constexpr double kQuantile = 0.95;
  constexpr double kStep = 0.5;
  constexpr double kMinScale = 1.0;
  constexpr double kMaxScale = 4.0;
  MutexLock lock(&mutex_);
  int measured = 0;
  int over = 0;
  for (const auto& request : requests) {
    if (request->admitted_ahead_us <= 0) continue;
    const double waited_us = static_cast<double>(end_us - request->enqueue_us) - request->admitted_own_us;
    ++measured;
    if (waited_us > request->admitted_ahead_us * wait_scale_) ++over;
  }
  const double over_share = measured == 0 ? 0.0 : static_cast<double>(over) / measured;
  wait_scale_ = std::clamp(wait_scale_ * std::exp(kStep * (over_share - (1.0 - kQuantile))), kMinScale, kMaxScale);
}

void ModelScheduler::LearnFromBatch(const BucketShape& padded_shape, double spent_us) {
  // Off-grid batches (oversize, exact lengths) have no bucket of their own to correct.
  if (!spec_.HasBucket(padded_shape)) return;
  if (!learned_.Observe(padded_shape, spent_us)) return;
  const BucketCosts& costs = learned_.Costs();
  planner_.SetCosts(costs);
  row_costs_us_ = RowCosts(costs);
  token_cost_us_ = CheapestTokenUs(costs);
  cheapest_batch_us_ = CheapestBatchUs(costs);
}

bool ModelScheduler::MayProbe(const BucketShape& bucket, int64_t left_us) const {
  // Only on an idle scheduler (the probe delays no one), and only while the bucket's figure is not
  // settled: a figure confirmed by replays is trusted, so a deadline it cannot meet is refused. An
  // expired request is no probe: it cannot be answered in time whatever it costs.
  return spec_.HasBucket(bucket) && left_us > 0 && batches_running_ == 0 && planner_.queued_requests() == 0 &&
         !learned_.Settled(bucket);
}

double ModelScheduler::EstimateWorkUs(const PendingRequest& request) const {
  // A ragged request's rows share a bucket's tokens with the others': its tokens are its work.
  if (spec_.ragged) return token_cost_us_ * static_cast<double>(request.item.rows * request.item.length);
  const auto bucket = std::lower_bound(
      row_costs_us_.begin(), row_costs_us_.end(), request.item.length,
      [](const std::pair<int64_t, double>& entry, int64_t length) { return entry.first < length; });
  if (bucket == row_costs_us_.end()) return 0.0;
  return bucket->second * static_cast<double>(request.item.rows);
}

void ModelScheduler::LeaveQueue(const PendingRequest& request) {
  if (request.probe) --probes_queued_;
  queued_work_us_ -= request.work_us;
  // Sums of doubles drift: an empty queue holds no work.
  if (planner_.queued_requests() == 0 || queued_work_us_ < 0) queued_work_us_ = 0;
}

double ModelScheduler::CountDispatched(const DispatchDecision& decision) {
  double work_us = 0.0;
  for (const auto& request : decision.requests) {
    LeaveQueue(*request);
    work_us += request->work_us;
  }
  ++counters_.batches;
  counters_.ride_alongs += static_cast<uint64_t>(decision.ride_alongs);
  for (const auto& request : decision.requests) counters_.batch_rows += request->item.rows;
  return work_us;
}

struct ModelScheduler::Worker {
  Executor* const executor;
  const bool shares_device;
  const size_t depth;  // the executor's pipeline depth: batches launched at most
  // Launched and not yet completed, oldest first; at most `depth`.
  std::deque<std::unique_ptr<InFlightBatch>> in_flight;
  int64_t last_end_us = 0;  // when this executor's latest batch ended
  // Whether the worker busy-polled since it last slept: it polls once, then sleeps.
  bool polled = false;
};

void ModelScheduler::WorkerLoop(Executor* executor, bool shares_device) {
  Worker worker{executor, shares_device, static_cast<size_t>(std::max(executor->pipeline_depth(), 1))};
  MutexLock lock(&mutex_);
  while (true) {
    const int64_t now_us = clock_->NowMicros();
    // The device time already promised on this executor: batches launched and not yet answered.
    double ahead_us = 0.0;
    for (const auto& launched : worker.in_flight) ahead_us += planner_.CostUs(launched->decision.padded_shape);

    std::vector<DoomedRequest> hopeless = TakeHopeless(now_us, ahead_us);
    if (!hopeless.empty()) {
      lock.Unlock();
      AnswerDoomed(std::move(hopeless), now_us);
      lock.Lock();
      continue;
    }
    std::optional<PlannedBatch> planned = PlanBatch(&worker, now_us, ahead_us);
    if (planned) {
      lock.Unlock();
      RunPlannedBatch(&worker, std::move(*planned), now_us);
      lock.Lock();
      continue;
    }
    if (!worker.in_flight.empty()) {
      // Nothing is ready to overlap with it: answer the batch in flight, then look again as an
      // idle executor.
      worker.polled = false;
      lock.Unlock();
      CompleteOldest(&worker);
      lock.Lock();
      continue;
    }
    // Stopping makes every queued request dispatchable, so no decision means an empty queue.
    if (stopping_) return;
    if (std::optional<BusyPoll> poll = WaitForWork(&worker, now_us, &lock)) {
      lock.Unlock();
      SpinWhileQueueUnchanged(*poll);
      lock.Lock();
    }
  }
}

std::vector<ModelScheduler::DoomedRequest> ModelScheduler::TakeHopeless(int64_t now_us, double ahead_us) {
  // A request that no batch could finish before its expiry leaves now, before planning, so that
  // under overload batches fill with requests that can still make it rather than shrink when the
  // doomed are taken out of them. With several instances another may be idle: only the cheapest
  // batch is then certain to come first.
  // While a probe waits, the cheapest bucket's figure may be the poisoned one it is there to check
  // (every bucket can be): only the work already launched counts then.
  const double cheapest_us = probes_queued_ > 0 ? 0.0 : cheapest_batch_us_;
  const double hopeless_us = cheapest_us + (executors_.size() == 1 ? ahead_us : 0.0);
  std::vector<std::shared_ptr<PendingRequest>> dead = planner_.TakeDead(now_us + static_cast<int64_t>(hopeless_us));
  if (dead.empty()) return {};
  return CountDead(std::move(dead), now_us);
}

std::optional<ModelScheduler::PlannedBatch> ModelScheduler::PlanBatch(Worker* worker, int64_t now_us,
                                                                      double ahead_us) {
  // With a batch in flight the executor is busy: the planner then offers only batches that are
  // ready anyway (full or due), so that a batch still worth waiting for keeps waiting.
  if (worker->in_flight.size() >= worker->depth) return std::nullopt;
  std::optional<DispatchDecision> decision =
      planner_.Next(stopping_ ? BatchPlanner::kEndOfTime : now_us,
                    /*executor_idle=*/worker->in_flight.empty() && !worker->shares_device);
  if (!decision) return std::nullopt;
  PlannedBatch planned;
  planned.doomed = TakeDoomed(&*decision, now_us, now_us + ahead_us + planner_.CostUs(decision->padded_shape));
  if (!decision->requests.empty()) {
    worker->polled = false;
    planned.work_us = CountDispatched(*decision);
    ++batches_running_;
    planned.backlogged = planner_.queued_requests() > 0;
    // Work may remain that another sleeping worker could take right away.
    if (planned.backlogged && idle_workers_ > 0) WakeAnIdleWorker();
    planned.decision = std::move(*decision);
  }
  return planned;
}

void ModelScheduler::RunPlannedBatch(Worker* worker, PlannedBatch planned, int64_t now_us) {
  if (!planned.doomed.empty()) AnswerDoomed(std::move(planned.doomed), now_us);
  if (planned.decision.requests.empty()) return;  // every request of it was doomed
  // The new batch is assembled and queued on the device while the one before it still runs; only
  // then is the older one waited for and answered.
  worker->in_flight.push_back(LaunchBatch(worker->executor, std::move(planned.decision)));
  worker->in_flight.back()->work_us = planned.work_us;
  worker->in_flight.back()->backlogged = planned.backlogged;
  if (worker->in_flight.size() >= worker->depth) CompleteOldest(worker);
}

void ModelScheduler::CompleteOldest(Worker* worker) {
  std::unique_ptr<InFlightBatch> oldest = std::move(worker->in_flight.front());
  worker->in_flight.pop_front();
  CompleteBatch(worker->executor, std::move(oldest), &worker->in_flight, &worker->last_end_us);
}

std::optional<ModelScheduler::BusyPoll> ModelScheduler::WaitForWork(Worker* worker, int64_t now_us,
                                                                    MutexLock* lock) {
  const std::optional<int64_t> wake_us = planner_.NextWakeUp(now_us, /*executor_idle=*/!worker->shares_device);
  // Polling saves the wake-up of a worker that takes a lone request at once. A second instance on
  // the same device never does (it takes only full or due batches, for which a wake-up costs little
  // beside the wait), so it sleeps rather than spin a core beside the instance that runs them.
  if (options_.busy_poll_us > 0 && !worker->polled && !worker->shares_device) {
    worker->polled = true;
    ++counters_.busy_polls;
    // Real time, not clock_: the poll spins this thread, whatever clock the planner runs on.
    const int64_t poll_us = wake_us ? std::min(options_.busy_poll_us, *wake_us - now_us) : options_.busy_poll_us;
    return BusyPoll{std::chrono::steady_clock::now() + std::chrono::microseconds(poll_us),
                    queue_changes_.load(std::memory_order_acquire)};
  }
  ++idle_workers_;
  if (wake_us) {
    // Through the clock that set the wake-up time, so that a test's clock decides when it comes.
    clock_->WaitUntil(work_available_, lock->native(), *wake_us);
  } else {
    lock->Wait(work_available_);
  }
  --idle_workers_;
  worker->polled = false;
  return std::nullopt;
}

void ModelScheduler::SpinWhileQueueUnchanged(const BusyPoll& poll) const {
  while (queue_changes_.load(std::memory_order_acquire) == poll.seen_changes &&
         std::chrono::steady_clock::now() < poll.until) {
  }
}

}  // namespace graphserve
