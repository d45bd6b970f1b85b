// The grid planner's arithmetic: traffic from histograms, the cost fit, the saturation model and the
// search (see grid_planner.h for what each promises).
#include "graphserve/client/grid_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <tuple>

#include "graphserve/engine/model_spec.h"

namespace graphserve::planner {

namespace {

// The mean of the integers low+1 .. high.
double MeanInteger(int64_t low, int64_t high) {
  return (static_cast<double>(low) + 1.0 + static_cast<double>(high)) / 2.0;
}

// A histogram bound as the integer it admits up to: +Inf and anything beyond `cap` is `cap`.
int64_t BoundAtMost(double le, int64_t cap) {
  if (!(le < static_cast<double>(cap))) return cap;  // +Inf and NaN too
  return std::max<int64_t>(0, static_cast<int64_t>(std::floor(le)));
}

// Non-cumulative bins (low, high] from cumulative buckets, bounds capped at `cap`; a bin that admits
// no integer passes its count on to the next. False when counts fall.
bool Bins(const std::vector<HistogramBucket>& buckets, int64_t cap, const char* name,
          std::vector<LengthBin>* bins, std::string* error) {
  double previous_count = 0;
  double carried = 0;
  int64_t low = 0;
  for (const HistogramBucket& bucket : buckets) {
    // Prometheus' counts are exact integers in doubles: any fall is a malformed histogram.
    if (bucket.count < previous_count) {
      *error = std::string(name) + ": cumulative counts fall at le=" + std::to_string(bucket.le);
      return false;
    }
    carried += bucket.count - previous_count;
    previous_count = bucket.count;
    const int64_t high = BoundAtMost(bucket.le, cap);
    if (high <= low) continue;
    if (carried > 0) bins->push_back({low, high, carried});
    carried = 0;
    low = high;
  }
  // Requests counted above the cap (possible only when the last bound admits none): at the cap.
  if (carried > 0) {
    if (!bins->empty() && bins->back().high == cap) {
      bins->back().requests += carried;
    } else {
      bins->push_back({std::min(low, cap - 1), cap, carried});
    }
  }
  return true;
}

// The normal equations of `rows` (each a row of the design, scaled) restricted to the columns in
// `use`; false when singular (relative pivot below 1e-10).
bool SolveLeastSquares(const std::vector<std::array<double, 3>>& rows,
                       const std::array<bool, 3>& use, std::array<double, 3>* solution) {
  std::vector<int> columns;
  for (int j = 0; j < 3; ++j) {
    if (use[j]) columns.push_back(j);
  }
  const size_t n = columns.size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (const auto& row : rows) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < n; ++k) a[i][k] += row[columns[i]] * row[columns[k]];
      a[i][n] += row[columns[i]];  // the target of every scaled row is 1
    }
  }
  double scale = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(a[i][i]));
  for (size_t i = 0; i < n; ++i) {
    size_t pivot = i;
    for (size_t r = i + 1; r < n; ++r) {
      if (std::abs(a[r][i]) > std::abs(a[pivot][i])) pivot = r;
    }
    if (!(std::abs(a[pivot][i]) > 1e-10 * scale)) return false;
    std::swap(a[i], a[pivot]);
    for (size_t r = 0; r < n; ++r) {
      if (r == i) continue;
      const double factor = a[r][i] / a[i][i];
      for (size_t k = i; k <= n; ++k) a[r][k] -= factor * a[i][k];
    }
  }
  solution->fill(0.0);
  for (size_t i = 0; i < n; ++i) (*solution)[columns[i]] = a[i][n] / a[i][i];
  return true;
}

