// The dynamic batcher's policy (BatchPlanner), and why:
//   - Bins. A request joins the bin of the smallest bucket length that holds it, so that a short
//     request is never padded to a long one's length just because they arrived together; requests
//     longer than the grid share an oversize bin. Within a bin requests leave in arrival order.
//   - Candidates. A bin's batch is its oldest requests while their rows fit the largest batch
//     bucket of its length (the grid is a staircase: a short length may batch more rows than a
//     request may carry, up to the model's token budget; ModelSpec), the front request always
//     going, even alone over the limit (it cannot be split and runs as an oversize batch of its
//     own shape), padded to the smallest batch bucket that holds them. When
//     fewer of them fill a smaller bucket exactly and that does more real work per µs of measured
//     time (on long sequences time grows with rows, so 16 rows in a 16-bucket beat 22 in a
//     32-bucket whose 10 spare rows are mostly padding), the rest wait for the next batch.
//   - Ride-alongs. The rows between a batch's rows and its bucket's batch size are padding: they
//   cost
//     the same whether zeros or real requests fill them. So they are filled with requests from
//     shorter bins, which then need no batch of their own: due ones first (oldest first), then from
//     the longest shorter bin down, since a longer rider saves more padded work later. Riders make
//     a bucket larger only where its measured time is at most 1.5x the one the own rows need: there
//     rows come nearly free (small batches on a GPU cost about a launch), and a short request rides
//     padded now instead of taking a launch of its own; where rows cost their share it waits for
//     its own bin (on the H200 +8% at 64 closed-loop clients, the same at saturation).
//   - Arrival order as an alternative. The batch FIFO would send from the bins up to some length
//     (the oldest of them, padded to the longest) replaces the chosen one when it does more real
//     work per µs relative to a full batch of its length, costs at most twice as much, and fits the
//     grid. Below capacity, where a batch costs about a launch whatever it holds, that is one
//     launch where binning would need one per bin: binning alone lost to FIFO there (issue #17),
//     e.g. at 8 clients in a closed loop. It pads more than binning alone (the price of the
//     launches saved), though less than FIFO.
//   - When. A bin may go when its rows fill the largest batch bucket (waiting cannot make the batch
//     larger), when its oldest request is due (has waited max_queue_delay_us), or when an executor
//     is idle and waiting cannot help: the arrivals that could join (this bin's, and the shorter
//     bins' while the batch has spare rows; rates from an exponential average of observed gaps that
//     decays while a bin is quiet) are expected to be fewer than one before the delay runs out. A
//     lone caller on a quiet model pays no delay.
//   - Which. Due requests go first, oldest first: no mix of arrivals, however heavy or efficient
//   its
//     batches, can hold a due request back behind anything but older due requests. While these fit
//     one batch (below capacity) the due bin's due requests all go together, so a request waits at
//     most the delay plus the batch an executor was running when it fell due. Beyond capacity a due
//     bin may keep some back for a smaller, better-filled bucket (padding falls from 1.25 to 1.19
//     at saturation). Otherwise, among the dispatchable candidates, the one doing the most real
//     elements per µs of its bucket's measured time, relative to the best its bin could do (a full
//     unpadded batch of its length), wins, the oldest on a tie: that keeps the executor on
//     efficient batches while the others keep filling, without always favouring long sequences
//     (whose batches do more per µs on a GPU).
//   - Exact lengths. A model that does not mask padding would compute padded positions into its
//     answers (a mean over the length, a softmax), so its batches never pad the length: a bin
//     holds one exact length (bins are made as lengths arrive, and empty ones forgotten when there
//     are many), nothing rides along from another bin, and arrival order never merges lengths.
//     A length on the grid still replays its bucket, rows padded (rows never meet in a batched
//     model); any other runs at its exact shape. What Triton does for such models, with graphs
//     where the grid has the length.
//   - Ragged models (ModelSpec::ragged). Rows of any lengths go end to end with no padding
//     between them, so there is one bin: the oldest requests while their rows (max_batch_size at
//     most; the largest bucket keeps a spare row for the tail's filler) and tokens fit, in the
//     smallest bucket holding them, the tail of its tokens the only padding. It goes when the
//     next request would not fit, when the oldest is due, or (not under FIFO) when an executor is
//     idle and waiting cannot help, as a bin does above. Packing in arrival order is FIFO already,
//     with no length to bin by. A full batch (more queued than fit) may leave its newest requests
//     for the next one when fewer fill a smaller token size and do more real tokens per µs: a
//     batch bound by its rows stops some tokens past a size, which would pad it by up to a step.
//   - Batching disabled. Each request runs alone, oldest first, the moment an executor is free:
//     what a server without a batcher does, kept as a mode of its own so that its cost can be
//     measured on the same server. Without CUDA graphs it runs at its exact shape, since padding
//     would only add work; with graphs it is padded to its bucket, since a replay at the padded
//     shape beats an eager run at the exact one.
#include "graphserve/server/batching/batch_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace graphserve {
namespace {

// Weight of a new gap in a bin's mean inter-arrival gap: 1/8 follows a change of load within a few
// arrivals while smoothing the spread of Poisson gaps.
constexpr double kGapSmoothing = 1.0 / 8.0;

// Scores within this fraction of each other count as equal, so that the older head decides between
// batches whose efficiency differs by noise in the measured times.
constexpr double kScoreTolerance = 0.02;
// A batch size whose cost is within this factor of a smaller one's: its extra rows come nearly free.
constexpr double kNearlyFreeRows = 1.5;
// Exact lengths: empty bins kept beyond the queued requests' (for their arrival rates) before the
// empty ones are dropped, so that traffic of many lengths cannot grow the bins without bound.
constexpr size_t kSpareExactBins = 64;

}  // namespace

