#pragma once
// The batching policy of ModelScheduler, apart from its threads: which queued requests go together,
// padded to which bucket, and when, and the decision it hands the scheduler (DispatchDecision).
// The request (pending_request.h) and the options (scheduler_options.h) have headers of their own,
// so that the codecs and the config loader need not include the batcher.
//
// BatchPlanner is a pure function of the requests it was given, the times passed in and the cost
// table: it reads no clock and starts no thread, so that tests and the batching simulator drive it
// with simulated time. Thread safety: none; its owner serialises every call (ModelScheduler calls
// it under its lock). Ownership: the planner shares ownership of each request from Add until the
// request leaves through Next or TakeDead, which hand it back to the caller. Errors: the planner
// has none; SchedulerOptions::Validate reports bad options as INVALID_ARGUMENT.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/batching/learned_bucket_costs.h"
#include "graphserve/server/batching/pending_request.h"
#include "graphserve/server/batching/scheduler_options.h"

namespace graphserve {

// One batch the scheduler decided to run, and on which bucket shape.
struct DispatchDecision {
  // The bin's own requests first (in arrival order), then the ride-alongs from shorter bins.
  std::vector<std::shared_ptr<PendingRequest>> requests;
  BucketShape padded_shape;
  int ride_alongs = 0;  // how many of `requests` came from shorter bins
};

// The pure decision part of the scheduler, apart from threads, so that tests and the batching
// simulator (batch_simulator.h) drive it with a fake clock. Not thread-safe: the
// ModelScheduler calls it under its lock. The policy, in short (batch_planner.cpp has the reasons):
//   - A request joins the bin of the smallest bucket length that holds it; requests longer than the
//     grid share an oversize bin. Within a bin requests leave in arrival order.
//   - A bin's batch is its oldest requests up to the largest batch size at its length (the grid is
//     a staircase: short lengths may batch more rows than max_batch_size, ModelSpec), padded to
//     the smallest batch bucket holding them (or fewer of them in a smaller bucket, when that does
//     more real work per µs); the bucket's spare rows, padding otherwise, carry ride-alongs from
//     shorter bins. Ride-alongs may also fill a larger bucket than the own rows need, where its
//     measured time is at most 1.5× the needed one's (rows nearly free, as small batches on a GPU).
//   - The batch arrival order would form replaces the planner's when it does more real work per µs
//     (relative to a full batch of its length) at most twice the cost: never worse than FIFO.
//   - A bin may go when it holds a full largest batch, when its oldest request is due (has waited
//     max_queue_delay_us), or, with an executor idle, when fewer than one joining arrival is
//     expected before the delay runs out (from the arrival rates the planner observes).
//   - Due requests go first, oldest first. Otherwise the dispatchable batch doing the most real
//     elements per µs of its bucket's measured time (relative to a full batch of its length) wins.
//   - Wait bound: while every due request fits in one batch and those of one bin only are waiting
//     (below capacity), no request waits longer than max_queue_delay_us plus the batch an executor
//     was running when it fell due, whatever the mix of lengths.
//   - A model that does not mask padding (ModelSpec::masks_padding false): a bin per exact length,
//     made as requests of that length arrive; a batch holds one bin's requests only (no riders, no
//     arrival-order batch across lengths), at that length: its bucket where the length is a bucket
//     length (only its rows padded), else its exact rows × length, off the grid.
//   - A ragged model (ModelSpec::ragged): one bin; the oldest requests packed end to end while
//     their rows and tokens fit the largest bucket, in the smallest (rows, tokens) bucket holding
//     them; they go when full, due, or (not under FIFO) an idle executor cannot gain by waiting.
//   - Batching disabled (SchedulerOptions::batching_disabled): the oldest request goes alone as soon
//     as an executor asks, at its own rows × length when the model's CUDA graphs are disabled (no
//     graph to fit, so no padding), else padded to its smallest bucket so that it still replays.
class BatchPlanner {
 public:
  // A `now_us` by which every request's delay has run out: Next then finds every non-empty bin
  // dispatchable, so a stopping scheduler drains its queue without waiting.
  static constexpr int64_t kEndOfTime = std::numeric_limits<int64_t>::max();

