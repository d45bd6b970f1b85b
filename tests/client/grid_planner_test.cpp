// The grid planner of graphserve-cli plan-grid on synthetic figures: traffic from histograms, the
// cost fit, the saturation model against hand-computed figures, and the search.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graphserve/client/grid_planner.h"

namespace graphserve::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Bucket times from a known cost, at every point of `batches` × `lengths`.
std::vector<MeasuredBucket> Timed(const CostFit& truth, const std::vector<int64_t>& batches,
                                  const std::vector<int64_t>& lengths) {
  std::vector<MeasuredBucket> measured;
  for (int64_t length : lengths) {
    for (int64_t batch : batches) measured.push_back({{batch, length}, truth.Seconds({batch, length})});
  }
  return measured;
}

CostFit Truth(double c0, double c1, double c2) {
  CostFit truth;
  truth.c0 = c0;
  truth.c1 = c1;
  truth.c2 = c2;
  return truth;
}

CostFit Fit(const std::vector<MeasuredBucket>& measured) {
  CostFit fit;
  std::string error;
  EXPECT_TRUE(FitCost(measured, &fit, &error)) << error;
  return fit;
}

Traffic OneRowTraffic(std::vector<LengthBin> bins) {
  Traffic traffic;
  traffic.lengths = std::move(bins);
  traffic.mean_rows = 1;
  return traffic;
}

// ---- Grid points --------------------------------------------------------------------------------

TEST(GridPlannerTest, TokenBudgetAddsBatchesAboveTheMaximumOnlyWhereTheyFit) {
  const ModelLimits limits{4, 64};
  const BucketGrid grid{{1, 4, 8}, {32, 64}, 256};
  const std::vector<Shape> points = GridPoints(grid, limits);
  const std::vector<Shape> expected = {{1, 32}, {4, 32}, {8, 32}, {1, 64}, {4, 64}};
  EXPECT_EQ(points, expected);
  EXPECT_EQ(LargestBatchAt(grid, limits, 32), 8);
  EXPECT_EQ(LargestBatchAt(grid, limits, 64), 4);
  EXPECT_EQ(LargestBatchAt(grid, limits, 16), 0);
  // Without the budget, 8 > max_batch_size is no point at all.
  EXPECT_EQ(GridPoints(BucketGrid{{1, 4, 8}, {32, 64}, 0}, limits).size(), 4u);
  EXPECT_EQ(GridConfigText(grid),
            "buckets {\n  batch_sizes: [1, 4, 8]\n  sequence_lengths: [32, 64]\n  max_batch_tokens: 256\n}\n");
}

// ---- Traffic ------------------------------------------------------------------------------------

TEST(GridPlannerTest, TrafficFromCumulativeHistogramsClippedToTheLimits) {
  Traffic traffic;
  std::string error;
  ASSERT_TRUE(TrafficFromHistograms({{8, 2}, {16, 5}, {32, 5}, {64, 6}, {kInf, 6}},
                                    {{1, 4}, {2, 6}, {4, 6}, {kInf, 6}}, ModelLimits{4, 40}, &traffic, &error))
      << error;
  ASSERT_EQ(traffic.lengths.size(), 3u);
  EXPECT_EQ(traffic.lengths[0].low, 0);
  EXPECT_EQ(traffic.lengths[0].high, 8);
  EXPECT_EQ(traffic.lengths[0].requests, 2);
  EXPECT_EQ(traffic.lengths[1].low, 8);
  EXPECT_EQ(traffic.lengths[1].high, 16);
  EXPECT_EQ(traffic.lengths[1].requests, 3);
  // (16, 32] is empty and left out; the request of 33..64 tokens cannot be longer than
  // max_sequence_length 40.
  EXPECT_EQ(traffic.lengths[2].low, 32);
  EXPECT_EQ(traffic.lengths[2].high, 40);
  EXPECT_EQ(traffic.lengths[2].requests, 1);
  EXPECT_EQ(traffic.requests(), 6);
  // 4 requests of 1 row, 2 of 2 rows.
  EXPECT_DOUBLE_EQ(traffic.mean_rows, 8.0 / 6.0);
}