BatchPlanner::BatchPlanner(const ModelSpec& spec, const SchedulerOptions& options,
                           const BucketCosts& costs)
    : spec_(spec),
      options_(options),
      exact_lengths_(!spec.masks_padding()),
      largest_bucket_(spec.LargestBucket()) {
  // Exact lengths start with the grid's lengths too: the cost table below is built over them.
  // Ragged: one bin, packed up to the largest token size, whatever the lengths.
  for (int64_t length : spec_.bucket_lengths) {
    if (spec_.ragged && !bins_.empty()) break;
    Bin bin;
    bin.length = spec_.ragged ? spec_.bucket_lengths.back() : length;
    bin.largest_batch = LargestBatchOf(bin.length);
    bins_.push_back(std::move(bin));
  }
  // The oversize bin sorts last, so that "the first bin whose length holds the request" finds it.
  // Its requests are longer than any bucket: they batch as the longest bucket length does.
  Bin oversize;
  oversize.length = kEndOfTime;
  oversize.largest_batch =
      bins_.empty() ? spec_.max_batch_size : bins_.back().largest_batch;
  bins_.push_back(std::move(oversize));
  SetCosts(costs);
}

void BatchPlanner::SetCosts(const BucketCosts& costs) {
  // The cost table over the grid's points. A bucket without a measured time is scaled from the
  // largest timed bucket of its length with fewer rows (time grows at most linearly with rows),
  // else from the smallest timed one with more rows (an upper bound), else by elements from the
  // largest timed bucket. With no times at all (executors that measure nothing), a batch costs its
  // padded elements plus a fixed overhead worth a full batch of the shortest length, so that
  // batching still pays. The points of a length are a prefix of the batch sizes.
  const auto& batches = spec_.bucket_batch_sizes;
  const auto& lengths = spec_.bucket_lengths;
  cost_us_.assign(lengths.size(), std::vector<double>(batches.size(), 0.0));
  const BucketShape* largest_timed = nullptr;
  for (const auto& [shape, time_us] : costs) {
    if (time_us <= 0 || !spec_.HasBucket(shape)) continue;  // not a bucket of this grid
    const size_t li = SmallestAtLeast(lengths, shape.length);
    const size_t bi = SmallestAtLeast(batches, shape.batch);
    cost_us_[li][bi] = time_us;
    if (largest_timed == nullptr || spec_.BucketElements(shape) > spec_.BucketElements(*largest_timed)) {
      largest_timed = &shape;
    }
  }
  // From the grid, not bins_: exact lengths insert bins of their own after construction.
  const double overhead =
      lengths.empty()
          ? 0.0
          : static_cast<double>(spec_.BucketElements({LargestBatchOf(lengths.front()), lengths.front()}));
  for (size_t li = 0; li < lengths.size(); ++li) {
    const std::vector<double> timed = cost_us_[li];
    const size_t points = SmallestAtLeast(batches, LargestBatchOf(lengths[li]) + 1);
    for (size_t bi = 0; bi < points; ++bi) {
      if (timed[bi] > 0) continue;
      const double elements = static_cast<double>(spec_.BucketElements({batches[bi], lengths[li]}));
      double estimate = 0;
      for (size_t j = bi; j-- > 0;) {
        if (timed[j] > 0) {
          estimate = timed[j] * static_cast<double>(batches[bi]) / static_cast<double>(batches[j]);
          break;
        }
      }
      for (size_t j = bi + 1; estimate == 0 && j < points; ++j) {
        if (timed[j] > 0) estimate = timed[j];
      }
      if (estimate == 0 && largest_timed != nullptr) {
        estimate =
            costs.at(*largest_timed) * elements / static_cast<double>(spec_.BucketElements(*largest_timed));
      }
      cost_us_[li][bi] = estimate > 0 ? estimate : elements + overhead;
    }
  }
}

double BatchPlanner::CostUs(const BucketShape& shape) const {
  const auto& batches = spec_.bucket_batch_sizes;
  const auto& lengths = spec_.bucket_lengths;
  if (spec_.HasBucket(shape)) {
    return cost_us_[SmallestAtLeast(lengths, shape.length)][SmallestAtLeast(batches, shape.batch)];
  }
  // Off the grid (an oversize batch): by elements, from the largest bucket.
  const double elements = static_cast<double>(spec_.BucketElements(shape));
  if (largest_bucket_.batch == 0) return elements;
  return CostUs(largest_bucket_) * elements / static_cast<double>(spec_.BucketElements(largest_bucket_));
}

int64_t BatchPlanner::LargestBatchOf(int64_t length) const {
  // A batch's rows are bounded per length: the grid is a staircase (ModelSpec), and a length
  // without a bucket batches as many rows as a request may carry, each batch oversize.
  const int64_t largest = spec_.LargestBatchFor(length);
  return largest > 0 ? largest : spec_.max_batch_size;
}