  // `costs` may be partial or empty: a bucket without a time is scaled from a timed one; with no
  // times at all a batch costs its padded elements plus a fixed overhead per batch.
  BatchPlanner(const ModelSpec& spec, const SchedulerOptions& options,
               const BucketCosts& costs = {});

  // Queues `request`, whose enqueue_us is set and not earlier than any earlier Add's.
  void Add(std::shared_ptr<PendingRequest> request);
  size_t queued_requests() const { return queued_; }

  // A queued request's `cancelled` flag was set: the next TakeDead looks for it.
  void NoteCancellation() { cancellation_noted_ = true; }
  // Removes and returns the requests whose expiry (PendingRequest::ExpiryUs: deadline or queue
  // timeout) is <= `now_us`, and the cancelled ones noted. A later `now_us` also takes those that
  // cannot finish before it (the scheduler passes now plus the cheapest batch).
  std::vector<std::shared_ptr<PendingRequest>> TakeDead(int64_t now_us);

  // The batch to run now, if any. `executor_idle`: a worker is waiting for work right now (so a
  // batch nobody will join is better run than held).
  std::optional<DispatchDecision> Next(int64_t now_us, bool executor_idle);

  // When Next(.., executor_idle) would next return a batch without new arrivals (a delay running
  // out, or, with an idle executor, the expected arrivals no longer worth waiting for) or TakeDead
  // a request (its deadline); nullopt when nothing is queued. Later than `now_us` after
  // Next(now_us, executor_idle) returned none.
  std::optional<int64_t> NextWakeUp(int64_t now_us, bool executor_idle) const;

  // The execution time the planner assumes for a batch padded to `shape`, in µs.
  double CostUs(const BucketShape& shape) const;
  // Replaces the cost table (as the constructor's `costs`): the scheduler passes the costs it
  // learnt from replays (LearnedBucketCosts). Queued requests stay queued.
  void SetCosts(const BucketCosts& costs);

 private:
  struct Bin {
    int64_t length = 0;  // the bucket length this bin pads to (exact lengths: its requests' length)
    int64_t largest_batch = 0;  // the most rows of a batch padded to it (oversize: as the longest)
    std::deque<std::shared_ptr<PendingRequest>> requests;
    int64_t rows = 0;
    // Arrivals seen, for the rate estimate: the last one, and the mean gap between them (EWMA).
    int64_t last_arrival_us = -1;
    double mean_gap_us = 0.0;  // 0 until two arrivals were seen
  };
  // A batch under consideration: how many requests it takes from the front of each bin.
  struct Candidate {
    size_t bin = 0;            // the bin whose length it pads to
    std::vector<size_t> take;  // per bin
    BucketShape shape;
    int64_t rows = 0;
    double real_elements = 0;
    double cost_us = 0;
    int ride_alongs = 0;
  };
  struct DeadlineEntry {
    int64_t deadline_us;
    std::weak_ptr<PendingRequest> request;
  };
  // The heap order of deadlines_: the earliest on top.
  static bool LaterDeadline(const DeadlineEntry& a, const DeadlineEntry& b) {
    return a.deadline_us > b.deadline_us;
  }

