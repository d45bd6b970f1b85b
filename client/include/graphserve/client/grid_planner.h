// Planning a model's bucket grid from its traffic (graphserve-cli plan-grid, issue #17 item 4): pure
// arithmetic on numbers the server exports, with no I/O, so that every figure is testable.
//
// What it promises:
//  - FitCost fits time(b, L) = c0 + c1·b·L + c2·b·L² (c ≥ 0; the last term is attention's) to measured
//    bucket times by least relative squares, and says how far it misses the measured points; it
//    refuses (with a reason) to fit what does not determine the three terms.
//  - Evaluate models a grid at saturation: every request binned to the smallest grid length that
//    holds it, batches always full at the largest batch size of that length, so a row costs
//    cost(b, L) / b and only length padding counts; lengths uniform over the integers of each
//    histogram bin, rows independent of length. Its figures are comparable between grids, not a
//    forecast of latency (partly empty batches at low load are not modelled).
//  - SearchGrid returns, among the grids it considers, one of highest expected real tokens/s whose
//    largest bucket stays within a token cap (the memory budget): lengths chosen from the length
//    histogram's bounds by dynamic programming (at most max_lengths of them, the last always
//    max_sequence_length), token budgets from powers of two, batch sizes in the default grid's
//    steps of 1.5 (BatchSizeSteps) up to budget / shortest length, max_batch_size always among
//    them; and today's grid, kept when nothing beats it.
// Value types and free functions; thread-compatible (no shared state).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graphserve/client/metrics_text.h"

namespace graphserve::planner {

// A bucket: batch size × sequence length.
struct Shape {
  int64_t batch = 0;
  int64_t length = 0;
  bool operator<(const Shape& other) const {
    return std::pair(batch, length) < std::pair(other.batch, other.length);
  }
  bool operator==(const Shape& other) const {
    return batch == other.batch && length == other.length;
  }
};

// "32x128", the server's bucket label.
std::string ShapeLabel(const Shape& shape);

struct ModelLimits {
  int64_t max_batch_size = 1;
  int64_t max_sequence_length = 1;
  // Triton's ragged batching (the config's allow_ragged_batch): buckets are rows × total tokens,
  // planned by the Ragged* functions below.
  bool ragged = false;
};

// A config's `buckets { ... }`: the points are (b, L) for b in batch_sizes and L in sequence_lengths
// with b <= max_batch_size, or b·L <= max_batch_tokens when that is set (0: none).
struct BucketGrid {
  std::vector<int64_t> batch_sizes;       // ascending
  std::vector<int64_t> sequence_lengths;  // ascending
  int64_t max_batch_tokens = 0;
};

// The grid's points, by length then batch size.
std::vector<Shape> GridPoints(const BucketGrid& grid, const ModelLimits& limits);
// The largest batch size of the grid at `length` (0 when it has none there).
int64_t LargestBatchAt(const BucketGrid& grid, const ModelLimits& limits, int64_t length);
// The config.pbtxt fragment `buckets { batch_sizes: [...] sequence_lengths: [...] max_batch_tokens: N }`.
std::string GridConfigText(const BucketGrid& grid);

// ---- Traffic ---------------------------------------------------------------------------------------

// Requests whose length is one of the integers low+1 .. high.
struct LengthBin {
  int64_t low = 0;
  int64_t high = 0;
  double requests = 0;
};

// What the server saw: requests by length, and the mean rows of a request.
struct Traffic {
  std::vector<LengthBin> lengths;  // ascending, disjoint, within 1 .. max_sequence_length
  double mean_rows = 1.0;
  double requests() const;
};

// Traffic from graphserve_request_length and graphserve_request_rows as scraped (ascending le,
// +Inf last). Bins above the model's limits are clipped to them (the server refuses larger
// requests); empty bins are dropped. False, saying why, when a histogram is malformed (counts
// falling with le) or holds no requests.
bool TrafficFromHistograms(const std::vector<HistogramBucket>& lengths,
                           const std::vector<HistogramBucket>& rows, const ModelLimits& limits,
                           Traffic* traffic, std::string* error);

// ---- Cost ------------------------------------------------------------------------------------------

struct MeasuredBucket {
  Shape shape;
  double seconds = 0;
};

// time(b, L) = c0 + c1·b·L + c2·b·L², in seconds.
struct CostFit {
  double c0 = 0;
  double c1 = 0;
  double c2 = 0;
  // max |fit - measured| / measured over the points fitted, and where.
  double worst_relative_error = 0;
  Shape worst_shape;
  int points = 0;
  // FitRaggedCost's: time = c0 + c1·T + c2·R on a bucket's total tokens T (Shape::length) and rows
  // R (Shape::batch).
  bool ragged = false;