size_t BatchPlanner::BinIndex(int64_t length) const {
  if (spec_.ragged) return 0;  // one bin: rows of any length share a batch
  // Padded: the oversize bin when no bucket length holds it.
  if (!exact_lengths_) return SmallestAtLeast(spec_.bucket_lengths, length);
  const auto end = bins_.end() - 1;  // the oversize bin stays last, empty
  const auto found = std::lower_bound(bins_.begin(), end, length,
                                      [](const Bin& bin, int64_t value) { return bin.length < value; });
  if (found == end || found->length != length) return bins_.size();
  return static_cast<size_t>(found - bins_.begin());
}

size_t BatchPlanner::BinForArrival(int64_t length) {
  const size_t existing = BinIndex(length);
  if (existing < bins_.size()) return existing;
  if (bins_.size() > queued_ + kSpareExactBins) {
    const auto empty = [](const Bin& bin) { return bin.requests.empty(); };
    bins_.erase(std::remove_if(bins_.begin(), bins_.end() - 1, empty), bins_.end() - 1);
  }
  Bin bin;
  bin.length = length;
  bin.largest_batch = LargestBatchOf(length);
  const size_t at = static_cast<size_t>(
      std::lower_bound(bins_.begin(), bins_.end() - 1, length,
                       [](const Bin& b, int64_t value) { return b.length < value; }) -
      bins_.begin());
  bins_.insert(bins_.begin() + static_cast<std::ptrdiff_t>(at), std::move(bin));
  return at;
}

bool BatchPlanner::Overdue(const PendingRequest& request, int64_t now_us) const {
  // Written so that kEndOfTime cannot overflow.
  return now_us - options_.max_queue_delay_us >= request.enqueue_us;
}

void BatchPlanner::Add(std::shared_ptr<PendingRequest> request) {
  Bin& bin = bins_[BinForArrival(request->item.length)];
  const int64_t now_us = request->enqueue_us;
  if (bin.last_arrival_us >= 0) {
    const double gap_us = static_cast<double>(now_us - bin.last_arrival_us);
    bin.mean_gap_us =
        bin.mean_gap_us == 0
            ? std::max(gap_us, 1.0)
            : std::max(bin.mean_gap_us + kGapSmoothing * (gap_us - bin.mean_gap_us), 1.0);
  }
  bin.last_arrival_us = now_us;

  if (request->ExpiryUs() != 0) {
    // Entries of requests that already left are dropped lazily; rebuilding once they outnumber the
    // queued requests keeps the heap's size proportional to the queue.
    if (deadlines_.size() > 2 * queued_ + 64) RebuildDeadlines();
    deadlines_.push_back(DeadlineEntry{request->ExpiryUs(), request});
    std::push_heap(deadlines_.begin(), deadlines_.end(), LaterDeadline);
  }
  request->queued = true;
  bin.rows += request->item.rows;
  bin.requests.push_back(std::move(request));
  ++queued_;
}

void BatchPlanner::RebuildDeadlines() {
  deadlines_.clear();
  for (const Bin& bin : bins_) {
    for (const auto& request : bin.requests) {
      if (request->ExpiryUs() != 0)
        deadlines_.push_back(DeadlineEntry{request->ExpiryUs(), request});
    }
  }
  std::make_heap(deadlines_.begin(), deadlines_.end(), LaterDeadline);
}

void BatchPlanner::DropStaleDeadlines() {
  while (!deadlines_.empty()) {
    std::shared_ptr<PendingRequest> request = deadlines_.front().request.lock();
    if (request != nullptr && request->queued) return;
    std::pop_heap(deadlines_.begin(), deadlines_.end(), LaterDeadline);
    deadlines_.pop_back();
  }
}

std::vector<std::shared_ptr<PendingRequest>> BatchPlanner::TakeDead(int64_t now_us) {
  std::vector<std::shared_ptr<PendingRequest>> dead;
  // Under overload requests expire and are cancelled by the thousand a second while the queue holds
  // thousands: each bin is compacted once per call, not once per dead request (that was quadratic,
  // under the scheduler's lock that every arriving request needs).
  std::vector<bool> expired_in(bins_.size(), false);
  while (!deadlines_.empty() && deadlines_.front().deadline_us <= now_us) {
    std::shared_ptr<PendingRequest> request = deadlines_.front().request.lock();
    std::pop_heap(deadlines_.begin(), deadlines_.end(), LaterDeadline);
    deadlines_.pop_back();
    if (request == nullptr || !request->queued) continue;
    request->queued = false;  // leaves its bin in the pass below
    expired_in[BinIndex(request->item.length)] = true;
    dead.push_back(std::move(request));
  }
  // Cancellations are announced (NoteCancellation): only then are the bins scanned for them.
  const bool scan_cancelled = cancellation_noted_;
  cancellation_noted_ = false;
  for (size_t b = 0; b < bins_.size(); ++b) {
    if (!scan_cancelled && !expired_in[b]) continue;
    Bin& bin = bins_[b];
    auto live_end = std::stable_partition(bin.requests.begin(), bin.requests.end(), [](const auto& r) {
      return r->queued && !r->cancelled.load(std::memory_order_relaxed);
    });
    for (auto it = live_end; it != bin.requests.end(); ++it) {
      bin.rows -= (*it)->item.rows;
      --queued_;
      if (!(*it)->queued) continue;  // expired: already in `dead`
      (*it)->queued = false;
      dead.push_back(std::move(*it));
    }
    bin.requests.erase(live_end, bin.requests.end());
  }
  DropStaleDeadlines();
  return dead;
}

