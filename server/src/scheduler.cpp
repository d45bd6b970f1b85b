// The dynamic batcher.
//
// Batching policy (BatchPlanner::Next):
//   - Requests are binned by the smallest bucket length that holds their length; requests longer
//     than the largest bucket length share one oversize bin. Within a bin requests stay FIFO.
//   - A bin is dispatchable when
//       (a) its queued rows fill the largest batch bucket (waiting cannot make the batch larger),
//       (b) its oldest request has waited max_queue_delay_us or longer, or
//       (c) an executor is idle and waiting cannot help; for now that means max_queue_delay_us == 0
//           (which (b) already covers: kept as the seam where a later policy weighs the measured
//           bucket times against the expected arrivals).
//   - Among dispatchable bins the one whose oldest request is oldest goes first, so that a busy bin
//     cannot starve a quiet one.
//   - A batch takes requests from the front of the bin while their rows fit in the largest batch
//     size, stopping at the first that does not fit, so that a request is never overtaken within
//     its bin. The front request is always taken, even when it alone exceeds the largest batch size
//     (it cannot be split, so it runs alone as an oversize batch).
//   - The batch is padded to the smallest bucket holding its rows at the bin's length; an oversize
//     batch (too long or too many rows for the grid) is padded to its own rows × longest length.
//
// Threads (ModelScheduler): one worker per executor. Workers sleep on a condition variable until
// the planner's next wake-up (the earliest delay expiry or deadline), an Enqueue, a Poke or Stop.
// Every `done` callback runs with the lock released.
#include "graphserve/server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