  // Policy kFifo: the oldest requests across all bins, once they fill the largest batch at the
  // longest one's length or the oldest is due.
  std::optional<DispatchDecision> NextInArrivalOrder(int64_t now_us);
  // The oldest requests of the bins up to `last_bin` while they fit the largest batch at the
  // longest one's length, padded to the smallest bucket holding them; `full`: the next request
  // would not fit.
  Candidate ArrivalOrderCandidate(size_t last_bin, bool* full) const;
  // The bin whose request after its first skip[bin] arrived first; bins_.size() when none is left.
  size_t OldestBin(const std::vector<size_t>& skip) const;
  // The bin of requests of `length`; exact lengths: bins_.size() when it has none yet.
  size_t BinIndex(int64_t length) const;
  // BinIndex, making the bin of an exact length that has none yet.
  size_t BinForArrival(int64_t length);
  bool IsOversizeBin(size_t bin) const { return bin + 1 == bins_.size(); }
  // The measured costs of the bucket length bin `bin` pads to, by batch bucket (not the oversize bin,
  // nor an exact length off the grid: those batches are off-grid and cost CostUs).
  const std::vector<double>& BinCosts(size_t bin) const {
    return cost_us_[SmallestAtLeast(spec_.bucket_lengths, bins_[bin].length)];
  }
  // The most rows a batch of `length` may hold.
  int64_t LargestBatchOf(int64_t length) const;
  // The bin's best candidate, holding at least its first `must_own` requests (and always the
  // first); `take_all` takes all its requests that fit the largest batch.
  Candidate BuildCandidate(size_t bin, int64_t now_us, bool take_all, size_t must_own = 1) const;
  // A batch in bin `bin`'s length and batch bucket index `bucket`: the first must[j] requests of
  // every bin j, then more of the bin's own, then ride-alongs. False when the bucket is larger than
  // the own and required rows need, unless the riders need it (BuildCandidate offers a larger one
  // only where it costs at most 1.5× the needed one).
  bool Compose(size_t bin, const std::vector<size_t>& must, size_t bucket, int64_t now_us,
               Candidate* candidate) const;
  DispatchDecision Take(const Candidate& candidate);
  // A ragged model's batch: the oldest requests packed by rows and tokens (batch_planner.cpp).
  std::optional<DispatchDecision> NextRagged(int64_t now_us, bool executor_idle);
  // Of a full ragged batch `all` (the oldest requests of `bin` that fit), the prefix doing the most
  // real tokens per µs of its bucket's measured time.
  Candidate BestRaggedPrefix(const Bin& bin, const Candidate& all) const;
  // Batching disabled: the oldest queued request alone; nullopt when none is queued.
  std::optional<DispatchDecision> TakeOldestAlone();
  // Expected µs until the next arrival that could join bin `bin`'s batch: its own, or a shorter
  // bin's while the batch has spare rows.
  double ExpectedArrivalGapUs(size_t bin, int64_t now_us) const;
  // Fewer than one such arrival is expected before the (non-empty) bin's oldest request falls due.
  bool WaitingCannotHelp(size_t bin, int64_t now_us) const;
  // The candidate's real work per µs relative to a full unpadded batch of bin `bin`'s length.
  double RelativeScore(const Candidate& candidate, size_t bin) const;
  bool Overdue(const PendingRequest& request, int64_t now_us) const;
  void DropStaleDeadlines();
  void RebuildDeadlines();

  const ModelSpec spec_;
  const SchedulerOptions options_;
  // The model does not mask padding: one bin per exact length, batches never mix lengths.
  const bool exact_lengths_;
  // cost_us_[length index][batch index] over the grid's axes; only its points are read.
  std::vector<std::vector<double>> cost_us_;
  // The grid's largest point, which the cost of an off-grid (oversize) batch is scaled from.
  BucketShape largest_bucket_;

  std::vector<Bin> bins_;  // one per bucket length, plus one for oversize requests, in length order
  size_t queued_ = 0;
  bool cancellation_noted_ = false;
  // Min-heap on deadline of queued requests that have one; entries of requests that left the queue
  // are dropped lazily.
  std::vector<DeadlineEntry> deadlines_;
};

// The scheduler's queue: a BatchPlanner per priority level (one without priority levels). A batch
// holds requests of one level, and whenever a level has a batch ready it goes before any lower
// level's; a lower level's ready batch does not wait for a higher level's to fill. Thread safety,
// ownership and errors as BatchPlanner's.
class PriorityPlanner {
 public:
  PriorityPlanner(const ModelSpec& spec, const SchedulerOptions& options, const BucketCosts& costs = {});

  void Add(std::shared_ptr<PendingRequest> request);
  size_t queued_requests() const;
  void NoteCancellation();
  std::vector<std::shared_ptr<PendingRequest>> TakeDead(int64_t now_us);
  std::optional<DispatchDecision> Next(int64_t now_us, bool executor_idle);
  std::optional<int64_t> NextWakeUp(int64_t now_us, bool executor_idle) const;
  double CostUs(const BucketShape& shape) const { return levels_.front().CostUs(shape); }
  void SetCosts(const BucketCosts& costs);
  // The level (0 for the highest) a request of Triton's `priority` queues at.
  size_t LevelOf(uint64_t priority) const;

 private:
  std::vector<BatchPlanner> levels_;
  uint64_t default_level_ = 1;
};

}  // namespace graphserve