double BatchPlanner::ExpectedArrivalGapUs(size_t bin, int64_t now_us) const {
  // Arrivals in the bin itself always join its batch. Those of shorter bins join only as
  // ride-alongs, in spare rows, so they count only while the batch has some (a bucket is grown
  // for them only where rows come nearly free, which this estimate leaves out); the oversize bin
  // has none.
  const auto& sizes = spec_.bucket_batch_sizes;
  const int64_t rows = std::min(bins_[bin].rows, bins_[bin].largest_batch);
  const size_t bucket = SmallestAtLeast(sizes, rows);
  const bool spare_rows =
      !exact_lengths_ && !IsOversizeBin(bin) && bucket < sizes.size() && sizes[bucket] > rows;
  double rate_per_us = 0;
  for (size_t j = spare_rows ? 0 : bin; j <= bin; ++j) {
    const Bin& b = bins_[j];
    if (b.mean_gap_us <= 0) continue;  // fewer than two arrivals: no rate known
    // A bin quiet for longer than its mean gap is slowing down: its silence bounds the gap.
    const double quiet_us = static_cast<double>(now_us - b.last_arrival_us);
    rate_per_us += 1.0 / std::max(b.mean_gap_us, quiet_us);
  }
  return rate_per_us > 0 ? 1.0 / rate_per_us : std::numeric_limits<double>::infinity();
}

bool BatchPlanner::Compose(size_t bin_index, const std::vector<size_t>& must, size_t bucket,
                           int64_t now_us, Candidate* candidate) const {
  const int64_t batch_rows = spec_.bucket_batch_sizes[bucket];
  Candidate& c = *candidate;
  c = Candidate{};
  c.bin = bin_index;
  c.take.assign(bins_.size(), 0);
  auto take = [&](size_t j) {
    const InferenceItem& item = bins_[j].requests[c.take[j]]->item;
    ++c.take[j];
    c.rows += item.rows;
    c.real_elements += static_cast<double>(item.rows * item.length);
    if (j != bin_index) ++c.ride_alongs;
  };
  auto next_fits = [&](size_t j) {
    return c.take[j] < bins_[j].requests.size() &&
           c.rows + bins_[j].requests[c.take[j]]->item.rows <= batch_rows;
  };
  for (size_t j = 0; j <= bin_index; ++j) {
    while (c.take[j] < must[j]) take(j);
  }
  if (c.rows > batch_rows) return false;
  // The bin's own requests next, in arrival order.
  while (next_fits(bin_index)) take(bin_index);
  const int64_t own_and_must_rows = c.rows;
  // Then ride-alongs in the spare rows: overdue ones first, oldest first, as they are owed the next
  // batch; then from the longest shorter bin down, as a longer rider saves more padded work later.
  // None where lengths are exact: a rider would be padded to this length.
  while (!exact_lengths_) {
    size_t oldest = bin_index;
    for (size_t j = 0; j < bin_index; ++j) {
      if (!next_fits(j) || !Overdue(*bins_[j].requests[c.take[j]], now_us)) continue;
      if (oldest == bin_index || bins_[j].requests[c.take[j]]->enqueue_us <
                                     bins_[oldest].requests[c.take[oldest]]->enqueue_us) {
        oldest = j;
      }
    }
    if (oldest == bin_index) break;
    take(oldest);
  }
  for (size_t j = exact_lengths_ ? 0 : bin_index; j-- > 0;) {
    while (next_fits(j)) take(j);
  }
  c.shape = BucketShape{batch_rows, bins_[bin_index].length};
  c.cost_us = BinCosts(bin_index)[bucket];
  // A bucket larger than the own rows need holds only when the riders need it (BuildCandidate
  // offers such buckets only where their rows come nearly free).
  const size_t needed = SmallestAtLeast(spec_.bucket_batch_sizes, own_and_must_rows);
  return bucket == needed || (bucket > needed && c.rows > spec_.bucket_batch_sizes[bucket - 1]);
}