TEST(GridPlannerTest, TrafficRefusesFallingCountsAndNoRequests) {
  Traffic traffic;
  std::string error;
  EXPECT_FALSE(TrafficFromHistograms({{8, 3}, {16, 2}}, {{1, 3}}, ModelLimits{4, 64}, &traffic, &error));
  EXPECT_NE(error.find("fall"), std::string::npos) << error;
  EXPECT_FALSE(TrafficFromHistograms({{8, 0}, {kInf, 0}}, {{1, 0}, {kInf, 0}}, ModelLimits{4, 64}, &traffic, &error));
  EXPECT_NE(error.find("no requests"), std::string::npos) << error;
}

// ---- Cost fit -----------------------------------------------------------------------------------

TEST(GridPlannerTest, FitRecoversKnownCoefficients) {
  const CostFit truth = Truth(50e-6, 2e-9, 1e-11);
  const CostFit fit = Fit(Timed(truth, {1, 4, 16}, {16, 64, 256}));
  EXPECT_NEAR(fit.c0, truth.c0, truth.c0 * 1e-6);
  EXPECT_NEAR(fit.c1, truth.c1, truth.c1 * 1e-6);
  EXPECT_NEAR(fit.c2, truth.c2, truth.c2 * 1e-6);
  EXPECT_EQ(fit.points, 9);
  EXPECT_LT(fit.worst_relative_error, 1e-6);
  // And predicts a shape it never saw.
  EXPECT_NEAR(fit.Seconds({64, 512}), truth.Seconds({64, 512}), truth.Seconds({64, 512}) * 1e-6);
}

TEST(GridPlannerTest, FitReportsItsWorstRelativeError) {
  const CostFit truth = Truth(50e-6, 2e-9, 1e-11);
  std::vector<MeasuredBucket> measured = Timed(truth, {1, 4, 16}, {16, 64, 256});
  for (MeasuredBucket& bucket : measured) {
    if (bucket.shape == Shape{4, 64}) bucket.seconds *= 1.5;  // one noisy measurement
  }
  const CostFit fit = Fit(measured);
  double worst = 0;
  Shape worst_shape;
  for (const MeasuredBucket& bucket : measured) {
    const double relative = std::abs(fit.Seconds(bucket.shape) - bucket.seconds) / bucket.seconds;
    if (relative > worst) {
      worst = relative;
      worst_shape = bucket.shape;
    }
  }
  EXPECT_GT(fit.worst_relative_error, 0.05);
  EXPECT_DOUBLE_EQ(fit.worst_relative_error, worst);
  EXPECT_EQ(fit.worst_shape, worst_shape);
  EXPECT_EQ(fit.worst_shape, (Shape{4, 64}));
}

TEST(GridPlannerTest, FitCoefficientsAreNeverNegative) {
  // Times that fall with size at one length would want a negative term; none is allowed.
  const std::vector<MeasuredBucket> measured = {
      {{1, 16}, 100e-6}, {{2, 16}, 90e-6}, {{4, 16}, 80e-6}, {{1, 64}, 120e-6}, {{4, 64}, 300e-6}};
  const CostFit fit = Fit(measured);
  EXPECT_GE(fit.c0, 0);
  EXPECT_GE(fit.c1, 0);
  EXPECT_GE(fit.c2, 0);
  for (const MeasuredBucket& bucket : measured) EXPECT_GT(fit.Seconds(bucket.shape), 0);
}

TEST(GridPlannerTest, TooFewMeasuredBucketsAreRefusedNotFitted) {
  CostFit fit;
  std::string error;
  // One length: the b·L and b·L² terms cannot be told apart.
  EXPECT_FALSE(FitCost({{{1, 16}, 1e-4}, {{2, 16}, 2e-4}, {{4, 16}, 4e-4}}, &fit, &error));
  EXPECT_NE(error.find("at least 3 shapes at 2 or more lengths"), std::string::npos) << error;
  EXPECT_NE(error.find("3 shape(s) at 1 length(s)"), std::string::npos) << error;
  EXPECT_FALSE(FitCost({{{1, 16}, 1e-4}, {{1, 32}, 2e-4}}, &fit, &error));
  EXPECT_FALSE(FitCost({}, &fit, &error));
  EXPECT_FALSE(FitCost({{{1, 16}, 1e-4}, {{1, 32}, 0}, {{2, 32}, 1e-4}}, &fit, &error));
  EXPECT_NE(error.find("1x32"), std::string::npos) << error;
  // Three shapes of the same b·L leave c0 and c1 apart only by the L² term: not enough either.
  EXPECT_FALSE(FitCost({{{4, 8}, 1e-4}, {{2, 16}, 1e-4}, {{1, 32}, 1e-4}}, &fit, &error));
  EXPECT_NE(error.find("do not separate"), std::string::npos) << error;
}

