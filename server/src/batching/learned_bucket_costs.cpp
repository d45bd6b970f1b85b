#include "graphserve/server/batching/learned_bucket_costs.h"

#include <algorithm>
#include <cmath>

namespace graphserve {
namespace {

double Elements(const BucketShape& shape) { return static_cast<double>(shape.batch * shape.length); }

// `inner` fits in `outer`: no more rows and no longer.
bool FitsIn(const BucketShape& inner, const BucketShape& outer) {
  return inner.batch <= outer.batch && inner.length <= outer.length;
}

}  // namespace

LearnedBucketCosts::LearnedBucketCosts(const BucketCosts& warmup) {
  for (const auto& [shape, time_us] : warmup) {
    if (time_us > 0 && std::isfinite(time_us)) buckets_[shape].warmup_us = time_us;
  }
  Rebuild();
}

int64_t LearnedBucketCosts::Replays(const BucketShape& shape) const {
  const auto found = buckets_.find(shape);
  return found == buckets_.end() ? 0 : found->second.replays;
}

bool LearnedBucketCosts::Settled(const BucketShape& shape) const {
  const auto found = buckets_.find(shape);
  return found != buckets_.end() && found->second.replays >= kSettlingReplays && found->second.reached_median;
}

bool LearnedBucketCosts::Observe(const BucketShape& shape, double measured_us) {
  if (!(measured_us > 0) || !std::isfinite(measured_us)) return false;
  Bucket& bucket = buckets_[shape];
  const bool was_settled = Settled(shape);
  bucket.recent[static_cast<size_t>(bucket.replays % kRecentReplays)] = measured_us;
  ++bucket.replays;
  const size_t held = static_cast<size_t>(std::min<int64_t>(bucket.replays, kRecentReplays));
  std::array<double, kRecentReplays> sorted = bucket.recent;
  // The lower median of an even count: of two replays, the faster (a slow one is the likelier outlier
  // on a shared host).
  const size_t middle = (held - 1) / 2;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(middle),
                   sorted.begin() + static_cast<std::ptrdiff_t>(held));
  const double median_us = sorted[middle];

  const double start_us = bucket.learned_us > 0 ? bucket.learned_us : bucket.warmup_us;
  if (start_us <= 0) {
    bucket.learned_us = median_us;  // nothing to move from: the first replay is all there is
    bucket.reached_median = true;
  } else {
    // In log space, so that a step is a factor whichever way it goes.
    const double max_step = std::log(bucket.replays < kSettlingReplays ? kEarlyStep : kSteadyStep);
    const double wanted = std::log(median_us / start_us);
    const double step = std::clamp(wanted, -max_step, max_step);
    bucket.reached_median = step == wanted;
    bucket.learned_us = start_us * std::exp(step);
  }
  const double published_us = bucket.published_us > 0 ? bucket.published_us : start_us;
  // A bucket that just settled may bound others from below (Rebuild): that is a change too.
  if (published_us > 0 && std::abs(bucket.learned_us / published_us - 1.0) <= kRepublishChange &&
      bucket.replays > 1 && Settled(shape) == was_settled) {
    return false;
  }
  Rebuild();
  return true;
}

void LearnedBucketCosts::Rebuild() {
  costs_.clear();
  for (auto& [shape, bucket] : buckets_) {
    bucket.published_us = bucket.learned_us;
    if (bucket.learned_us > 0) {
      costs_[shape] = bucket.learned_us;
      continue;
    }
    if (bucket.warmup_us <= 0) continue;
    double upper = bucket.warmup_us;
    double lower = 0.0;
    for (const auto& [other_shape, other] : buckets_) {
      if (other.learned_us <= 0) continue;
      if (FitsIn(shape, other_shape)) upper = std::min(upper, other.learned_us);
      if (FitsIn(other_shape, shape)) {
        // Only a settled figure may raise another: one still racing down from a poisoned warm-up
        // would pass its poison on.
        if (other.replays >= kSettlingReplays && other.reached_median)
          lower = std::max(lower, other.learned_us);
        upper = std::min(upper, kScaleUpSlack * other.learned_us * Elements(shape) / Elements(other_shape));
      }
    }
    // Replayed figures that disagree with each other (noise) leave the lower bound to win: a bucket
    // costs no less than one that fits in it.
    costs_[shape] = std::max(upper, lower);
  }
}

}  // namespace graphserve
