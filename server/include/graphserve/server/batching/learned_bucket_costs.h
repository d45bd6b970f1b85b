#pragma once
// What each bucket of a model's grid costs to run, learnt from the batches the scheduler really ran.
// Warm-up figures seed it, but they are measured once, at start-up, and a busy host then can record
// a bucket 150x too slow (1x8 at 648 ms against a real 4.4 ms), which would make admission refuse
// its requests for the life of the process; or too fast, which would make it admit what it cannot
// serve in time. So every replay's duration corrects its bucket, both ways:
//   - The estimate moves toward the median of the bucket's last kRecentReplays durations, so that one
//     or two outliers among them (a preempted thread, a page fault) move it not at all.
//   - It moves by at most a factor of kSteadyStep a replay (kEarlyStep while fewer than
//     kSettlingReplays were seen): a 150x wrong figure is right after five replays, and no single
//     replay swings admission.
//   - A bucket never replayed keeps its warm-up figure, bounded by the replayed ones: no larger than
//     a replayed bucket it fits in (more rows and tokens cost no less), no larger than
//     kScaleUpSlack times a smaller replayed bucket's time scaled by elements, and no smaller than
//     a settled bucket that fits in it. A bucket without a warm-up figure (start-up measured only
//     some) gets one from its first replay.
//
// Thread safety: none; its owner (ModelScheduler) serialises every call under its lock.
// Ownership: plain values. Errors: none; a non-positive or non-finite duration is ignored.
#include <array>
#include <cstdint>
#include <map>

#include "graphserve/engine/model_spec.h"

namespace graphserve {

// Execution time of one batch of each bucket shape in microseconds.
using BucketCosts = std::map<BucketShape, double>;

class LearnedBucketCosts {
 public:
  // Replays whose median the estimate follows: a median of five ignores two outliers.
  static constexpr int kRecentReplays = 5;
  // Replays of a bucket before its estimate counts as settled (Settled) and may move faster.
  static constexpr int kSettlingReplays = 3;
  // The most the estimate moves in one replay, as a factor: while settling, then once settled.
  static constexpr double kEarlyStep = 2.0;
  static constexpr double kSteadyStep = 4.0;
  // A bucket's time grows at most about linearly with its elements; attention's quadratic term and
  // noise get this much slack before a smaller replayed bucket bounds a larger unreplayed one.
  static constexpr double kScaleUpSlack = 2.0;

  // `warmup`: the executors' start-up figures, for any subset of the grid (or none).
  explicit LearnedBucketCosts(const BucketCosts& warmup = {});

  // Folds in one replay of `shape` (a bucket of the grid) that took `measured_us`. True when some
  // estimate moved by more than kRepublishChange since Costs() last reported a change, so that the
  // caller rebuilds what it derived from them; small drifts are batched up, since a rebuild costs
  // a pass over the grid.
  bool Observe(const BucketShape& shape, double measured_us);

  // The estimate of every bucket that has a warm-up figure or a replay.
  const BucketCosts& Costs() const { return costs_; }
  // How many replays of `shape` were folded in.
  int64_t Replays(const BucketShape& shape) const;
  // The bucket was replayed at least kSettlingReplays times and its last replay's median was within
  // a step of the estimate: its figure no longer races toward the data.
  bool Settled(const BucketShape& shape) const;

 private:
  // A rebuild walks every pair of buckets (a 194-bucket grid: 37k steps) under the scheduler's
  // lock, and replay times jitter by a few percent on a GPU: smaller moves wait until they add up.
  static constexpr double kRepublishChange = 0.05;

  struct Bucket {
    double warmup_us = 0.0;   // 0: none
    double learned_us = 0.0;  // 0: never replayed
    std::array<double, kRecentReplays> recent{};
    int64_t replays = 0;
    bool reached_median = false;  // the last replay's step was not cut short by the step bound
    double published_us = 0.0;    // learned_us when the costs were last rebuilt
  };

  // Rebuilds costs_ from the buckets (see the header comment for the bounds).
  void Rebuild();

  std::map<BucketShape, Bucket> buckets_;
  BucketCosts costs_;
};

}  // namespace graphserve