// ---- Throughput model ---------------------------------------------------------------------------

// Costs measured at the shapes used; the fit (zero) is never consulted.
CostModel MeasuredOnly(std::vector<MeasuredBucket> measured) { return CostModel(measured, CostFit()); }

TEST(GridPlannerTest, ThroughputOfASmallGridByHand) {
  const ModelLimits limits{4, 64};
  const CostModel cost = MeasuredOnly({{{4, 32}, 0.004}, {{4, 64}, 0.012}});
  // 10 requests of 1..32 tokens and 10 of 33..64.
  Traffic traffic = OneRowTraffic({{0, 32, 10}, {32, 64, 10}});
  const GridFigures figures = Evaluate(BucketGrid{{1, 4}, {32, 64}, 0}, limits, traffic, cost);
  // Real tokens: 10 × 16.5 + 10 × 48.5 = 650; padded: 10 × 32 + 10 × 64 = 960.
  // Time: 10 rows × 0.004 / 4 + 10 rows × 0.012 / 4 = 0.04 s.
  EXPECT_EQ(figures.graphs, 4);
  EXPECT_DOUBLE_EQ(figures.padding, 960.0 / 650.0);
  EXPECT_DOUBLE_EQ(figures.tokens_per_s, 650.0 / 0.04);
  EXPECT_EQ(figures.largest_bucket, (Shape{4, 64}));
  EXPECT_EQ(figures.largest_bucket_tokens, 256);
  EXPECT_EQ(figures.used_buckets, 2);
  EXPECT_EQ(figures.fitted_costs, 0);

  // Two rows a request: twice the tokens in twice the time.
  traffic.mean_rows = 2;
  const GridFigures doubled = Evaluate(BucketGrid{{1, 4}, {32, 64}, 0}, limits, traffic, cost);
  EXPECT_DOUBLE_EQ(doubled.tokens_per_s, figures.tokens_per_s);
  EXPECT_DOUBLE_EQ(doubled.padding, figures.padding);
}

TEST(GridPlannerTest, ThroughputSplitsABinAtAGridLengthInsideIt) {
  const ModelLimits limits{4, 64};
  const CostModel cost = MeasuredOnly({{{4, 48}, 0.006}, {{4, 64}, 0.012}});
  // 10 requests of 33..64 tokens: 5 of 33..48 go to 48, 5 of 49..64 to 64.
  const GridFigures figures =
      Evaluate(BucketGrid{{4}, {48, 64}, 0}, limits, OneRowTraffic({{32, 64, 10}}), cost);
  const double real = 5 * 40.5 + 5 * 56.5;
  const double padded = 5 * 48.0 + 5 * 64.0;
  const double seconds = 5 * 0.006 / 4 + 5 * 0.012 / 4;
  EXPECT_DOUBLE_EQ(figures.padding, padded / real);
  EXPECT_DOUBLE_EQ(figures.tokens_per_s, real / seconds);
}

TEST(GridPlannerTest, ThroughputUsesTheTokenBudgetsLargerBatchAndTheFitWhereUnmeasured) {
  const ModelLimits limits{4, 64};
  CostFit fit = Truth(0.002, 0, 0);  // any unmeasured bucket: 2 ms
  const CostModel cost({{{4, 32}, 0.004}, {{4, 64}, 0.012}}, fit);
  const GridFigures figures =
      Evaluate(BucketGrid{{1, 4, 8}, {32, 64}, 256}, limits, OneRowTraffic({{0, 32, 10}, {32, 64, 10}}), cost);
  // Short requests run 8 at a time at the fitted 2 ms: 10 × 0.002 / 8 + 10 × 0.012 / 4.
  EXPECT_DOUBLE_EQ(figures.tokens_per_s, 650.0 / (10 * 0.002 / 8 + 10 * 0.012 / 4));
  EXPECT_EQ(figures.fitted_costs, 1);
  EXPECT_EQ(figures.used_buckets, 2);
  EXPECT_EQ(figures.graphs, 5);
  // 20 rows in 10/8 + 10/4 full batches.
  EXPECT_DOUBLE_EQ(figures.rows_per_batch, 20.0 / (10.0 / 8 + 10.0 / 4));
}