// Non-negative least squares over 3 unknowns: the best of the least-squares fits on each subset of
// the `allowed` terms whose coefficients are all >= 0 (the optimum is one of them); the others are 0.
std::array<double, 3> NonNegativeFit(const std::vector<std::array<double, 3>>& rows,
                                     const std::array<bool, 3>& allowed) {
  double best_residual = std::numeric_limits<double>::infinity();
  std::array<double, 3> best{};
  for (int subset = 1; subset < 8; ++subset) {
    const std::array<bool, 3> use = {(subset & 1) != 0, (subset & 2) != 0, (subset & 4) != 0};
    if ((use[0] && !allowed[0]) || (use[1] && !allowed[1]) || (use[2] && !allowed[2])) continue;
    std::array<double, 3> solution;
    if (!SolveLeastSquares(rows, use, &solution)) continue;
    if (*std::min_element(solution.begin(), solution.end()) < 0) continue;
    double residual = 0;
    for (const auto& row : rows) {
      const double miss = row[0] * solution[0] + row[1] * solution[1] + row[2] * solution[2] - 1.0;
      residual += miss * miss;
    }
    if (residual < best_residual) {
      best_residual = residual;
      best = solution;
    }
  }
  return best;
}

// A least-squares design of relative errors: per measured shape its mean time, and its three terms
// divided by that time, each column scaled to norm one.
struct RelativeDesign {
  RelativeDesign(const std::map<Shape, std::pair<double, int>>& by_shape,
                 const std::function<std::array<double, 3>(const Shape&)>& terms) {
    for (const auto& [shape, sum] : by_shape) {
      const double seconds = sum.first / sum.second;
      std::array<double, 3> row = terms(shape);
      for (int j = 0; j < 3; ++j) {
        row[j] /= seconds;
        norms[j] += row[j] * row[j];
      }
      rows.push_back(row);
      points.push_back({shape, seconds});
    }
    for (double& norm : norms) norm = std::sqrt(norm);
    for (auto& row : rows) {
      for (int j = 0; j < 3; ++j) row[j] /= norms[j];
    }
  }
  std::vector<std::array<double, 3>> rows;
  std::vector<std::pair<Shape, double>> points;  // shape, its mean seconds
  std::array<double, 3> norms{};
};

// The coefficients of `scaled` (a solution over the design's scaled columns) into `fit`, with its
// worst relative error over the measured points.
void FinishFit(const std::array<double, 3>& scaled, const RelativeDesign& design, CostFit* fit) {
  fit->c0 = scaled[0] / design.norms[0];
  fit->c1 = scaled[1] / design.norms[1];
  fit->c2 = scaled[2] / design.norms[2];
  fit->points = static_cast<int>(design.points.size());
  for (const auto& [shape, seconds] : design.points) {
    const double relative = std::abs(fit->Seconds(shape) - seconds) / seconds;
    if (relative >= fit->worst_relative_error) {
      fit->worst_relative_error = relative;
      fit->worst_shape = shape;
    }
  }
}

std::vector<int64_t> PowersOfTwoUpTo(int64_t limit) {
  std::vector<int64_t> powers;
  for (int64_t power = 1; power <= limit && power > 0; power *= 2) powers.push_back(power);
  return powers;
}

// The largest batch of a searched grid at `length`: max_batch_size, or the largest of the default
// grid's batch sizes (steps of 1.5) s with s·length <= budget.
int64_t SearchedLargestBatch(int64_t max_batch_size, int64_t budget, int64_t length) {
  int64_t largest = max_batch_size;
  for (int64_t size : BatchSizeSteps(budget / length)) largest = std::max(largest, size);
  return largest;
}

// The grid a search builds from its lengths and token budget; the budget becomes 0 where it adds
// no point.
BucketGrid SearchedGrid(const ModelLimits& limits, std::vector<int64_t> lengths, int64_t budget) {
  BucketGrid grid;
  grid.sequence_lengths = std::move(lengths);
  std::set<int64_t> sizes = {limits.max_batch_size};
  for (int64_t size : BatchSizeSteps(limits.max_batch_size)) sizes.insert(size);
  const int64_t shortest = grid.sequence_lengths.front();
  for (int64_t size : BatchSizeSteps(budget / shortest)) {
    if (size > limits.max_batch_size) {
      sizes.insert(size);
      grid.max_batch_tokens = budget;
    }
  }
  grid.batch_sizes.assign(sizes.begin(), sizes.end());
  return grid;
}

