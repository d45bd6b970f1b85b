// LearnedBucketCosts: warm-up figures corrected by replays, both ways, at a bounded pace, deaf to
// outliers, and bounds for the buckets never replayed.
#include "graphserve/server/batching/learned_bucket_costs.h"

#include <gtest/gtest.h>

namespace graphserve {
namespace {

constexpr BucketShape k1x8{1, 8};
constexpr BucketShape k1x16{1, 16};
constexpr BucketShape k4x16{4, 16};
constexpr BucketShape k8x64{8, 64};

// Replays `shape` at `time_us` until its estimate is within 1% of it; returns how many it took.
int ReplaysToReach(LearnedBucketCosts* costs, const BucketShape& shape, double time_us) {
  for (int replays = 1; replays <= 100; ++replays) {
    costs->Observe(shape, time_us);
    if (std::abs(costs->Costs().at(shape) / time_us - 1.0) < 0.01) return replays;
  }
  return -1;
}

TEST(LearnedBucketCostsTest, AWarmUpFigure150TimesTooHighIsRightAfterFiveReplays) {
  // The busy start-up of issue #43: 1x8 recorded at 648 ms against a real 4.4 ms.
  LearnedBucketCosts costs({{k1x8, 648'000}});
  EXPECT_EQ(ReplaysToReach(&costs, k1x8, 4'400), 5);
  EXPECT_TRUE(costs.Settled(k1x8));
}

TEST(LearnedBucketCostsTest, AWarmUpFigureTooLowIsCorrectedUpwardsAsFast) {
  LearnedBucketCosts costs({{k1x8, 30}});
  EXPECT_EQ(ReplaysToReach(&costs, k1x8, 4'400), 5);
}

TEST(LearnedBucketCostsTest, OneReplayMovesTheEstimateByAtMostHalfOrDouble) {
  LearnedBucketCosts costs({{k1x16, 1'000}});
  costs.Observe(k1x16, 1'000'000);
  EXPECT_DOUBLE_EQ(costs.Costs().at(k1x16), 2'000);
  LearnedBucketCosts low({{k1x16, 1'000}});
  low.Observe(k1x16, 1);
  EXPECT_DOUBLE_EQ(low.Costs().at(k1x16), 500);
  EXPECT_FALSE(low.Settled(k1x16));
}

TEST(LearnedBucketCostsTest, TwoOutliersAmongFiveReplaysDoNotMoveASettledEstimate) {
  LearnedBucketCosts costs({{k1x16, 100}});
  for (int i = 0; i < 5; ++i) costs.Observe(k1x16, 100);
  ASSERT_DOUBLE_EQ(costs.Costs().at(k1x16), 100);
  costs.Observe(k1x16, 50'000);  // a preempted thread
  costs.Observe(k1x16, 1);       // a clock that stepped
  EXPECT_DOUBLE_EQ(costs.Costs().at(k1x16), 100);
  // A lasting change is followed: the median of the last five moves once three of them agree.
  costs.Observe(k1x16, 300);
  costs.Observe(k1x16, 300);
  costs.Observe(k1x16, 300);
  EXPECT_DOUBLE_EQ(costs.Costs().at(k1x16), 300);
}

TEST(LearnedBucketCostsTest, ABucketNeverReplayedIsBoundedByTheReplayedOnes) {
  // 1x16 poisoned at start-up and never replayed (its requests are refused); 4x16, which it fits
  // in, replays at 400 us: 1x16 costs no more than that.
  LearnedBucketCosts costs({{k1x16, 60'000}, {k4x16, 400}, {k8x64, 5'000}});
  for (int i = 0; i < 3; ++i) costs.Observe(k4x16, 400);
  EXPECT_DOUBLE_EQ(costs.Costs().at(k1x16), 400);
  // 8x64 holds 8 times 4x16's elements: no more than twice that scaled (6,400), its 5,000 stands;
  // and no less than the settled 400 of a bucket that fits in it.
  EXPECT_DOUBLE_EQ(costs.Costs().at(k8x64), 5'000);
  LearnedBucketCosts too_low({{k4x16, 400}, {k8x64, 10}});
  for (int i = 0; i < 3; ++i) too_low.Observe(k4x16, 400);
  EXPECT_DOUBLE_EQ(too_low.Costs().at(k8x64), 400);
  LearnedBucketCosts too_high({{k4x16, 400}, {k8x64, 900'000}});
  too_high.Observe(k4x16, 400);
  EXPECT_DOUBLE_EQ(too_high.Costs().at(k8x64), 2 * 400 * 8);
}

TEST(LearnedBucketCostsTest, AnUnsettledFigureRaisesNoOtherBucket) {
  // 1x16 racing down from a poisoned 60,000 us must not drag 4x16 up with it.
  LearnedBucketCosts costs({{k1x16, 60'000}, {k4x16, 400}});
  costs.Observe(k1x16, 100);
  EXPECT_DOUBLE_EQ(costs.Costs().at(k1x16), 30'000);
  EXPECT_DOUBLE_EQ(costs.Costs().at(k4x16), 400);
}

TEST(LearnedBucketCostsTest, ABucketWithoutAWarmUpFigureTakesItsFirstReplay) {
  // Start-up measured only some buckets.
  LearnedBucketCosts costs({{k1x16, 100}});
  EXPECT_EQ(costs.Costs().count(k4x16), 0u);
  EXPECT_TRUE(costs.Observe(k4x16, 380));
  EXPECT_DOUBLE_EQ(costs.Costs().at(k4x16), 380);
  EXPECT_EQ(costs.Replays(k4x16), 1);
}

TEST(LearnedBucketCostsTest, DurationsThatCannotBeAreIgnored) {
  LearnedBucketCosts costs({{k1x16, 100}});
  EXPECT_FALSE(costs.Observe(k1x16, 0));
  EXPECT_FALSE(costs.Observe(k1x16, -5));
  EXPECT_EQ(costs.Replays(k1x16), 0);
  EXPECT_DOUBLE_EQ(costs.Costs().at(k1x16), 100);
}

TEST(LearnedBucketCostsTest, SmallDriftsAreReportedOnceTheyAddUp) {
  LearnedBucketCosts costs({{k1x16, 100}});
  for (int i = 0; i < 5; ++i) costs.Observe(k1x16, 100);
  EXPECT_FALSE(costs.Observe(k1x16, 104));  // within 5% of what was last reported: no rebuild
  EXPECT_FALSE(costs.Observe(k1x16, 104));
  EXPECT_FALSE(costs.Observe(k1x16, 106));  // the median of the last five stays 104
  EXPECT_FALSE(costs.Observe(k1x16, 106));
  EXPECT_TRUE(costs.Observe(k1x16, 106));  // now 106: over 5% from the 100 last reported
}

}  // namespace
}  // namespace graphserve