// ---- Search -------------------------------------------------------------------------------------

// A GPU-like cost: a launch floor, then linear and attention terms.
CostModel GpuLikeCost(const ModelLimits& limits) {
  const CostFit truth = Truth(100e-6, 1e-9, 2e-12);
  std::vector<int64_t> batches;
  for (int64_t b = 1; b <= limits.max_batch_size; b *= 2) batches.push_back(b);
  return CostModel(Timed(truth, batches, {16, 32, 64, 128, 256, 512}), Fit(Timed(truth, {1, 8}, {16, 512})));
}

Plan Search(const ModelLimits& limits, const Traffic& traffic, const CostModel& cost, SearchOptions options) {
  Plan plan;
  std::string error;
  EXPECT_TRUE(SearchGrid(limits, traffic, cost, options, &plan, &error)) << error;
  return plan;
}

TEST(GridPlannerTest, ShortTrafficGetsALargeTokenBudgetAndShortLengths) {
  const ModelLimits limits{8, 512};
  const CostModel cost = GpuLikeCost(limits);
  const Traffic traffic = OneRowTraffic({{0, 8, 300}, {8, 16, 700}});
  const BucketGrid today{{1, 2, 4, 8}, {16, 32, 48, 64, 80, 96, 128, 192, 256, 384, 512}, 0};
  SearchOptions options;
  options.max_bucket_tokens = 8 * 512;  // today's largest bucket
  const Plan plan = Search(limits, traffic, cost, options);
  // As large a budget as memory allows: 256 rows of 16 tokens in one graph.
  EXPECT_EQ(plan.grid.max_batch_tokens, 4096);
  EXPECT_EQ(LargestBatchAt(plan.grid, limits, 16), 256);
  const std::vector<int64_t> lengths = {8, 16, 512};
  EXPECT_EQ(plan.grid.sequence_lengths, lengths);
  EXPECT_EQ(plan.grid.batch_sizes.front(), 1);
  EXPECT_NE(std::find(plan.grid.batch_sizes.begin(), plan.grid.batch_sizes.end(), 8), plan.grid.batch_sizes.end());
  EXPECT_LE(plan.figures.largest_bucket_tokens, options.max_bucket_tokens);
  const GridFigures now = Evaluate(today, limits, traffic, cost);
  EXPECT_GT(plan.figures.tokens_per_s, 5 * now.tokens_per_s);
  EXPECT_LT(plan.figures.padding, now.padding);
}

TEST(GridPlannerTest, SearchNeverExceedsTheMemoryBudget) {
  const ModelLimits limits{8, 512};
  const CostModel cost = GpuLikeCost(limits);
  const Traffic traffic = OneRowTraffic({{0, 16, 100}, {16, 48, 300}, {48, 128, 200}, {128, 512, 20}});
  const double bytes_per_token = 3000;
  for (double budget_mib : {12.0, 20.0, 50.0, 200.0}) {
    SearchOptions options;
    options.max_bucket_tokens = static_cast<int64_t>(budget_mib * 1024 * 1024 / bytes_per_token);
    // Token budgets offered beyond the memory budget are passed over, not taken.
    if (budget_mib == 20.0) options.token_budgets = {1 << 12, 1 << 16, 1 << 20};
    const Plan plan = Search(limits, traffic, cost, options);
    EXPECT_LE(plan.figures.largest_bucket_tokens * bytes_per_token, budget_mib * 1024 * 1024) << budget_mib;
    for (const Shape& point : GridPoints(plan.grid, limits)) {
      EXPECT_LE(point.batch * point.length, options.max_bucket_tokens) << ShapeLabel(point);
    }
    EXPECT_EQ(plan.grid.sequence_lengths.back(), 512);
  }
  // Below max_batch_size × max_sequence_length, which every grid holds: refused.
  SearchOptions options;
  options.max_bucket_tokens = 8 * 512 - 1;
  Plan plan;
  std::string error;
  EXPECT_FALSE(SearchGrid(limits, traffic, cost, options, &plan, &error));
  EXPECT_NE(error.find("4096"), std::string::npos) << error;
}