namespace graphserve {
namespace {

// The longest max_queue_delay_us accepted: longer delays are configuration mistakes, not policies.
constexpr int64_t kMaxQueueDelayUs = 10'000'000;

// "Now" for a planner once the scheduler is stopping: every request's delay has run out, so every
// non-empty bin is dispatchable and the queue drains without waiting.
constexpr int64_t kEndOfTime = std::numeric_limits<int64_t>::max();

// The most rows one batch holds: the largest batch bucket.
int64_t LargestBatch(const ModelSpec& spec) {
  return spec.bucket_batch_sizes.empty() ? spec.max_batch_size : spec.bucket_batch_sizes.back();
}

}  // namespace

Status SchedulerOptions::Validate() const {
  if (max_queue_delay_us < 0 || max_queue_delay_us > kMaxQueueDelayUs) {
    return InvalidArgument(
        "dynamic_batching.max_queue_delay_microseconds: " + std::to_string(max_queue_delay_us) +
        " is out of range [0, " + std::to_string(kMaxQueueDelayUs) + "]");
  }
  if (max_queue_size < 1) {
    return InvalidArgument("dynamic_batching.max_queue_size: " + std::to_string(max_queue_size) +
                           " must be at least 1");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------------
// BatchPlanner

BatchPlanner::BatchPlanner(const ModelSpec& spec, const SchedulerOptions& options)
    : spec_(spec), options_(options) {
  for (int64_t length : spec_.bucket_lengths) {
    Bin bin;
    bin.length = length;
    bins_.push_back(std::move(bin));
  }
  // The oversize bin sorts last, so that "the first bin whose length holds the request" finds it.
  Bin oversize;
  oversize.length = kEndOfTime;
  bins_.push_back(std::move(oversize));
}

void BatchPlanner::Add(std::shared_ptr<PendingRequest> request) {
  const int64_t length = request->item.length;
  auto bin = std::find_if(bins_.begin(), bins_.end(),
                          [length](const Bin& b) { return b.length >= length; });
  bin->rows += request->item.rows;
  bin->requests.push_back(std::move(request));
  ++queued_;
}

std::vector<std::shared_ptr<PendingRequest>> BatchPlanner::TakeDead(int64_t now_us) {
  std::vector<std::shared_ptr<PendingRequest>> dead;
  for (Bin& bin : bins_) {
    auto is_dead = [now_us](const std::shared_ptr<PendingRequest>& r) {
      return r->cancelled.load(std::memory_order_relaxed) ||
             (r->deadline_us != 0 && r->deadline_us <= now_us);
    };
    auto live_end = std::stable_partition(bin.requests.begin(), bin.requests.end(),
                                          [&](const auto& r) { return !is_dead(r); });
    for (auto it = live_end; it != bin.requests.end(); ++it) {
      bin.rows -= (*it)->item.rows;
      dead.push_back(std::move(*it));
    }
    bin.requests.erase(live_end, bin.requests.end());
  }
  queued_ -= dead.size();
  return dead;
}

std::optional<DispatchDecision> BatchPlanner::Next(int64_t now_us, bool executor_idle) {
  const int64_t largest_batch = LargestBatch(spec_);
  Bin* chosen = nullptr;
  for (Bin& bin : bins_) {
    if (bin.requests.empty()) continue;
    const int64_t oldest_us = bin.requests.front()->enqueue_us;
    const bool full = bin.rows >= largest_batch;
    // Written so that kEndOfTime cannot overflow.
    const bool overdue = now_us - options_.max_queue_delay_us >= oldest_us;
    const bool waiting_cannot_help = executor_idle && options_.max_queue_delay_us == 0;
    if (!(full || overdue || waiting_cannot_help)) continue;
    if (chosen == nullptr || oldest_us < chosen->requests.front()->enqueue_us) chosen = &bin;
  }
  if (chosen == nullptr) return std::nullopt;
  return TakeFromBin(*chosen);
}

DispatchDecision BatchPlanner::TakeFromBin(Bin& bin) {
  const int64_t largest_batch = LargestBatch(spec_);
  DispatchDecision decision;
  int64_t rows = 0;
  int64_t longest = 0;
  while (!bin.requests.empty()) {
    const InferenceItem& item = bin.requests.front()->item;
    // The front request always goes, even alone over the limit; later ones only while they fit.
    if (!decision.requests.empty() && rows + item.rows > largest_batch) break;
    rows += item.rows;
    longest = std::max(longest, item.length);
    decision.requests.push_back(std::move(bin.requests.front()));
    bin.requests.pop_front();
  }
  bin.rows -= rows;
  queued_ -= decision.requests.size();

  const bool oversize_bin = &bin == &bins_.back();
  if (oversize_bin || rows > largest_batch) {
    decision.padded_shape = BucketShape{rows, longest};
  } else {
    decision.padded_shape = spec_.BucketFor(rows, bin.length);
  }
  return decision;
}

std::optional<int64_t> BatchPlanner::NextWakeUp() const {
  std::optional<int64_t> earliest;
  auto consider = [&earliest](int64_t t) {
    if (!earliest || t < *earliest) earliest = t;
  };
  for (const Bin& bin : bins_) {
    if (bin.requests.empty()) continue;
    consider(bin.requests.front()->enqueue_us + options_.max_queue_delay_us);
    // Deadlines are not ordered within a bin; the queue is bounded by max_queue_size, so a scan is
    // cheap next to a batch's execution.
    for (const auto& request : bin.requests) {
      if (request->deadline_us != 0) consider(request->deadline_us);
    }
  }
  return earliest;
}

// ---------------------------------------------------------------------------------------------------
// ModelScheduler

ModelScheduler::ModelScheduler(const ModelSpec& spec, const SchedulerOptions& options,
                               std::vector<std::unique_ptr<Executor>> executors, const Clock* clock)
    : spec_(spec),
      options_(options),
      clock_(clock),
      executors_(std::move(executors)),
      planner_(spec, options) {}

ModelScheduler::~ModelScheduler() { Stop(); }

void ModelScheduler::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || !workers_.empty()) return;
  for (const auto& executor : executors_) {
    workers_.emplace_back([this, e = executor.get()] { WorkerLoop(e); });
  }
}

void ModelScheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  // Joined workers leave the queue empty. Without workers (never started) the caller drains it, so
  // that every accepted request is still answered exactly once.
  if (workers_.empty() && !executors_.empty()) WorkerLoop(executors_.front().get());
  workers_.clear();
}

Status ModelScheduler::Enqueue(std::shared_ptr<PendingRequest> request) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Unavailable("model '" + spec_.name + "' is shutting down");
    if (planner_.queued_requests() >= static_cast<size_t>(options_.max_queue_size)) {
      ++counters_.rejected_queue_full;
      return ResourceExhausted("model '" + spec_.name + "': queue is full (max_queue_size " +
                               std::to_string(options_.max_queue_size) + ")");
    }
    request->enqueue_us = clock_->NowMicros();
    planner_.Add(std::move(request));
    ++counters_.accepted;
  }
  work_available_.notify_one();
  return Status::Ok();
}