BatchPlanner::Candidate BatchPlanner::BuildCandidate(size_t bin_index, int64_t now_us,
                                                     bool take_all, size_t must_own) const {
  const Bin& bin = bins_[bin_index];
  const auto& sizes = spec_.bucket_batch_sizes;
  const InferenceItem& head = bin.requests.front()->item;

  if (IsOversizeBin(bin_index) || spec_.IsOversize(head.rows, bin.length)) {
    // Oversize: the oldest requests that fit the largest batch (the head alone when it does not),
    // at their own exact shape, without riders (they would change it).
    Candidate c;
    c.bin = bin_index;
    c.take.assign(bins_.size(), 0);
    int64_t longest = 0;
    for (const auto& request : bin.requests) {
      if (c.rows > 0 && c.rows + request->item.rows > bin.largest_batch) break;
      c.rows += request->item.rows;
      longest = std::max(longest, request->item.length);
      c.real_elements += static_cast<double>(request->item.rows * request->item.length);
      ++c.take[bin_index];
    }
    c.shape = BucketShape{c.rows, longest};
    c.cost_us = CostUs(c.shape);
    return c;
  }

  // One option per batch bucket from the one holding the requests that must go up to the bin's
  // largest batch: the oldest own requests that fill it, plus riders in its spare rows (beyond the
  // own rows only where Compose allows). The best does the most real work per µs; on a tie the
  // larger serves more. A full bin takes the largest option only.
  int64_t own_rows = 0;
  int64_t must_rows = 0;
  for (size_t i = 0; i < bin.requests.size(); ++i) {
    const int64_t rows = bin.requests[i]->item.rows;
    if (i > 0 && own_rows + rows > bin.largest_batch) break;
    own_rows += rows;
    if (i < must_own) must_rows = own_rows;
  }
  const size_t all_bucket = SmallestAtLeast(sizes, own_rows);
  const size_t first_bucket = take_all ? all_bucket : SmallestAtLeast(sizes, must_rows);
  std::vector<size_t> must(bins_.size(), 0);
  must[bin_index] = std::max<size_t>(must_own, 1);
  Candidate best, option;
  double best_score = -1;
  const size_t last_option_bucket =
      take_all ? all_bucket : std::min(SmallestAtLeast(sizes, bin.largest_batch), sizes.size() - 1);
  // Riders may make the batch larger than its own rows need only where rows come nearly free (the
  // device is not yet busy at that size: small batches cost about one launch); there a short
  // request rides padded now rather than run in a batch of its own later. Beyond, padding a rider
  // costs real device time and its own bin batches it better. Checked before composing: at
  // saturation most such buckets fail it.
  const std::vector<double>& costs = BinCosts(bin_index);
  const double nearly_free_us = kNearlyFreeRows * costs[all_bucket];
  for (size_t bucket = first_bucket; bucket <= last_option_bucket; ++bucket) {
    if (bucket > all_bucket && costs[bucket] > nearly_free_us) continue;
    if (!Compose(bin_index, must, bucket, now_us, &option)) continue;
    const double score = option.real_elements / option.cost_us;
    if (score >= best_score) {
      best_score = score;
      best = std::move(option);
    }
  }
  return best;
}

DispatchDecision BatchPlanner::Take(const Candidate& candidate) {
  DispatchDecision decision;
  decision.padded_shape = candidate.shape;
  decision.ride_alongs = candidate.ride_alongs;
  // The own bin first, so that the own requests lead in arrival order.
  auto take_from = [&](size_t bin_index) {
    Bin& bin = bins_[bin_index];
    for (size_t i = 0; i < candidate.take[bin_index]; ++i) {
      std::shared_ptr<PendingRequest> request = std::move(bin.requests.front());
      bin.requests.pop_front();
      bin.rows -= request->item.rows;
      request->queued = false;
      decision.requests.push_back(std::move(request));
    }
  };
  take_from(candidate.bin);
  for (size_t j = 0; j < bins_.size(); ++j) {
    if (j != candidate.bin) take_from(j);
  }
  queued_ -= decision.requests.size();
  DropStaleDeadlines();
  return decision;
}

size_t BatchPlanner::OldestBin(const std::vector<size_t>& skip) const {
  size_t oldest = bins_.size();
  for (size_t i = 0; i < bins_.size(); ++i) {
    if (skip[i] == bins_[i].requests.size()) continue;
    if (oldest == bins_.size() ||
        bins_[i].requests[skip[i]]->enqueue_us < bins_[oldest].requests[skip[oldest]]->enqueue_us) {
      oldest = i;
    }
  }
  return oldest;
}

BatchPlanner::Candidate BatchPlanner::ArrivalOrderCandidate(size_t last_bin, bool* full) const {
  // The bins are FIFOs, so arrival order is a merge of their heads by enqueue time. The oldest
  // requests go while their rows fit the largest batch at the longest one's length (bins are in
  // length order, so the longest's is the highest bin taken from): on a staircase grid a longer
  // request lowers the limit. Bins after `last_bin` count as empty.
  std::vector<size_t> taken(bins_.size(), 0);
  for (size_t j = last_bin + 1; j < bins_.size(); ++j) taken[j] = bins_[j].requests.size();
  Candidate candidate;
  candidate.bin = OldestBin(taken);
  int64_t longest = 0;
  size_t longest_bin = candidate.bin;
  *full = false;
  for (size_t next = candidate.bin; next < bins_.size(); next = OldestBin(taken)) {
    const PendingRequest& request = *bins_[next].requests[taken[next]];
    const size_t padded_bin = std::max(longest_bin, next);
    if (candidate.rows > 0 && candidate.rows + request.item.rows > bins_[padded_bin].largest_batch) {
      *full = true;
      break;
    }
    ++taken[next];
    candidate.rows += request.item.rows;
    candidate.real_elements += static_cast<double>(request.item.rows * request.item.length);
    longest = std::max(longest, request.item.length);
    longest_bin = padded_bin;
  }
  *full = *full || candidate.rows >= bins_[longest_bin].largest_batch;
  for (size_t j = last_bin + 1; j < bins_.size(); ++j) taken[j] = 0;
  candidate.take = std::move(taken);
  candidate.shape = spec_.BucketFor(candidate.rows, longest);
  candidate.cost_us = CostUs(candidate.shape);
  return candidate;
}