TEST(GridPlannerTest, TodaysGridFoundAgainHasTheModelsFigure) {
  // A cost that batching does not lower (per row c1·L): no budget helps, so the fewest graphs win and
  // the search's answer is exactly the grid a config would name today.
  const ModelLimits limits{4, 128};
  const CostModel cost({}, Truth(0, 1e-6, 0));
  const Traffic traffic = OneRowTraffic({{0, 64, 30}, {64, 128, 10}});
  const BucketGrid today{{1, 2, 3, 4}, {64, 128}, 0};
  SearchOptions options;
  options.max_lengths = 2;
  options.max_bucket_tokens = 1 << 14;
  const Plan plan = Search(limits, traffic, cost, options);
  EXPECT_EQ(plan.grid.batch_sizes, today.batch_sizes);
  EXPECT_EQ(plan.grid.sequence_lengths, today.sequence_lengths);
  EXPECT_EQ(plan.grid.max_batch_tokens, 0);
  const GridFigures now = Evaluate(today, limits, traffic, cost);
  EXPECT_EQ(plan.figures.tokens_per_s, now.tokens_per_s);
  EXPECT_EQ(plan.figures.padding, now.padding);
  EXPECT_EQ(plan.figures.graphs, now.graphs);
}

TEST(GridPlannerTest, TodaysGridIsKeptWhenNothingSearchedBeatsIt) {
  // Today's three lengths split a histogram bin; the search may choose only two lengths, at bin ends.
  const ModelLimits limits{4, 128};
  const CostModel cost({}, Truth(0, 1e-6, 0));
  const Traffic traffic = OneRowTraffic({{0, 64, 30}, {64, 128, 10}});
  SearchOptions options;
  options.max_lengths = 2;
  options.max_bucket_tokens = 4 * 128;
  options.current = BucketGrid{{1, 2, 4}, {32, 64, 128}, 0};
  const Plan plan = Search(limits, traffic, cost, options);
  EXPECT_EQ(plan.grid.sequence_lengths, options.current.sequence_lengths);
  EXPECT_EQ(plan.grid.batch_sizes, options.current.batch_sizes);
  const GridFigures now = Evaluate(options.current, limits, traffic, cost);
  EXPECT_EQ(plan.figures.tokens_per_s, now.tokens_per_s);
  EXPECT_EQ(plan.figures.padding, now.padding);
  // Without it, the best two lengths are slower.
  options.current = BucketGrid();
  EXPECT_LT(Search(limits, traffic, cost, options).figures.tokens_per_s, now.tokens_per_s);
  // A current grid beyond the memory budget is no candidate.
  options.current = BucketGrid{{1, 2, 4, 8}, {32, 64, 128}, 1024};
  EXPECT_EQ(Search(limits, traffic, cost, options).grid.max_batch_tokens, 0);
}

TEST(GridPlannerTest, LengthsAreTheBestOfEverySubsetOfTheBounds) {
  // Against brute force: every set of at most 3 lengths from the bins' ends, ending at 512.
  const ModelLimits limits{8, 512};
  const CostModel cost = GpuLikeCost(limits);
  const Traffic traffic =
      OneRowTraffic({{0, 16, 50}, {16, 32, 400}, {32, 48, 30}, {48, 96, 250}, {96, 256, 60}, {256, 512, 5}});
  SearchOptions options;
  options.max_lengths = 3;
  options.max_bucket_tokens = 8 * 512;
  options.token_budgets = {0};
  const Plan plan = Search(limits, traffic, cost, options);
  const std::vector<int64_t> ends = {16, 32, 48, 96, 256};
  double best = 0;
  for (unsigned mask = 0; mask < (1u << ends.size()); ++mask) {
    std::vector<int64_t> lengths;
    for (size_t i = 0; i < ends.size(); ++i) {
      if (mask & (1u << i)) lengths.push_back(ends[i]);
    }
    if (lengths.size() > 2) continue;
    lengths.push_back(512);
    best = std::max(best, Evaluate(BucketGrid{{1, 2, 4, 8}, lengths, 0}, limits, traffic, cost).tokens_per_s);
  }
  EXPECT_NEAR(plan.figures.tokens_per_s, best, best * 1e-12);
  EXPECT_EQ(plan.grid.sequence_lengths.size(), 3u);
}

// ---- Ragged models ------------------------------------------------------------------------------

std::vector<MeasuredBucket> RaggedTimed(double c0, double c1, int64_t rows,
                                        const std::vector<int64_t>& tokens) {
  std::vector<MeasuredBucket> measured;
  for (int64_t size : tokens) measured.push_back({{rows, size}, c0 + c1 * static_cast<double>(size)});
  return measured;
}