  double Seconds(const Shape& shape) const;
};

// Least relative squares with every coefficient >= 0. False, saying why, with fewer than 3 distinct
// shapes or 2 distinct lengths, or non-positive times.
bool FitCost(const std::vector<MeasuredBucket>& measured, CostFit* fit, std::string* error);

// Bucket times: the measured ones where a bucket was measured, the fit elsewhere.
class CostModel {
 public:
  CostModel(const std::vector<MeasuredBucket>& measured, const CostFit& fit);
  double Seconds(const Shape& shape) const;
  bool Measured(const Shape& shape) const { return measured_.count(shape) > 0; }
  const CostFit& fit() const { return fit_; }

 private:
  std::map<Shape, double> measured_;
  CostFit fit_;
};

// ---- Throughput ------------------------------------------------------------------------------------

struct GridFigures {
  int64_t graphs = 0;                 // grid points
  double padding = 0;                 // padded / real elements (>= 1)
  double tokens_per_s = 0;            // expected real tokens (rows × length) per second
  Shape largest_bucket;               // of most elements: what the graph memory is sized by
  int64_t largest_bucket_tokens = 0;
  int64_t fitted_costs = 0;           // buckets the model ran whose cost came from the fit
  int64_t used_buckets = 0;           // buckets the model ran (the largest batch of each length used)
  double rows_per_batch = 0;          // real rows a batch holds on average, as the model fills them
  double lone_request_seconds = 0;    // ragged: a request alone, its bucket's expected time
};

// The grid at saturation, as the header says. A request longer than every grid length is charged at
// the largest (it would run eagerly); the search never proposes such a grid.
GridFigures Evaluate(const BucketGrid& grid, const ModelLimits& limits, const Traffic& traffic,
                     const CostModel& cost);

// ---- Search ----------------------------------------------------------------------------------------

struct SearchOptions {
  int max_lengths = 8;
  // Largest bucket (b·L) allowed: the memory budget in padded tokens.
  int64_t max_bucket_tokens = 0;
  // max_batch_tokens to try; empty: 0 and every power of two up to max_bucket_tokens.
  std::vector<int64_t> token_budgets;
  // Today's grid, a candidate too (when within the cap), so that a proposal is never worse than it
  // under the model; empty lengths: none.
  BucketGrid current;
};

struct Plan {
  BucketGrid grid;
  GridFigures figures;
};

// The best grid as the header says; among equals (within 0.1 %) the one of fewer graphs. False,
// saying why, when no grid fits the cap (it must hold max_batch_size × max_sequence_length).
bool SearchGrid(const ModelLimits& limits, const Traffic& traffic, const CostModel& cost,
                const SearchOptions& options, Plan* plan, std::string* error);

// ---- Ragged models ---------------------------------------------------------------------------------
// A ragged model's bucket (Shape: batch = rows, length = total tokens) costs about its tokens, and a
// little per row: on the CPU a row is an offset and a pooled vector, but FlashAttention launches
// work for every row of a bucket, empty ones included. Its grid is row sizes by token sizes.

// time = c0 + c1·T + c2·R in seconds over the measured buckets' total tokens T and rows R, by least
// relative squares with every coefficient >= 0; c2 = 0 unless 2 or more row sizes were measured.
// False, saying why, with fewer than 2 distinct token sizes or non-positive times.
bool FitRaggedCost(const std::vector<MeasuredBucket>& measured, CostFit* fit, std::string* error);

// The ragged grid at saturation: each batch packs requests in arrival order until the next would
// not fit the largest token size (or the rows, one kept for the tail), leaving on average
// E[X²] / (2·E[X]) tokens of a request's X = rows × length unfilled, and is padded to the smallest
// token size holding what it packed, or, where that does more real tokens per second (as the
// server's planner chooses), fills the token size below to the same residual. Its rows are the
// smallest row size holding them and the filler's. `cost` prices (rows, tokens) buckets.
// Comparable between grids, not a latency forecast.
GridFigures EvaluateRagged(const BucketGrid& grid, const ModelLimits& limits, const Traffic& traffic,
                           const CostModel& cost);

// Among token budgets (powers of two from max_sequence_length up to the cap, and today's), each
// with token sizes in steps of 1.5 from 16 (DefaultRaggedTokenSizes) and rows either max_batch_size
// + 1 alone or the default staircase (DefaultRaggedRowSizes): the one of highest expected real
// tokens/s; among equals (within 0.1 %) the one whose lone request replays fastest (by more than
// 1 %), then the one of fewer graphs. False, saying why, when even max_sequence_length exceeds the
// cap.
bool SearchRaggedGrid(const ModelLimits& limits, const Traffic& traffic, const CostModel& cost,
                      const SearchOptions& options, Plan* plan, std::string* error);

}  // namespace graphserve::planner