std::optional<DispatchDecision> BatchPlanner::NextInArrivalOrder(int64_t now_us) {
  if (queued_ == 0) return std::nullopt;
  if (exact_lengths_) {
    // Arrival order within each length: the oldest request's length goes once it is due, else the
    // length whose rows fill a batch first (by its oldest request).
    const size_t oldest = OldestBin(std::vector<size_t>(bins_.size(), 0));
    if (Overdue(*bins_[oldest].requests.front(), now_us)) {
      return Take(BuildCandidate(oldest, now_us, /*take_all=*/true));
    }
    size_t chosen = bins_.size();
    for (size_t i = 0; i < bins_.size(); ++i) {
      const Bin& bin = bins_[i];
      if (bin.requests.empty() || bin.rows < bin.largest_batch) continue;
      if (chosen == bins_.size() ||
          bin.requests.front()->enqueue_us < bins_[chosen].requests.front()->enqueue_us) {
        chosen = i;
      }
    }
    if (chosen == bins_.size()) return std::nullopt;
    return Take(BuildCandidate(chosen, now_us, /*take_all=*/true));
  }
  const PendingRequest& oldest = *bins_[OldestBin(std::vector<size_t>(bins_.size(), 0))].requests.front();
  // The batch is full when the next request does not fit, which needs at least the smallest limit
  // of a queued request's bin of rows queued.
  int64_t queued_rows = 0;
  int64_t smallest_limit = std::numeric_limits<int64_t>::max();
  for (const Bin& bin : bins_) {
    queued_rows += bin.rows;
    if (!bin.requests.empty()) smallest_limit = std::min(smallest_limit, bin.largest_batch);
  }
  if (queued_rows < smallest_limit && !Overdue(oldest, now_us)) return std::nullopt;
  bool full = false;
  Candidate candidate = ArrivalOrderCandidate(bins_.size() - 1, &full);
  if (!full && !Overdue(oldest, now_us)) return std::nullopt;
  return Take(candidate);
}

std::optional<DispatchDecision> BatchPlanner::TakeOldestAlone() {
  const size_t oldest = OldestBin(std::vector<size_t>(bins_.size(), 0));
  if (oldest == bins_.size()) return std::nullopt;
  Candidate alone;
  alone.bin = oldest;
  alone.take.assign(bins_.size(), 0);
  alone.take[oldest] = 1;
  const InferenceItem& item = bins_[oldest].requests.front()->item;
  const int64_t extent = spec_.ItemExtent(item.rows, item.length);
  alone.rows = item.rows;
  alone.shape =
      spec_.cuda_graphs_disabled ? BucketShape{item.rows, extent} : spec_.BucketFor(item.rows, extent);
  return Take(alone);
}

std::optional<DispatchDecision> BatchPlanner::NextRagged(int64_t now_us, bool executor_idle) {
  const Bin& bin = bins_.front();
  if (bin.requests.empty()) return std::nullopt;
  Candidate packed;
  packed.take.assign(bins_.size(), 0);
  int64_t tokens = 0;
  bool full = false;
  for (const auto& request : bin.requests) {
    const int64_t rows = packed.rows + request->item.rows;
    const int64_t more_tokens = tokens + request->item.rows * request->item.length;
    // The front request always goes, alone and off the grid when no bucket holds it.
    if (packed.take[0] > 0 && spec_.IsOversize(rows, more_tokens)) {
      full = true;
      break;
    }
    ++packed.take[0];
    packed.rows = rows;
    tokens = more_tokens;
  }
  // Nothing more can join a batch at the largest token size or rows, nor an oversize one.
  full = full || tokens >= spec_.bucket_lengths.back() || packed.rows >= spec_.max_batch_size ||
         spec_.IsOversize(packed.rows, tokens);
  const bool may_go_early =
      options_.policy != BatchingPolicy::kFifo && executor_idle && WaitingCannotHelp(0, now_us);
  if (!full && !Overdue(*bin.requests.front(), now_us) && !may_go_early) return std::nullopt;
  packed.real_elements = static_cast<double>(tokens);
  packed.shape = spec_.BucketFor(packed.rows, tokens);
  packed.cost_us = CostUs(packed.shape);
  // Only where requests stay queued anyway: a batch of all that are queued strands none.
  if (full && packed.take[0] < bin.requests.size()) packed = BestRaggedPrefix(bin, packed);
  return Take(packed);
}