void ModelScheduler::Poke() {
  // Taking the lock orders this wake-up after any worker that is between its check and its wait,
  // so the notification cannot be lost.
  { std::lock_guard<std::mutex> lock(mutex_); }
  work_available_.notify_all();
}

SchedulerCounters ModelScheduler::Counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

size_t ModelScheduler::QueueDepth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return planner_.queued_requests();
}

void ModelScheduler::Finish(const std::shared_ptr<PendingRequest>& request, const Status& status) {
  RequestTiming timing;
  timing.queue_us = clock_->NowMicros() - request->enqueue_us;
  request->done(status, {}, timing);
}

void ModelScheduler::WorkerLoop(Executor* executor) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    const int64_t now_us = clock_->NowMicros();

    std::vector<std::shared_ptr<PendingRequest>> dead = planner_.TakeDead(now_us);
    if (!dead.empty()) {
      std::vector<Status> outcomes;
      outcomes.reserve(dead.size());
      for (const auto& request : dead) {
        if (request->cancelled.load(std::memory_order_relaxed)) {
          ++counters_.cancelled;
          outcomes.emplace_back(StatusCode::kCancelled, "request cancelled while queued");
        } else {
          ++counters_.deadline_exceeded;
          outcomes.emplace_back(StatusCode::kDeadlineExceeded,
                                "request deadline expired after " +
                                    std::to_string(now_us - request->enqueue_us) + " us in queue");
        }
      }
      lock.unlock();
      for (size_t i = 0; i < dead.size(); ++i) Finish(dead[i], outcomes[i]);
      lock.lock();
      continue;
    }

    std::optional<DispatchDecision> decision =
        planner_.Next(stopping_ ? kEndOfTime : now_us, /*executor_idle=*/true);
    if (decision) {
      ++counters_.batches;
      for (const auto& request : decision->requests) counters_.batch_rows += request->item.rows;
      // Work may remain that another sleeping worker could take right away.
      if (planner_.queued_requests() > 0 && idle_workers_ > 0) work_available_.notify_one();
      lock.unlock();

      Batch batch;
      batch.padded_shape = decision->padded_shape;
      batch.items.reserve(decision->requests.size());
      for (const auto& request : decision->requests) batch.items.push_back(&request->item);

      BatchOutputs outputs;
      const int64_t start_us = clock_->NowMicros();
      Status status = executor->Execute(batch, &outputs);
      const int64_t end_us = clock_->NowMicros();
      if (status.ok() && outputs.size() != decision->requests.size()) {
        status = Internal("model '" + spec_.name + "': executor returned " +
                          std::to_string(outputs.size()) + " results for a batch of " +
                          std::to_string(decision->requests.size()) + " requests");
      }
      if (status.ok()) {
        spdlog::debug("model '{}' on {}: batch requests={} padded to {} ran in {} us", spec_.name,
                      executor->device(), decision->requests.size(), batch.padded_shape.ToString(),
                      end_us - start_us);
      } else {
        spdlog::error("model '{}' on {}: batch of {} requests padded to {} failed: {}", spec_.name,
                      executor->device(), decision->requests.size(), batch.padded_shape.ToString(),
                      status.ToString());
      }

      for (size_t i = 0; i < decision->requests.size(); ++i) {
        const auto& request = decision->requests[i];
        RequestTiming timing;
        timing.queue_us = start_us - request->enqueue_us;
        timing.compute_us = end_us - start_us;
        timing.padded_shape = decision->padded_shape;
        std::vector<HostTensor> own =
            status.ok() ? std::move(outputs[i]) : std::vector<HostTensor>{};
        request->done(status, std::move(own), timing);
      }
      lock.lock();
      continue;
    }

    // Stopping makes every queued request dispatchable, so no decision means an empty queue.
    if (stopping_) return;

    ++idle_workers_;
    const std::optional<int64_t> wake_us = planner_.NextWakeUp();
    if (wake_us) {
      // Clock micros are not a std::chrono clock; convert to a relative wait on the real clock.
      const int64_t remaining_us = std::max<int64_t>(*wake_us - clock_->NowMicros(), 0);
      work_available_.wait_for(lock, std::chrono::microseconds(remaining_us));
    } else {
      work_available_.wait(lock);
    }
    --idle_workers_;
  }
}

}  // namespace graphserve