// The lengths among `candidates` (ascending, the last one mandatory) that minimise the time of
// `weights` (rows whose length bin ends at each candidate) when a row at length L costs
// `row_seconds[L's index]`: at most `max_lengths` of them, the fewest among equals.
std::vector<int64_t> BestLengths(const std::vector<int64_t>& candidates, const std::vector<double>& weights,
                                 const std::vector<double>& row_seconds, int max_lengths) {
  const size_t m = candidates.size();
  std::vector<double> prefix(m + 1, 0.0);
  for (size_t i = 0; i < m; ++i) prefix[i + 1] = prefix[i] + weights[i];
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  const size_t most = std::min<size_t>(std::max(max_lengths, 1), m);
  // time[k][q]: the least time of the rows up to candidate q with k+1 lengths, the last at q.
  std::vector<std::vector<double>> time(most, std::vector<double>(m, kInfinity));
  std::vector<std::vector<size_t>> previous(most, std::vector<size_t>(m, 0));
  for (size_t q = 0; q < m; ++q) time[0][q] = prefix[q + 1] * row_seconds[q];
  for (size_t k = 1; k < most; ++k) {
    for (size_t q = k; q < m; ++q) {
      for (size_t p = k - 1; p < q; ++p) {
        const double total = time[k - 1][p] + (prefix[q + 1] - prefix[p + 1]) * row_seconds[q];
        if (total < time[k][q]) {
          time[k][q] = total;
          previous[k][q] = p;
        }
      }
    }
  }
  size_t best = 0;
  for (size_t k = 1; k < most; ++k) {
    if (time[k][m - 1] < time[best][m - 1] * (1 - 1e-12)) best = k;
  }
  std::vector<int64_t> lengths;
  size_t q = m - 1;
  for (size_t k = best + 1; k-- > 0;) {
    lengths.push_back(candidates[q]);
    q = previous[k][q];
  }
  std::reverse(lengths.begin(), lengths.end());
  return lengths;
}

}  // namespace

std::string ShapeLabel(const Shape& shape) {
  return std::to_string(shape.batch) + "x" + std::to_string(shape.length);
}

std::vector<Shape> GridPoints(const BucketGrid& grid, const ModelLimits& limits) {
  std::vector<Shape> points;
  for (int64_t length : grid.sequence_lengths) {
    for (int64_t batch : grid.batch_sizes) {
      if (batch <= limits.max_batch_size ||
          (grid.max_batch_tokens > 0 && batch * length <= grid.max_batch_tokens)) {
        points.push_back({batch, length});
      }
    }
  }
  return points;
}

int64_t LargestBatchAt(const BucketGrid& grid, const ModelLimits& limits, int64_t length) {
  int64_t largest = 0;
  for (const Shape& point : GridPoints(grid, limits)) {
    if (point.length == length) largest = std::max(largest, point.batch);
  }
  return largest;
}