BatchPlanner::Candidate BatchPlanner::BestRaggedPrefix(const Bin& bin, const Candidate& all) const {
  // A full batch that leaves requests queued need not take all that fit: the oldest few
  // that fill a smaller token size nearly exactly may do more real tokens per µs than all of them
  // padded to the next size up (rows bind a batch of short requests some tokens past a size, which
  // pads it by up to the grid's step). The rest lead the next batch. Among scores within
  // kScoreTolerance of the best, the largest batch goes.
  const auto score = [](double real, double cost_us) { return real / std::max(cost_us, 1e-9); };
  std::vector<double> scores;  // of the oldest k + 1 requests; the last is `all`
  scores.reserve(all.take[0]);
  int64_t rows = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i + 1 < all.take[0]; ++i) {
    const InferenceItem& item = bin.requests[i]->item;
    rows += item.rows;
    tokens += item.rows * item.length;
    scores.push_back(score(static_cast<double>(tokens), CostUs(spec_.BucketFor(rows, tokens))));
  }
  scores.push_back(score(all.real_elements, all.cost_us));
  const double best = *std::max_element(scores.begin(), scores.end());
  size_t take = scores.size();
  while (scores[take - 1] * (1.0 + kScoreTolerance) < best) --take;
  if (take == all.take[0]) return all;
  Candidate prefix;
  prefix.take.assign(bins_.size(), 0);
  prefix.take[0] = take;
  tokens = 0;
  for (size_t i = 0; i < take; ++i) {
    const InferenceItem& item = bin.requests[i]->item;
    prefix.rows += item.rows;
    tokens += item.rows * item.length;
  }
  prefix.shape = spec_.BucketFor(prefix.rows, tokens);
  prefix.cost_us = CostUs(prefix.shape);
  prefix.real_elements = static_cast<double>(tokens);
  return prefix;
}

std::optional<DispatchDecision> BatchPlanner::Next(int64_t now_us, bool executor_idle) {
  if (options_.batching_disabled) return TakeOldestAlone();
  if (spec_.ragged) return NextRagged(now_us, executor_idle);
  if (options_.policy == BatchingPolicy::kFifo) return NextInArrivalOrder(now_us);
  // An overdue request goes first, oldest first.
  size_t oldest_overdue = bins_.size();
  for (size_t i = 0; i < bins_.size(); ++i) {
    if (bins_[i].requests.empty() || !Overdue(*bins_[i].requests.front(), now_us)) continue;
    if (oldest_overdue == bins_.size() || bins_[i].requests.front()->enqueue_us <
                                              bins_[oldest_overdue].requests.front()->enqueue_us) {
      oldest_overdue = i;
    }
  }
  std::optional<Candidate> best;
  if (oldest_overdue < bins_.size()) {
    // Below capacity (every due request fits one batch of the due bin's length) the bin's due
    // requests all go: then no request waits longer than the delay plus the batch running when it
    // fell due. Beyond it, the bin may keep some back when a smaller bucket does more real work per
    // µs.
    const int64_t capacity = bins_[oldest_overdue].largest_batch;
    int64_t due_rows = 0;
    size_t own_due = 0;
    // Exact lengths: only the bin's own requests can share its batch.
    const size_t first_bin = exact_lengths_ ? oldest_overdue : 0;
    const size_t end_bin = exact_lengths_ ? oldest_overdue + 1 : bins_.size();
    for (size_t i = first_bin; i < end_bin && due_rows <= capacity; ++i) {
      for (size_t k = 0; k < bins_[i].requests.size() && due_rows <= capacity; ++k) {
        if (!Overdue(*bins_[i].requests[k], now_us)) break;
        due_rows += bins_[i].requests[k]->item.rows;
        if (i == oldest_overdue) own_due = k + 1;
      }
    }
    best = BuildCandidate(oldest_overdue, now_us, /*take_all=*/false,
                          due_rows <= capacity ? own_due : 1);
  } else {
    double best_score = 0;
    for (size_t i = 0; i < bins_.size(); ++i) {
      const Bin& bin = bins_[i];
      if (bin.requests.empty()) continue;
      const bool full = bin.rows >= bin.largest_batch;
      if (!full && !(executor_idle && WaitingCannotHelp(i, now_us))) continue;

      Candidate candidate = BuildCandidate(i, now_us, /*take_all=*/full);
      const double score = RelativeScore(candidate, i);
      const bool better =
          !best || score > best_score * (1 + kScoreTolerance) ||
          (score >= best_score * (1 - kScoreTolerance) &&
           bin.requests.front()->enqueue_us < bins_[best->bin].requests.front()->enqueue_us);
      if (better) {
        best_score = score;
        best = std::move(candidate);
      }
    }
  }
  if (!best) return std::nullopt;
  if (exact_lengths_) return Take(*best);  // arrival order would mix lengths
  // Arrival order's batch instead, when it does more real work per µs relative to a full batch of
  // its length: below capacity, where a batch costs about a launch whatever it holds, one batch of
  // what is queued beats a launch per bin, which is how FIFO keeps its latency low there. Arrival
  // order up to each bucket length is tried, so that one long request does not keep the shorter
  // ones apart; from the due bin's on while a request is due, so that the oldest goes first. It
  // may cost at most twice the planner's batch: the requests that batch would answer then wait at
  // most one batch longer, as the wait bound allows (a due short request is not padded into a long
  // batch). Only on the grid: a batch holding an oversize request runs eagerly.
  std::optional<Candidate> in_arrival_order;
  double arrival_order_score = RelativeScore(*best, best->bin);
  const size_t first_last_bin = oldest_overdue < bins_.size() ? oldest_overdue : 0;
  for (size_t last_bin = first_last_bin; last_bin + 1 < bins_.size(); ++last_bin) {
    if (bins_[last_bin].requests.empty()) continue;
    bool full = false;
    Candidate candidate = ArrivalOrderCandidate(last_bin, &full);
    if (!spec_.HasBucket(candidate.shape) || candidate.cost_us > 2 * best->cost_us) continue;
    const double score = RelativeScore(candidate, BinIndex(candidate.shape.length));
    if (score > arrival_order_score) {
      arrival_order_score = score;
      in_arrival_order = std::move(candidate);
    }
  }
  if (in_arrival_order) return Take(*in_arrival_order);
  return Take(*best);
}