// time(T) = c0 + c1·T for every bucket, measured or not.
CostFit RaggedFit(double c0, double c1) {
  CostFit fit;
  std::string error;
  EXPECT_TRUE(FitRaggedCost(RaggedTimed(c0, c1, 1, {256, 1024}), &fit, &error)) << error;
  return fit;
}

TEST(RaggedGridPlannerTest, TheFitRecoversALinearCostOfTokensWhateverTheRows) {
  CostFit fit;
  std::string error;
  ASSERT_TRUE(FitRaggedCost(RaggedTimed(5e-4, 2e-7, 64, {256, 1024, 4096}), &fit, &error)) << error;
  EXPECT_TRUE(fit.ragged);
  EXPECT_NEAR(fit.c0, 5e-4, 1e-9);
  EXPECT_NEAR(fit.c1, 2e-7, 1e-12);
  EXPECT_NEAR(fit.Seconds({1, 2048}), fit.Seconds({64, 2048}), 1e-15);  // rows cost nothing
  EXPECT_FALSE(FitRaggedCost(RaggedTimed(5e-4, 2e-7, 64, {256}), &fit, &error));
  EXPECT_NE(error.find("2 token sizes"), std::string::npos) << error;
}

TEST(RaggedGridPlannerTest, AtSaturationABatchLeavesAboutHalfARequestUnfilled) {
  // Every request 1 row of exactly 100 tokens (lengths 100..100): E[X²] / 2E[X] = 50 unfilled.
  const Traffic traffic = OneRowTraffic({{99, 100, 1000}});
  const ModelLimits limits{64, 128, true};
  const BucketGrid grid{{64}, {16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024}, 1024};
  const CostModel cost(RaggedTimed(5e-4, 2e-7, 64, {256, 1024}), RaggedFit(5e-4, 2e-7));
  const GridFigures figures = EvaluateRagged(grid, limits, traffic, cost);
  EXPECT_NEAR(figures.tokens_per_s, (1024.0 - 50) / (5e-4 + 2e-7 * 1024), 1e-6);
  EXPECT_NEAR(figures.padding, 1024.0 / 974, 1e-9);
  EXPECT_EQ(figures.graphs, static_cast<int64_t>(grid.sequence_lengths.size()));
}

TEST(RaggedGridPlannerTest, ABatchFullByItsRowsFillsTheTokenSizeBelowWhereThatDoesMorePerSecond) {
  // 8 real rows of 100 tokens (800) would pad to 1024; time by tokens makes 768 filled to a residual
  // of 50 (718 real tokens) the better batch, as the server's planner would choose it.
  const Traffic traffic = OneRowTraffic({{99, 100, 1000}});
  const ModelLimits limits{8, 128, true};
  const BucketGrid grid{{5, 9}, {16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024}, 1024};
  const CostModel by_tokens(RaggedTimed(5e-5, 2e-7, 9, {256, 1024}), RaggedFit(5e-5, 2e-7));
  GridFigures figures = EvaluateRagged(grid, limits, traffic, by_tokens);
  EXPECT_NEAR(figures.tokens_per_s, 718 / (5e-5 + 2e-7 * 768), 1e-6);
  EXPECT_NEAR(figures.padding, 768.0 / 718, 1e-9);
  EXPECT_EQ(figures.graphs, 26);
  // A fixed cost that dominates: padding is nearly free, so the batch keeps its 800 tokens.
  const CostModel by_launch(RaggedTimed(5e-3, 2e-7, 9, {256, 1024}), RaggedFit(5e-3, 2e-7));
  figures = EvaluateRagged(grid, limits, traffic, by_launch);
  EXPECT_NEAR(figures.tokens_per_s, 800 / (5e-3 + 2e-7 * 1024), 1e-6);
  EXPECT_NEAR(figures.padding, 1024.0 / 800, 1e-9);
}

std::vector<MeasuredBucket> RaggedTimedWithRows(double c0, double c1, double c2,
                                                const std::vector<int64_t>& rows,
                                                const std::vector<int64_t>& tokens) {
  std::vector<MeasuredBucket> measured;
  for (int64_t r : rows) {
    for (int64_t t : tokens) {
      measured.push_back({{r, t}, c0 + c1 * static_cast<double>(t) + c2 * static_cast<double>(r)});
    }
  }
  return measured;
}