std::string GridConfigText(const BucketGrid& grid) {
  const auto list = [](const std::vector<int64_t>& values) {
    std::string text = "[";
    for (size_t i = 0; i < values.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(values[i]);
    return text + "]";
  };
  std::string text = "buckets {\n  batch_sizes: " + list(grid.batch_sizes) +
                     "\n  sequence_lengths: " + list(grid.sequence_lengths) + "\n";
  if (grid.max_batch_tokens > 0) text += "  max_batch_tokens: " + std::to_string(grid.max_batch_tokens) + "\n";
  return text + "}\n";
}

double Traffic::requests() const {
  double total = 0;
  for (const LengthBin& bin : lengths) total += bin.requests;
  return total;
}

bool TrafficFromHistograms(const std::vector<HistogramBucket>& lengths,
                           const std::vector<HistogramBucket>& rows, const ModelLimits& limits,
                           Traffic* traffic, std::string* error) {
  Traffic result;
  if (!Bins(lengths, limits.max_sequence_length, "graphserve_request_length", &result.lengths, error)) {
    return false;
  }
  std::vector<LengthBin> row_bins;
  if (!Bins(rows, limits.max_batch_size, "graphserve_request_rows", &row_bins, error)) return false;
  double requests = 0;
  double rows_sum = 0;
  for (const LengthBin& bin : row_bins) {
    requests += bin.requests;
    rows_sum += bin.requests * MeanInteger(bin.low, bin.high);
  }
  if (result.requests() == 0 || requests == 0) {
    *error = "no requests recorded yet (graphserve_request_length and graphserve_request_rows are empty)";
    return false;
  }
  result.mean_rows = rows_sum / requests;
  *traffic = std::move(result);
  return true;
}

double CostFit::Seconds(const Shape& shape) const {
  if (ragged) return c0 + c1 * static_cast<double>(shape.length) + c2 * static_cast<double>(shape.batch);
  const double tokens = static_cast<double>(shape.batch) * static_cast<double>(shape.length);
  return c0 + c1 * tokens + c2 * tokens * static_cast<double>(shape.length);
}

bool FitCost(const std::vector<MeasuredBucket>& measured, CostFit* fit, std::string* error) {
  std::map<Shape, std::pair<double, int>> by_shape;
  std::set<int64_t> lengths;
  for (const MeasuredBucket& bucket : measured) {
    if (!(bucket.seconds > 0) || !std::isfinite(bucket.seconds)) {
      *error = "bucket " + ShapeLabel(bucket.shape) + " has no positive execution time";
      return false;
    }
    by_shape[bucket.shape].first += bucket.seconds;
    ++by_shape[bucket.shape].second;
    lengths.insert(bucket.shape.length);
  }
  if (by_shape.size() < 3 || lengths.size() < 2) {
    *error = "the cost model needs measured buckets of at least 3 shapes at 2 or more lengths; the server "
             "reports " + std::to_string(by_shape.size()) + " shape(s) at " + std::to_string(lengths.size()) +
             " length(s)";
    return false;
  }
  // Least squares of relative errors: each row divided by its measured time, columns scaled to one.
  const RelativeDesign design(by_shape, [](const Shape& shape) {
    const double tokens = static_cast<double>(shape.batch) * static_cast<double>(shape.length);
    return std::array<double, 3>{1.0, tokens, tokens * static_cast<double>(shape.length)};
  });
  std::array<double, 3> unconstrained;
  if (!SolveLeastSquares(design.rows, {true, true, true}, &unconstrained)) {
    *error = "the measured buckets do not separate the cost model's three terms (c0, b·L, b·L²)";
    return false;
  }
  CostFit result;
  FinishFit(NonNegativeFit(design.rows, {true, true, true}), design, &result);
  *fit = result;
  return true;
}

CostModel::CostModel(const std::vector<MeasuredBucket>& measured, const CostFit& fit) : fit_(fit) {
  for (const MeasuredBucket& bucket : measured) measured_[bucket.shape] = bucket.seconds;
}

double CostModel::Seconds(const Shape& shape) const {
  const auto found = measured_.find(shape);
  return found != measured_.end() ? found->second : fit_.Seconds(shape);
}

GridFigures Evaluate(const BucketGrid& grid, const ModelLimits& limits, const Traffic& traffic,
                     const CostModel& cost) {
  GridFigures figures;
  const std::vector<Shape> points = GridPoints(grid, limits);
  figures.graphs = static_cast<int64_t>(points.size());
  for (const Shape& point : points) {
    if (point.batch * point.length > figures.largest_bucket_tokens) {
      figures.largest_bucket_tokens = point.batch * point.length;
      figures.largest_bucket = point;
    }
  }
  std::vector<int64_t> lengths = grid.sequence_lengths;
  std::sort(lengths.begin(), lengths.end());
  double real = 0, padded = 0, seconds = 0, all_rows = 0, batches = 0;
  std::set<Shape> used;
  for (const LengthBin& bin : traffic.lengths) {
    // The bin split at every grid length inside it, its requests shared by the integers each part holds.
    std::vector<int64_t> cuts;
    for (int64_t length : lengths) {
      if (length > bin.low && length < bin.high) cuts.push_back(length);
    }
    cuts.push_back(bin.high);
    int64_t low = bin.low;
    for (int64_t high : cuts) {
      const double rows = bin.requests * traffic.mean_rows * static_cast<double>(high - low) /
                          static_cast<double>(bin.high - bin.low);
      const auto holder = std::lower_bound(lengths.begin(), lengths.end(), high);
      const int64_t length = holder != lengths.end() ? *holder : high;
      const int64_t batch = std::max<int64_t>(LargestBatchAt(grid, limits, length), 1);
      const Shape shape{batch, length};
      used.insert(shape);
      real += rows * MeanInteger(low, high);
      padded += rows * static_cast<double>(length);
      seconds += rows * cost.Seconds(shape) / static_cast<double>(batch);
      all_rows += rows;
      batches += rows / static_cast<double>(batch);
      low = high;
    }
  }
  figures.used_buckets = static_cast<int64_t>(used.size());
  for (const Shape& shape : used) figures.fitted_costs += cost.Measured(shape) ? 0 : 1;
  figures.padding = real > 0 ? padded / real : 0;
  figures.tokens_per_s = seconds > 0 ? real / seconds : 0;
  figures.rows_per_batch = batches > 0 ? all_rows / batches : 0;
  return figures;
}

bool SearchGrid(const ModelLimits& limits, const Traffic& traffic, const CostModel& cost,
                const SearchOptions& options, Plan* plan, std::string* error) {
  const int64_t mandatory = limits.max_batch_size * limits.max_sequence_length;
  if (options.max_bucket_tokens < mandatory) {
    *error = "the memory budget holds a largest bucket of " + std::to_string(options.max_bucket_tokens) +
             " padded tokens, below the " + std::to_string(mandatory) +
             " of max_batch_size x max_sequence_length, which every grid holds";
    return false;
  }
  // Candidate lengths: where the traffic's length bins end, and max_sequence_length.
  std::map<int64_t, double> rows_at;  // rows whose bin ends at each candidate
  for (const LengthBin& bin : traffic.lengths) {
    rows_at[std::min(bin.high, limits.max_sequence_length)] += bin.requests * traffic.mean_rows;
  }
  rows_at[limits.max_sequence_length] += 0;
  std::vector<int64_t> candidates;
  std::vector<double> weights;
  for (const auto& [length, rows] : rows_at) {
    candidates.push_back(length);
    weights.push_back(rows);
  }
  std::vector<int64_t> budgets = options.token_budgets;
  if (budgets.empty()) {
    budgets = PowersOfTwoUpTo(options.max_bucket_tokens);
    budgets.push_back(0);
  }
  std::vector<Plan> plans;
  for (int64_t budget : budgets) {
    if (budget < 0 || budget > options.max_bucket_tokens) continue;
    std::vector<double> row_seconds;
    for (int64_t length : candidates) {
      const int64_t batch = SearchedLargestBatch(limits.max_batch_size, budget, length);
      row_seconds.push_back(cost.Seconds({batch, length}) / static_cast<double>(batch));
    }
    Plan candidate;
    candidate.grid = SearchedGrid(limits, BestLengths(candidates, weights, row_seconds, options.max_lengths),
                                  budget);
    candidate.figures = Evaluate(candidate.grid, limits, traffic, cost);
    plans.push_back(std::move(candidate));
  }
  if (!options.current.sequence_lengths.empty()) {
    Plan today;
    today.grid = options.current;
    today.figures = Evaluate(today.grid, limits, traffic, cost);
    if (today.figures.largest_bucket_tokens <= options.max_bucket_tokens) plans.push_back(std::move(today));
  }
  if (plans.empty()) {
    *error = "no token budget to try is within the memory budget";
    return false;
  }
  double fastest = 0;
  for (const Plan& candidate : plans) fastest = std::max(fastest, candidate.figures.tokens_per_s);
  const Plan* best = nullptr;
  for (const Plan& candidate : plans) {
    if (candidate.figures.tokens_per_s < fastest * 0.999) continue;
    const auto rank = [](const Plan& p) {
      return std::tuple(p.figures.graphs, p.figures.largest_bucket_tokens, p.grid.max_batch_tokens);
    };
    if (best == nullptr || rank(candidate) < rank(*best)) best = &candidate;
  }
  *plan = *best;
  return true;
}

bool FitRaggedCost(const std::vector<MeasuredBucket>& measured, CostFit* fit, std::string* error) {
  std::map<Shape, std::pair<double, int>> by_shape;
  std::set<int64_t> sizes, row_sizes;
  for (const MeasuredBucket& bucket : measured) {
    if (!(bucket.seconds > 0) || !std::isfinite(bucket.seconds)) {
      *error = "bucket " + ShapeLabel(bucket.shape) + " has a non-positive time";
      return false;
    }
    by_shape[bucket.shape].first += bucket.seconds;
    ++by_shape[bucket.shape].second;
    sizes.insert(bucket.shape.length);
    row_sizes.insert(bucket.shape.batch);
  }
  if (sizes.size() < 2) {
    *error = "a ragged model's fit needs buckets of at least 2 token sizes measured, got " +
             std::to_string(sizes.size());
    return false;
  }
  // y = c0 + c1·T + c2·R by least relative squares, every coefficient >= 0: the best fit over the
  // subsets of terms whose coefficients come out non-negative. Rows (FlashAttention launches work
  // for every row of a bucket) only where 2 or more row sizes were measured, else c2 = 0.
  const RelativeDesign design(by_shape, [](const Shape& shape) {
    return std::array<double, 3>{1.0, static_cast<double>(shape.length), static_cast<double>(shape.batch)};
  });
  CostFit result;
  result.ragged = true;
  FinishFit(NonNegativeFit(design.rows, {true, true, row_sizes.size() >= 2}), design, &result);
  *fit = result;
  return true;
}

GridFigures EvaluateRagged(const BucketGrid& grid, const ModelLimits& limits, const Traffic& traffic,
                           const CostModel& cost) {
  GridFigures figures;
  figures.graphs = static_cast<int64_t>(grid.batch_sizes.size() * grid.sequence_lengths.size());
  if (grid.sequence_lengths.empty() || grid.batch_sizes.empty() || traffic.requests() <= 0) return figures;
  // A request's tokens X = rows × length: E[X] and E[X²], lengths uniform within each bin.
  double mean_length = 0, mean_square = 0;
  for (const LengthBin& bin : traffic.lengths) {
    const double low = static_cast<double>(bin.low) + 1, high = static_cast<double>(bin.high);
    const double share = bin.requests / traffic.requests();
    mean_length += share * (low + high) / 2;
    mean_square += share * (low * low + low * high + high * high) / 3;
  }
  const double mean_tokens = traffic.mean_rows * mean_length;
  const double mean_square_tokens = traffic.mean_rows * traffic.mean_rows * mean_square;
  const int64_t budget = grid.sequence_lengths.back();
  const int64_t largest_rows = grid.batch_sizes.back();
  // Packed until the next request would not fit: the unfilled tokens are a request's residual.
  const double unfilled = std::min(mean_square_tokens / (2 * mean_tokens), static_cast<double>(budget) / 2);
  const double by_tokens = static_cast<double>(budget) - unfilled;
  const double by_rows = static_cast<double>(largest_rows - 1) / traffic.mean_rows * mean_tokens;
  const double packed = std::max(1.0, std::min(by_tokens, by_rows));
  // The bucket of `real` tokens padded to `tokens`: its rows and the filler's, at the smallest row
  // size holding them.
  const auto bucket = [&](double real, int64_t tokens) {
    const auto needed =
        std::min<int64_t>(largest_rows, static_cast<int64_t>(std::ceil(real / mean_length)) + 1);
    return Shape{grid.batch_sizes[SmallestAtLeast(grid.batch_sizes, needed)], tokens};
  };
  const size_t up = SmallestAtLeast(grid.sequence_lengths, static_cast<int64_t>(std::ceil(packed)));
  double real = packed;
  Shape used = bucket(packed, grid.sequence_lengths[up]);
  // The planner may instead fill the token size below, a request's residual short of it, where that
  // does more real tokens per second (BatchPlanner::BestRaggedPrefix; 2% its tolerance).
  if (up > 0) {
    const auto below = static_cast<double>(grid.sequence_lengths[up - 1]);
    const double filled = std::max(1.0, below - std::min(unfilled, below / 2));
    const Shape smaller = bucket(filled, grid.sequence_lengths[up - 1]);
    if (filled / cost.Seconds(smaller) > packed / cost.Seconds(used) * 1.02) {
      real = filled;
      used = smaller;
    }
  }
  figures.largest_bucket = Shape{largest_rows, budget};
  figures.largest_bucket_tokens = budget;
  figures.padding = static_cast<double>(used.length) / real;
  figures.tokens_per_s = real / cost.Seconds(used);
  figures.used_buckets = 1;
  figures.fitted_costs = cost.Measured(used) ? 0 : 1;
  figures.rows_per_batch = real / mean_length;
  // Below saturation: a request alone replays the smallest bucket holding its tokens and rows and
  // the filler's, each length of a bin as likely.
  double lone_seconds = 0;
  const auto rows_alone = std::max<int64_t>(1, static_cast<int64_t>(std::llround(traffic.mean_rows)));
  for (const LengthBin& bin : traffic.lengths) {
    const int64_t width = bin.high - bin.low;
    if (width <= 0 || bin.requests <= 0) continue;
    double bin_seconds = 0;
    for (int64_t length = bin.low + 1; length <= bin.high; ++length) {
      const int64_t tokens = std::min(budget, rows_alone * length);
      const int64_t size = grid.sequence_lengths[SmallestAtLeast(grid.sequence_lengths, tokens)];
      const int64_t needed = std::min(largest_rows, RaggedRowsNeeded(rows_alone, tokens, size));
      bin_seconds += cost.Seconds(Shape{grid.batch_sizes[SmallestAtLeast(grid.batch_sizes, needed)], size});
    }
    lone_seconds += bin.requests / traffic.requests() * bin_seconds / static_cast<double>(width);
  }
  figures.lone_request_seconds = lone_seconds;
  (void)limits;
  return figures;
}

namespace {

// Saturation first (real tokens/s, equal within 0.1 %), then a lone request's replay (equal within
// 1 %), then fewer graphs.
bool RaggedPlanIsBetter(const GridFigures& candidate, const GridFigures& best) {
  if (candidate.tokens_per_s > best.tokens_per_s * 1.001) return true;
  if (candidate.tokens_per_s < best.tokens_per_s * 0.999) return false;
  if (candidate.lone_request_seconds < best.lone_request_seconds * 0.99) return true;
  if (candidate.lone_request_seconds > best.lone_request_seconds * 1.01) return false;
  return candidate.graphs < best.graphs;
}

}  // namespace

bool SearchRaggedGrid(const ModelLimits& limits, const Traffic& traffic, const CostModel& cost,
                      const SearchOptions& options, Plan* plan, std::string* error) {
  const int64_t cap = options.max_bucket_tokens > 0 ? options.max_bucket_tokens : kDefaultMaxBatchTokens;
  if (limits.max_sequence_length > cap) {
    *error = "max_sequence_length " + std::to_string(limits.max_sequence_length) +
             " exceeds the memory cap of " + std::to_string(cap) + " tokens: no ragged bucket holds one row";
    return false;
  }
  std::set<int64_t> budgets;
  for (int64_t budget = 1; budget <= cap; budget *= 2) {
    if (budget >= limits.max_sequence_length) budgets.insert(budget);
    if (budget > cap / 2) break;
  }
  budgets.insert(cap);
  if (!options.current.sequence_lengths.empty() && options.current.sequence_lengths.back() <= cap) {
    budgets.insert(options.current.sequence_lengths.back());
  }
  // Rows are chosen from the costs: one row size (the fewest graphs) or the default staircase,
  // which saves a batch of few rows the work of empty ones where rows cost (c2 > 0).
  const std::vector<std::vector<int64_t>> row_choices = {{RaggedLargestRows(limits.max_batch_size)},
                                                         DefaultRaggedRowSizes(limits.max_batch_size)};
  bool found = false;
  for (int64_t budget : budgets) {
    for (const std::vector<int64_t>& rows : row_choices) {
      Plan candidate;
      candidate.grid.batch_sizes = rows;
      candidate.grid.sequence_lengths = DefaultRaggedTokenSizes(limits.max_sequence_length, budget);
      candidate.grid.max_batch_tokens = budget;
      candidate.figures = EvaluateRagged(candidate.grid, limits, traffic, cost);
      if (!found || RaggedPlanIsBetter(candidate.figures, plan->figures)) {
        *plan = std::move(candidate);
        found = true;
      }
    }
  }
  return true;
}

}  // namespace graphserve::planner