double BatchPlanner::RelativeScore(const Candidate& candidate, size_t bin) const {
  // Real work per µs, relative to the best this length can do: a full batch without padding (for
  // the oversize bin, the grid's largest bucket).
  double score = candidate.real_elements / candidate.cost_us;
  if (!spec_.bucket_lengths.empty()) {
    const BucketShape full{bins_[bin].largest_batch,
                           IsOversizeBin(bin) ? spec_.bucket_lengths.back() : bins_[bin].length};
    score /= static_cast<double>(full.batch * full.length) / CostUs(full);
  }
  return score;
}

bool BatchPlanner::WaitingCannotHelp(size_t bin, int64_t now_us) const {
  const int64_t remaining_us =
      bins_[bin].requests.front()->enqueue_us + options_.max_queue_delay_us - now_us;
  return static_cast<double>(remaining_us) <= ExpectedArrivalGapUs(bin, now_us);
}

std::optional<int64_t> BatchPlanner::NextWakeUp(int64_t now_us, bool executor_idle) const {
  // Arrival order waits for a full batch or the delay, idle executor or not.
  if (options_.policy == BatchingPolicy::kFifo) executor_idle = false;
  std::optional<int64_t> earliest;
  auto consider = [&earliest](int64_t t) {
    if (!earliest || t < *earliest) earliest = t;
  };
  // Unbatched, a queued request is always ready to go.
  if (options_.batching_disabled && queued_ > 0) return now_us;
  for (size_t i = 0; i < bins_.size(); ++i) {
    const Bin& bin = bins_[i];
    if (bin.requests.empty()) continue;
    const int64_t due_us = bin.requests.front()->enqueue_us + options_.max_queue_delay_us;
    if (!executor_idle || due_us <= now_us) {
      consider(due_us);
      continue;
    }
    if (WaitingCannotHelp(i, now_us)) {
      consider(now_us);
      continue;
    }
    // Waiting stops helping once the remaining delay is no longer than the expected gap. The gap
    // only grows while nothing arrives and the remaining delay only shrinks, so the moment is the
    // first at which the condition holds: found by bisection, on whole microseconds.
    int64_t helps = now_us;   // waiting still helps here
    int64_t cannot = due_us;  // and no longer here
    while (cannot - helps > 1) {
      const int64_t mid = helps + (cannot - helps) / 2;
      (WaitingCannotHelp(i, mid) ? cannot : helps) = mid;
    }
    consider(cannot);
  }
  if (!deadlines_.empty()) consider(deadlines_.front().deadline_us);
  return earliest;
}

PriorityPlanner::PriorityPlanner(const ModelSpec& spec, const SchedulerOptions& options,
                                 const BucketCosts& costs) {
  const int64_t levels = std::max<int64_t>(options.priority_levels, 1);
  levels_.reserve(static_cast<size_t>(levels));
  for (int64_t level = 0; level < levels; ++level) levels_.emplace_back(spec, options, costs);
  default_level_ = options.priority_levels > 0 ? static_cast<uint64_t>(options.default_priority_level) : 1;
}

size_t PriorityPlanner::LevelOf(uint64_t priority) const {
  const uint64_t level = priority == 0 || priority > levels_.size() ? default_level_ : priority;
  return static_cast<size_t>(level - 1);
}

void PriorityPlanner::Add(std::shared_ptr<PendingRequest> request) {
  const size_t level = LevelOf(request->priority);
  levels_[level].Add(std::move(request));
}

size_t PriorityPlanner::queued_requests() const {
  size_t queued = 0;
  for (const BatchPlanner& level : levels_) queued += level.queued_requests();
  return queued;
}

void PriorityPlanner::NoteCancellation() {
  for (BatchPlanner& level : levels_) level.NoteCancellation();
}

std::vector<std::shared_ptr<PendingRequest>> PriorityPlanner::TakeDead(int64_t now_us) {
  std::vector<std::shared_ptr<PendingRequest>> dead = levels_.front().TakeDead(now_us);
  for (size_t i = 1; i < levels_.size(); ++i) {
    std::vector<std::shared_ptr<PendingRequest>> more = levels_[i].TakeDead(now_us);
    dead.insert(dead.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return dead;
}

std::optional<DispatchDecision> PriorityPlanner::Next(int64_t now_us, bool executor_idle) {
  for (BatchPlanner& level : levels_) {
    if (level.queued_requests() == 0) continue;
    std::optional<DispatchDecision> decision = level.Next(now_us, executor_idle);
    if (decision) return decision;
  }
  return std::nullopt;
}

void PriorityPlanner::SetCosts(const BucketCosts& costs) {
  for (BatchPlanner& level : levels_) level.SetCosts(costs);
}

std::optional<int64_t> PriorityPlanner::NextWakeUp(int64_t now_us, bool executor_idle) const {
  std::optional<int64_t> earliest;
  for (const BatchPlanner& level : levels_) {
    const std::optional<int64_t> wake_up = level.NextWakeUp(now_us, executor_idle);
    if (wake_up && (!earliest || *wake_up < *earliest)) earliest = wake_up;
  }
  return earliest;
}

}  // namespace graphserve