TEST(RaggedGridPlannerTest, TheFitPricesRowsOnlyWhereSeveralRowSizesWereMeasured) {
  CostFit fit;
  std::string error;
  ASSERT_TRUE(FitRaggedCost(RaggedTimedWithRows(5e-4, 2e-7, 1e-6, {9, 257}, {64, 1024, 16384}), &fit, &error))
      << error;
  EXPECT_NEAR(fit.c0, 5e-4, 1e-9);
  EXPECT_NEAR(fit.c1, 2e-7, 1e-12);
  EXPECT_NEAR(fit.c2, 1e-6, 1e-11);
  EXPECT_LT(fit.worst_relative_error, 1e-9);
  // One row size cannot tell a row from the fixed cost: rows are left out.
  ASSERT_TRUE(FitRaggedCost(RaggedTimedWithRows(5e-4, 2e-7, 1e-6, {257}, {64, 1024}), &fit, &error)) << error;
  EXPECT_EQ(fit.c2, 0);
  EXPECT_NEAR(fit.c0, 5e-4 + 257e-6, 1e-9);
}

TEST(RaggedGridPlannerTest, RowsThatCostGetTheStaircaseSoThatALoneRequestReplaysFewRows) {
  // Requests of 40 tokens alone replay the 48-token bucket, in 9 rows with the staircase and 513
  // without: 504 rows at 1 µs each.
  const Traffic traffic = OneRowTraffic({{39, 40, 100}});
  const ModelLimits limits{512, 128, true};
  const std::vector<MeasuredBucket> measured = RaggedTimedWithRows(5e-4, 1e-7, 1e-6, {9, 513}, {256, 4096});
  CostFit fit;
  std::string error;
  ASSERT_TRUE(FitRaggedCost(measured, &fit, &error)) << error;
  const CostModel cost(measured, fit);
  SearchOptions options;
  options.max_bucket_tokens = 8192;
  Plan plan;
  ASSERT_TRUE(SearchRaggedGrid(limits, traffic, cost, options, &plan, &error)) << error;
  EXPECT_EQ(plan.grid.batch_sizes, (std::vector<int64_t>{9, 33, 129, 513}));
  EXPECT_NEAR(plan.figures.lone_request_seconds, 5e-4 + 1e-7 * 48 + 1e-6 * 9, 1e-12);
  const GridFigures one_row_size = EvaluateRagged(
      BucketGrid{{513}, plan.grid.sequence_lengths, plan.grid.max_batch_tokens}, limits, traffic, cost);
  EXPECT_NEAR(one_row_size.lone_request_seconds, 5e-4 + 1e-7 * 48 + 1e-6 * 513, 1e-12);
  EXPECT_NEAR(one_row_size.tokens_per_s, plan.figures.tokens_per_s, plan.figures.tokens_per_s * 1e-3);
}

TEST(RaggedGridPlannerTest, TheSearchTakesTheLargestBudgetWhileAFixedCostDominates) {
  const Traffic traffic = OneRowTraffic({{0, 64, 500}, {64, 128, 100}});
  const ModelLimits limits{512, 128, true};
  CostFit fit;
  std::string error;
  ASSERT_TRUE(FitRaggedCost(RaggedTimed(7e-4, 1e-7, 512, {256, 4096}), &fit, &error)) << error;
  const CostModel cost(RaggedTimed(7e-4, 1e-7, 512, {256, 4096}), fit);
  SearchOptions options;
  options.max_bucket_tokens = 8192;
  Plan plan;
  ASSERT_TRUE(SearchRaggedGrid(limits, traffic, cost, options, &plan, &error)) << error;
  EXPECT_EQ(plan.grid.max_batch_tokens, 8192);
  // Rows cost nothing in this fit: one row size, 512 rows and the spare, the fewest graphs.
  EXPECT_EQ(plan.grid.batch_sizes, (std::vector<int64_t>{513}));
  EXPECT_EQ(plan.grid.sequence_lengths.back(), 8192);
  options.max_bucket_tokens = 64;  // below one row of max_sequence_length
  EXPECT_FALSE(SearchRaggedGrid(limits, traffic, cost, options, &plan, &error));
  EXPECT_NE(error.find("max_sequence_length 128"), std::string::npos) << error;
}

}  // namespace
}  // namespace graphserve::planner
