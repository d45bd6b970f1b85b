// BatchPlanner decisions under a fake clock: exact, no threads.
#include "graphserve/server/batching/batch_planner.h"

#include <gtest/gtest.h>

#include <limits>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fake_clock.h"
#include "scheduler_test_support.h"

namespace graphserve {
namespace {

using scheduler_test::FixedShapeTestSpec;
using scheduler_test::MakeRequest;
using scheduler_test::Options;
using scheduler_test::RaggedTestSpec;
using scheduler_test::StaircaseTestSpec;
using scheduler_test::TestSpec;

// ---------------------------------------------------------------------------------------------------
// BatchPlanner

// Enqueues at the fake clock's current time, as ModelScheduler::Enqueue does.
template <typename Planner>
void AddAt(Planner& planner, const FakeClock& clock, const std::shared_ptr<PendingRequest>& r) {
  r->enqueue_us = clock.NowMicros();
  planner.Add(r);
}

// One field of each request of the decision, in its order.
std::vector<int64_t> EachItems(const DispatchDecision& decision, int64_t InferenceItem::*field) {
  std::vector<int64_t> values;
  for (const auto& r : decision.requests) values.push_back(r->item.*field);
  return values;
}

std::vector<int64_t> Lengths(const DispatchDecision& decision) {
  return EachItems(decision, &InferenceItem::length);
}

std::vector<int64_t> Rows(const DispatchDecision& decision) {
  return EachItems(decision, &InferenceItem::rows);
}

// A `timeout` parameter of 2^63-1 us wrapped negative when added to the clock, and the request was
// answered DEADLINE_EXCEEDED at once: a timeout too long to add never runs out.
TEST(PendingRequestTest, ATimeoutTooLongForTheClockNeverRunsOut) {
  PendingRequest request;
  request.enqueue_us = 5'000'000;
  request.queue_timeout_us = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(request.QueueTimeoutEndUs(), 0);
  EXPECT_EQ(request.ExpiryUs(), 0);
  request.deadline_us = 9'000'000;
  EXPECT_EQ(request.ExpiryUs(), 9'000'000);
  request.queue_timeout_us = 1'000'000;
  EXPECT_EQ(request.ExpiryUs(), 6'000'000);
}

// A model that does not mask padding: every batch holds one length and runs at it, its rows alone
// padded where the length is a bucket length, under each batching mode.
ModelSpec UnmaskedSpec(ModelSpec spec = TestSpec()) {
  spec.sequence_mask_input.clear();
  return spec;
}

// Drains the planner and checks every batch: one length, that length exactly.
std::vector<DispatchDecision> DrainExact(BatchPlanner& planner, FakeClock& clock, size_t requests) {
  std::vector<DispatchDecision> batches;
  clock.Set(clock.NowMicros() + 10'000'000);  // every delay has run out
  size_t taken = 0;
  while (auto decision = planner.Next(clock.NowMicros(), true)) {
    const std::vector<int64_t> lengths = Lengths(*decision);
    EXPECT_EQ(std::set<int64_t>(lengths.begin(), lengths.end()).size(), 1u)
        << decision->padded_shape.ToString();
    EXPECT_EQ(decision->padded_shape.length, lengths.front());
    EXPECT_EQ(decision->ride_alongs, 0);
    taken += decision->requests.size();
    batches.push_back(std::move(*decision));
  }
  EXPECT_EQ(taken, requests);
  EXPECT_EQ(planner.queued_requests(), 0u);
  return batches;
}

TEST(BatchPlannerTest, UnmaskedLengthsNeverShareABatchAndRunAtTheirOwnLength) {
  for (const BatchingPolicy policy : {BatchingPolicy::kSizeBinned, BatchingPolicy::kFifo}) {
    for (const ModelSpec& spec : {UnmaskedSpec(), UnmaskedSpec(StaircaseTestSpec())}) {
      FakeClock clock;
      SchedulerOptions options = Options(1000);
      options.policy = policy;
      BatchPlanner planner(spec, options);
      const std::vector<int64_t> lengths = {10, 16, 10, 12, 16, 3, 100, 10, 64, 63};
      for (int64_t length : lengths) {
        AddAt(planner, clock, MakeRequest(1, length));
        clock.Set(clock.NowMicros() + 1);
      }
      std::map<int64_t, BucketShape> shape_of;
      for (const DispatchDecision& batch : DrainExact(planner, clock, lengths.size())) {
        shape_of[batch.padded_shape.length] = batch.padded_shape;
      }
      // 16 and 64 are bucket lengths: rows padded to a batch size; the rest run at their own shape.
      EXPECT_EQ(shape_of[16], (BucketShape{2, 16}));
      EXPECT_EQ(shape_of[64], (BucketShape{1, 64}));
      EXPECT_EQ(shape_of[10], (BucketShape{3, 10}));
      EXPECT_EQ(shape_of[12], (BucketShape{1, 12}));
      EXPECT_EQ(shape_of[63], (BucketShape{1, 63}));
      EXPECT_EQ(shape_of[100], (BucketShape{1, 100}));
    }
  }
}

TEST(BatchPlannerTest, UnmaskedRequestsAloneRunAtTheirOwnLength) {
  FakeClock clock;
  SchedulerOptions options = Options(0);
  options.batching_disabled = true;
  BatchPlanner planner(UnmaskedSpec(), options);
  for (int64_t length : {10, 16}) AddAt(planner, clock, MakeRequest(3, length));
  const std::vector<DispatchDecision> batches = DrainExact(planner, clock, 2);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].padded_shape, (BucketShape{3, 10}));
  EXPECT_EQ(batches[1].padded_shape, (BucketShape{4, 16}));
}

// Traffic of many lengths: every length gets a bin while queued, and batches stay exact however
// many lengths came and went.
TEST(BatchPlannerTest, UnmaskedTrafficOfManyLengthsStaysExact) {
  FakeClock clock;
  BatchPlanner planner(UnmaskedSpec(), Options(1000));
  std::mt19937 random(7);
  std::uniform_int_distribution<int64_t> length(1, 64);
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 50; ++i) {
      AddAt(planner, clock, MakeRequest(1, length(random)));
      clock.Set(clock.NowMicros() + 3);
    }
    DrainExact(planner, clock, 50);
  }
}

// Triton's priority levels: a ready batch of a higher level goes first, whatever arrived before it,
// and a request without a priority (or beyond the levels) queues at the default level.
TEST(PriorityPlannerTest, AHigherLevelsReadyBatchGoesFirst) {
  FakeClock clock;
  SchedulerOptions options = Options(1000);
  options.priority_levels = 3;
  options.default_priority_level = 2;
  PriorityPlanner planner(TestSpec(), options);
  EXPECT_EQ(planner.LevelOf(1), 0u);
  EXPECT_EQ(planner.LevelOf(3), 2u);
  EXPECT_EQ(planner.LevelOf(0), 1u);
  EXPECT_EQ(planner.LevelOf(9), 1u);
  const auto with_priority = [](uint64_t priority, int64_t length) {
    auto request = MakeRequest(1, length);
    request->priority = priority;
    return request;
  };
  AddAt(planner, clock, with_priority(3, 16));  // lowest, oldest
  clock.Set(clock.NowMicros() + 10);
  AddAt(planner, clock, with_priority(0, 32));  // the default level, 2
  clock.Set(clock.NowMicros() + 10);
  AddAt(planner, clock, with_priority(1, 64));  // highest, newest
  EXPECT_EQ(planner.queued_requests(), 3u);
  clock.Set(clock.NowMicros() + 10'000);  // every delay has run out
  std::vector<int64_t> order;
  while (auto decision = planner.Next(clock.NowMicros(), true)) {
    ASSERT_EQ(decision->requests.size(), 1u);  // levels never share a batch
    order.push_back(decision->requests.front()->item.length);
  }
  EXPECT_EQ(order, (std::vector<int64_t>{64, 32, 16}));
  EXPECT_EQ(planner.queued_requests(), 0u);
}

TEST(PriorityPlannerTest, PriorityLevelsAreValidated) {
  SchedulerOptions options = Options(100);
  options.priority_levels = 2;
  options.default_priority_level = 3;
  EXPECT_NE(options.Validate().message().find("default_priority_level: 3 must be in [1, priority_levels 2]"),
            std::string::npos)
      << options.Validate().ToString();
  options.priority_levels = 1000;
  EXPECT_NE(options.Validate().message().find("priority_levels: 1000 is out of range"), std::string::npos);
  options.priority_levels = 0;
  EXPECT_NE(options.Validate().message().find("without priority_levels"), std::string::npos);
  options.default_priority_level = 0;
  EXPECT_TRUE(options.Validate().ok());
}

TEST(BatchPlannerTest, BinsBySmallestBucketLengthThatHolds) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  // One request per time step, each in the bin named on its right.
  for (int64_t length : {10, 20, 40, 16, 33, 100, 64, 17}) {
    AddAt(planner, clock, MakeRequest(1, length));  // 16, 32, 64, 16, 64, oversize, 64, 32
    clock.Set(clock.NowMicros() + 1);
  }
  ASSERT_EQ(planner.queued_requests(), 8u);

  clock.Set(10'000);  // every delay has run out: bins go oldest first
  auto first = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(first);
  EXPECT_EQ(Lengths(*first), (std::vector<int64_t>{10, 16}));
  EXPECT_EQ(first->padded_shape, (BucketShape{2, 16}));

  auto second = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(second);
  EXPECT_EQ(Lengths(*second), (std::vector<int64_t>{20, 17}));
  EXPECT_EQ(second->padded_shape, (BucketShape{2, 32}));

  auto third = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(third);
  EXPECT_EQ(Lengths(*third), (std::vector<int64_t>{40, 33, 64}));
  EXPECT_EQ(third->padded_shape, (BucketShape{4, 64}));

  auto oversize = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(oversize);
  EXPECT_EQ(Lengths(*oversize), (std::vector<int64_t>{100}));
  EXPECT_EQ(oversize->padded_shape, (BucketShape{1, 100}));  // its own rows × length

  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));
  EXPECT_EQ(planner.queued_requests(), 0u);
}

TEST(BatchPlannerTest, OversizeBinPadsToLongestOfItsBatch) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(1, 80));
  AddAt(planner, clock, MakeRequest(2, 120));
  clock.Set(1000);
  auto decision = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{80, 120}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{3, 120}));
}

TEST(BatchPlannerTest, FullBinDispatchesBeforeTheDelay) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(1, 20, 1));
  AddAt(planner, clock, MakeRequest(2, 30, 2));
  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));  // 3 rows of 4, delay not run out

  clock.Set(1);
  AddAt(planner, clock, MakeRequest(1, 25, 3));
  auto decision = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{20, 30, 25}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{4, 32}));
  EXPECT_EQ(planner.queued_requests(), 0u);
}

TEST(BatchPlannerTest, WithoutAnIdleExecutorALoneRequestWaitsExactlyItsDelay) {
  FakeClock clock;
  clock.Set(100);
  BatchPlanner planner(TestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(1, 10));

  EXPECT_FALSE(planner.Next(1099, false));
  auto decision = planner.Next(1100, false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->padded_shape, (BucketShape{1, 16}));
}

TEST(BatchPlannerTest, IdleExecutorRunsARequestNobodyIsExpectedToJoinAtOnce) {
  FakeClock clock;
  clock.Set(100);
  BatchPlanner planner(TestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(1, 10));  // the first arrival: no rate suggests company
  auto decision = planner.Next(100, true);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->padded_shape, (BucketShape{1, 16}));
}

TEST(BatchPlannerTest, IdleExecutorWaitsWhileCompanyIsExpectedAndNoLonger) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  for (int64_t t : {0, 100, 200}) {  // one arrival per 100 us in bin 16
    clock.Set(t);
    AddAt(planner, clock, MakeRequest(1, 10));
  }
  // 800 us of delay left and the next arrival expected in 100: wait. The expected gap grows with
  // the silence since the last arrival (t - 200); it meets the remaining delay (1000 - t) at 600.
  EXPECT_FALSE(planner.Next(200, true));
  EXPECT_EQ(planner.NextWakeUp(200, true), 600);
  EXPECT_EQ(planner.NextWakeUp(200, false), 1000);  // busy executors wait for the delay
  EXPECT_FALSE(planner.Next(599, true));
  auto decision = planner.Next(600, true);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->requests.size(), 3u);
  EXPECT_EQ(decision->padded_shape, (BucketShape{4, 16}));
}

TEST(BatchPlannerTest, ShorterBinsArrivalsCountAsCompanyOnlyForSpareRows) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  for (int64_t t : {0, 10, 20}) {  // bin 16: an arrival every 10 us, 3 rows waiting for a fourth
    clock.Set(t);
    AddAt(planner, clock, MakeRequest(1, 10));
  }
  // Bin 64's first request, 2 rows: its 2x64 batch has no spare row for bin 16's arrivals to ride
  // in, and nothing is known to arrive in bin 64 itself. It goes; bin 16 waits for its fourth row.
  AddAt(planner, clock, MakeRequest(2, 60));
  auto decision = planner.Next(20, true);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->padded_shape, (BucketShape{2, 64}));
  EXPECT_FALSE(planner.Next(20, true));

  // Bin 32's first request, 3 rows: its 4x32 batch has a spare row that bin 16's next arrival, due
  // any microsecond, could fill. It waits too.
  clock.Set(30);
  AddAt(planner, clock, MakeRequest(3, 25));
  EXPECT_FALSE(planner.Next(30, true));
  EXPECT_EQ(planner.queued_requests(), 4u);
}

TEST(BatchPlannerTest, PadsToTheSmallestBucket) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(3, 20));
  clock.Set(1000);
  auto three_rows = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(three_rows);
  EXPECT_EQ(three_rows->padded_shape, (BucketShape{4, 32}));

  AddAt(planner, clock, MakeRequest(2, 64));
  clock.Set(2000);
  auto two_rows = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(two_rows);
  EXPECT_EQ(two_rows->padded_shape, (BucketShape{2, 64}));
}

TEST(BatchPlannerTest, ZeroDelayDispatchesAtOnce) {
  FakeClock clock;
  clock.Set(500);
  BatchPlanner planner(TestSpec(), Options(0));
  AddAt(planner, clock, MakeRequest(1, 5));
  auto decision = planner.Next(clock.NowMicros(), true);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->padded_shape, (BucketShape{1, 16}));
}

SchedulerOptions Unbatched() {
  SchedulerOptions options = Options(0);
  options.batching_disabled = true;
  return options;
}

TEST(BatchPlannerTest, UnbatchedEachRequestGoesAloneOldestFirstAtOnce) {
  FakeClock clock;
  ModelSpec spec = TestSpec();
  spec.cuda_graphs_disabled = true;
  BatchPlanner planner(spec, Unbatched());
  // Two of one bin (which would share a batch), one of a shorter bin, one oversize, one of 3 rows.
  for (const auto& [rows, length] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 40}, {1, 5}, {1, 50}, {2, 100}, {3, 20}}) {
    AddAt(planner, clock, MakeRequest(rows, length));
    clock.Set(clock.NowMicros() + 1);
  }
  EXPECT_EQ(planner.NextWakeUp(clock.NowMicros(), true), clock.NowMicros());
  // Without graphs nothing is padded: each goes at its own rows x length, in arrival order, and
  // without an idle executor too (nobody is waited for).
  const std::vector<BucketShape> expected = {{1, 40}, {1, 5}, {1, 50}, {2, 100}, {3, 20}};
  for (const BucketShape& shape : expected) {
    auto decision = planner.Next(clock.NowMicros(), /*executor_idle=*/false);
    ASSERT_TRUE(decision) << shape.ToString();
    ASSERT_EQ(decision->requests.size(), 1u);
    EXPECT_EQ(decision->ride_alongs, 0);
    EXPECT_EQ(decision->padded_shape, shape);
    EXPECT_EQ(decision->requests[0]->item.rows, shape.batch);
    EXPECT_EQ(decision->requests[0]->item.length, shape.length);
  }
  EXPECT_EQ(planner.queued_requests(), 0u);
  EXPECT_FALSE(planner.Next(clock.NowMicros(), true));
  EXPECT_FALSE(planner.NextWakeUp(clock.NowMicros(), true));
}

TEST(BatchPlannerTest, UnbatchedWithGraphsPadsEachRequestToItsBucketOnly) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Unbatched());  // graphs on: a request alone still replays
  for (const auto& [rows, length] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 40}, {1, 33}, {3, 20}, {1, 100}}) {
    AddAt(planner, clock, MakeRequest(rows, length));
    clock.Set(clock.NowMicros() + 1);
  }
  const std::vector<BucketShape> expected = {{1, 64}, {1, 64}, {4, 32}, {1, 100}};
  for (const BucketShape& shape : expected) {
    auto decision = planner.Next(clock.NowMicros(), true);
    ASSERT_TRUE(decision) << shape.ToString();
    ASSERT_EQ(decision->requests.size(), 1u);
    EXPECT_EQ(decision->padded_shape, shape);
  }
}

TEST(BatchPlannerTest, UnbatchedDeadlinesStillExpire) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Unbatched());
  auto late = MakeRequest(1, 10);
  late->deadline_us = 5;
  AddAt(planner, clock, late);
  clock.Set(5);
  const auto dead = planner.TakeDead(clock.NowMicros());
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0], late);
  EXPECT_FALSE(planner.Next(clock.NowMicros(), true));
}

TEST(BatchPlannerTest, OldestRequestGoesFirstAcrossBins) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(1, 20));  // bin 32 at t=0
  clock.Set(500);
  for (int i = 0; i < 4; ++i) AddAt(planner, clock, MakeRequest(1, 10));  // bin 16 full at t=500

  // Before the lone request's delay runs out only the full bin may go.
  clock.Set(999);
  auto full = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->padded_shape, (BucketShape{4, 16}));

  // Once both are dispatchable, the older request goes before the full, younger bin: first in a
  // batch in arrival order that carries three of it, as one 4x32 batch costs less than a 1x32 and a
  // 4x16 (elements plus a launch each); the fourth, neither due nor in a full bin, waits.
  clock.Set(1500);
  for (int i = 0; i < 4; ++i) AddAt(planner, clock, MakeRequest(1, 10));
  clock.Set(2000);
  auto oldest = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(oldest);
  EXPECT_EQ(Lengths(*oldest), (std::vector<int64_t>{20, 10, 10, 10}));
  EXPECT_EQ(oldest->padded_shape, (BucketShape{4, 32}));
  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));
  EXPECT_EQ(planner.queued_requests(), 1u);
}

TEST(BatchPlannerTest, FifoWithinABinAndARequestThatDoesNotFitWaits) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  auto a = MakeRequest(2, 10);
  auto b = MakeRequest(3, 12);
  auto c = MakeRequest(1, 14);
  AddAt(planner, clock, a);
  clock.Set(1);
  AddAt(planner, clock, b);
  clock.Set(2);
  AddAt(planner, clock, c);

  // 6 rows queued: the bin is full. `b` does not fit beside `a`, and `c`, which would, must not
  // overtake `b`.
  auto first = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->requests.size(), 1u);
  EXPECT_EQ(first->requests[0], a);
  EXPECT_EQ(first->padded_shape, (BucketShape{2, 16}));

  // 4 rows left: full again, and `b` leads.
  auto second = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->requests.size(), 2u);
  EXPECT_EQ(second->requests[0], b);
  EXPECT_EQ(second->requests[1], c);
  EXPECT_EQ(second->padded_shape, (BucketShape{4, 16}));
}

TEST(BatchPlannerTest, RequestWithMoreRowsThanTheLargestBatchRunsAlone) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  auto before = MakeRequest(1, 20);
  auto big = MakeRequest(6, 20);
  auto after = MakeRequest(1, 20);
  AddAt(planner, clock, before);
  AddAt(planner, clock, big);
  AddAt(planner, clock, after);

  auto first = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->requests.size(), 1u);
  EXPECT_EQ(first->requests[0], before);
  EXPECT_EQ(first->padded_shape, (BucketShape{1, 32}));

  auto alone = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(alone);
  ASSERT_EQ(alone->requests.size(), 1u);
  EXPECT_EQ(alone->requests[0], big);
  EXPECT_EQ(alone->padded_shape, (BucketShape{6, 20}));

  // One row left, delay not run out.
  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));
  EXPECT_EQ(planner.queued_requests(), 1u);
}

TEST(BatchPlannerTest, TakeDeadRemovesExpiredAndCancelledRequests) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  auto expires_500 = MakeRequest(2, 10);  // with the two below, bin 16 starts full
  expires_500->deadline_us = 500;
  auto no_deadline = MakeRequest(1, 10);
  auto expires_1000 = MakeRequest(1, 10);
  expires_1000->deadline_us = 1000;
  auto cancelled = MakeRequest(1, 40);
  for (const auto& r : {expires_500, no_deadline, expires_1000, cancelled})
    AddAt(planner, clock, r);

  EXPECT_TRUE(planner.TakeDead(100).empty());
  cancelled->cancelled = true;
  // Cancellations are announced (ModelScheduler::Poke); until then the queue is not scanned.
  EXPECT_TRUE(planner.TakeDead(200).empty());
  planner.NoteCancellation();
  EXPECT_EQ(planner.TakeDead(499), (std::vector<std::shared_ptr<PendingRequest>>{cancelled}));
  EXPECT_EQ(planner.TakeDead(500), (std::vector<std::shared_ptr<PendingRequest>>{expires_500}));
  EXPECT_EQ(planner.queued_requests(), 2u);

  // The bin's row count shrank with it: 2 of 4 rows left, so nothing is full before the delay.
  EXPECT_FALSE(planner.Next(999, false));

  EXPECT_EQ(planner.TakeDead(1000), (std::vector<std::shared_ptr<PendingRequest>>{expires_1000}));
  auto rest = planner.Next(1000, false);
  ASSERT_TRUE(rest);
  ASSERT_EQ(rest->requests.size(), 1u);
  EXPECT_EQ(rest->requests[0], no_deadline);
  EXPECT_EQ(planner.queued_requests(), 0u);
}

TEST(BatchPlannerTest, NextWakeUpIsTheEarliestDelayExpiryOrDeadline) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  EXPECT_EQ(planner.NextWakeUp(0, false), std::nullopt);

  // Busy executors: requests wait their delay, and no arrival rate is known yet.
  clock.Set(100);
  AddAt(planner, clock, MakeRequest(1, 20));
  EXPECT_FALSE(planner.Next(100, false));
  EXPECT_EQ(planner.NextWakeUp(100, false), 1100);

  clock.Set(150);
  AddAt(planner, clock, MakeRequest(1, 40));  // another bin, younger: no change
  EXPECT_EQ(planner.NextWakeUp(150, false), 1100);

  clock.Set(200);
  auto with_deadline = MakeRequest(1, 50);  // behind bin 64's front, but with an early deadline
  with_deadline->deadline_us = 700;
  AddAt(planner, clock, with_deadline);
  EXPECT_EQ(planner.NextWakeUp(200, false), 700);

  EXPECT_EQ(planner.TakeDead(700).size(), 1u);
  EXPECT_EQ(planner.NextWakeUp(700, false), 1100);

  // The bin-32 request falls due and takes the bin-64 one along: a 2x64 batch costs no more than
  // twice a 1x32 and does more per µs. Nothing is left to wake up for.
  auto due = planner.Next(1100, false);
  ASSERT_TRUE(due);
  EXPECT_EQ(Lengths(*due), (std::vector<int64_t>{20, 40}));
  EXPECT_EQ(planner.NextWakeUp(1100, false), std::nullopt);
}

TEST(BatchPlannerTest, ADispatchedRequestsDeadlineNoLongerCounts) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  std::vector<std::shared_ptr<PendingRequest>> requests;
  for (int i = 0; i < 4; ++i) {  // a full bin, each with a deadline
    requests.push_back(MakeRequest(1, 10));
    requests.back()->deadline_us = 5000 + i;
    AddAt(planner, clock, requests.back());
  }
  auto later = MakeRequest(1, 60);
  later->deadline_us = 9000;
  AddAt(planner, clock, later);
  auto full = planner.Next(0, false);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->requests,
            (std::vector<std::shared_ptr<PendingRequest>>(requests.begin(), requests.end())));
  // Gone from the queue: their deadlines neither wake anyone nor expire anything.
  EXPECT_EQ(planner.NextWakeUp(0, false), 1000);
  EXPECT_TRUE(planner.TakeDead(8999).empty());
  EXPECT_EQ(planner.TakeDead(9000), (std::vector<std::shared_ptr<PendingRequest>>{later}));
  EXPECT_EQ(planner.queued_requests(), 0u);
}

TEST(BatchPlannerTest, DeadlinesExpireInTheirOrderWhateverTheArrivalOrder) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(10'000'000));
  std::vector<std::shared_ptr<PendingRequest>> requests;
  for (int i = 0; i < 200; ++i) {
    requests.push_back(MakeRequest(1, 1 + i % 64));
    requests.back()->deadline_us = 1000 + (i * 7919) % 200;  // a permutation of 1000..1199
    AddAt(planner, clock, requests.back());
  }
  for (int64_t t = 1000; t < 1200; ++t) {
    std::vector<std::shared_ptr<PendingRequest>> dead = planner.TakeDead(t);
    ASSERT_EQ(dead.size(), 1u) << t;
    EXPECT_EQ(dead[0]->deadline_us, t);
    EXPECT_EQ(planner.queued_requests(), static_cast<size_t>(1199 - t));
  }
}

// Overload: most of a long queue expires or is cancelled at once. Each dead request comes back
// exactly once, the live ones stay in their order, and the counts agree.
TEST(BatchPlannerTest, AQueueThatMostlyDiesAtOnceLeavesOnlyItsLiveRequests) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1'000'000));
  std::vector<std::shared_ptr<PendingRequest>> live;
  for (int i = 0; i < 3000; ++i) {
    auto request = MakeRequest(1, 10 + (i % 3) * 20, i);  // bins 16, 32 and 64 in turn
    if (i % 10 == 0) {
      live.push_back(request);
    } else if (i % 10 < 6) {
      request->deadline_us = 500;
    } else if (i % 10 == 6) {
      request->deadline_us = 500;
      request->cancelled = true;  // both: returned once
    } else {
      request->cancelled = true;
    }
    AddAt(planner, clock, request);
  }
  planner.NoteCancellation();
  const auto dead = planner.TakeDead(500);
  EXPECT_EQ(dead.size(), 2700u);
  std::set<const PendingRequest*> distinct;
  for (const auto& request : dead) {
    distinct.insert(request.get());
    EXPECT_FALSE(request->queued);
  }
  EXPECT_EQ(distinct.size(), dead.size());
  EXPECT_EQ(planner.queued_requests(), live.size());
  EXPECT_TRUE(planner.TakeDead(10'000).empty());
  // Every live request is still dispatched, oldest first within its bin.
  size_t dispatched = 0;
  while (auto decision = planner.Next(BatchPlanner::kEndOfTime, true)) {
    for (const auto& request : decision->requests) EXPECT_TRUE(request->queued == false);
    dispatched += decision->requests.size();
  }
  EXPECT_EQ(dispatched, live.size());
}

TEST(BatchPlannerTest, RideAlongsFillSpareRowsLongestShorterBinFirst) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  for (int64_t length : {40, 50, 60}) AddAt(planner, clock, MakeRequest(1, length));  // bin 64, t=0
  clock.Set(1);
  AddAt(planner, clock, MakeRequest(1, 30));  // bin 32
  clock.Set(2);
  AddAt(planner, clock, MakeRequest(1, 10));  // bin 16
  // Bin 64 is due; its 3 rows take a 4-row bucket, whose spare row carries the bin-32 request.
  auto decision = planner.Next(1000, false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{40, 50, 60, 30}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{4, 64}));
  EXPECT_EQ(decision->ride_alongs, 1);
  EXPECT_EQ(planner.queued_requests(), 1u);
}

TEST(BatchPlannerTest, DueRideAlongsGoBeforeLongerOnes) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  for (int64_t length : {40, 50, 60}) AddAt(planner, clock, MakeRequest(1, length));  // bin 64, t=0
  clock.Set(1);
  AddAt(planner, clock, MakeRequest(1, 10));  // bin 16, due at 1001
  clock.Set(2);
  AddAt(planner, clock, MakeRequest(1, 30));  // bin 32, due at 1002
  auto decision = planner.Next(1001, false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{40, 50, 60, 10}));
  EXPECT_EQ(decision->ride_alongs, 1);
}

// Costs over TestSpec's grid: `per_row_us` per row at every length, plus `fixed_us` per batch.
BucketCosts Costs(double fixed_us, double per_row_us) {
  BucketCosts costs;
  for (int64_t batch : {1, 2, 4}) {
    for (int64_t length : {16, 32, 64})
      costs[BucketShape{batch, length}] = fixed_us + per_row_us * batch;
  }
  return costs;
}

TEST(BatchPlannerTest, RideAlongsMakeABucketLargerOnlyWhereRowsComeNearlyFree) {
  auto fill = [](BatchPlanner& planner, FakeClock& clock) {
    AddAt(planner, clock, MakeRequest(2, 60));
    clock.Set(1);
    AddAt(planner, clock, MakeRequest(1, 10));
  };
  {
    // Time proportional to rows: a 4-row bucket costs twice the 2 rows that must go, so the rider
    // waits for a batch of its own length.
    FakeClock clock;
    BatchPlanner planner(TestSpec(), Options(1000), Costs(0, 100));
    fill(planner, clock);
    auto decision = planner.Next(1001, false);  // both due; bin 16's is the younger
    ASSERT_TRUE(decision);
    EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{60}));
    EXPECT_EQ(decision->padded_shape, (BucketShape{2, 64}));
    auto next = planner.Next(1001, false);
    ASSERT_TRUE(next);
    EXPECT_EQ(next->padded_shape, (BucketShape{1, 16}));
  }
  {
    // Launch-bound (small batches on a GPU): 4 rows cost about what 2 do, so the short request
    // rides padded now instead of taking a launch of its own.
    FakeClock clock;
    BatchPlanner planner(TestSpec(), Options(1000), Costs(700, 1));
    fill(planner, clock);
    auto decision = planner.Next(1001, false);
    ASSERT_TRUE(decision);
    EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{60, 10}));
    EXPECT_EQ(decision->padded_shape, (BucketShape{4, 64}));
    EXPECT_EQ(decision->ride_alongs, 1);
    EXPECT_EQ(planner.queued_requests(), 0u);
  }
}

TEST(BatchPlannerTest, FewerRowsInASmallerBucketWhenThatDoesMoreWorkPerMicrosecond) {
  // Bin 64 holds 3 rows, its oldest due, the others not yet: they may wait for another batch.
  auto fill = [](BatchPlanner& planner, FakeClock& clock) {
    clock.Set(0);
    AddAt(planner, clock, MakeRequest(1, 60));
    clock.Set(10);
    AddAt(planner, clock, MakeRequest(1, 60));
    AddAt(planner, clock, MakeRequest(1, 60));
  };
  {
    // Time proportional to rows (as on a CPU): 2 rows in 2 beat 3 rows in 4.
    FakeClock clock;
    BatchPlanner planner(TestSpec(), Options(1000), Costs(0, 100));
    fill(planner, clock);
    auto decision = planner.Next(1000, false);
    ASSERT_TRUE(decision);
    EXPECT_EQ(decision->padded_shape, (BucketShape{2, 64}));
    EXPECT_EQ(planner.queued_requests(), 1u);
  }
  {
    // Launch-bound (as small batches on a GPU): 4 rows cost what 2 do, so all 3 go.
    FakeClock clock;
    BatchPlanner planner(TestSpec(), Options(1000), Costs(700, 1));
    fill(planner, clock);
    auto decision = planner.Next(1000, false);
    ASSERT_TRUE(decision);
    EXPECT_EQ(decision->padded_shape, (BucketShape{4, 64}));
    EXPECT_EQ(planner.queued_requests(), 0u);
  }
}

TEST(BatchPlannerTest, BelowCapacityADueBinsDueRequestsAllGo) {
  // Same queue, but all three are due: they go together even where two rows would be cheaper per
  // row, so that none waits a second batch.
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000), Costs(0, 100));
  for (int i = 0; i < 3; ++i) AddAt(planner, clock, MakeRequest(1, 60));
  auto decision = planner.Next(1000, false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->padded_shape, (BucketShape{4, 64}));
  EXPECT_EQ(planner.queued_requests(), 0u);
}

TEST(BatchPlannerTest, BeforeAnythingIsDueTheMostRealWorkPerMicrosecondGoesFirst) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(),
                       Options(1000));       // no costs: time ~ padded elements + a fixed cost
  AddAt(planner, clock, MakeRequest(1, 4));  // the oldest, but 4 of 16 elements real
  clock.Set(1);
  AddAt(planner, clock, MakeRequest(2, 30));  // 60 of 64 real
  // Both bins are first arrivals (nobody expected to join) and the executor is idle.
  auto first = planner.Next(1, true);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->padded_shape, (BucketShape{2, 32}));
  auto second = planner.Next(1, true);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->padded_shape, (BucketShape{1, 16}));
}

TEST(BatchPlannerTest, CostTableScalesWhatWasNotMeasured) {
  BucketCosts measured = {
      {BucketShape{1, 16}, 100}, {BucketShape{4, 16}, 300}, {BucketShape{2, 64}, 500}};
  BatchPlanner planner(TestSpec(), Options(1000), measured);
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{1, 16}), 100);
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{4, 16}), 300);
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{2, 16}), 200);   // from 1x16, linear in rows
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{4, 64}), 1000);  // from 2x64, linear in rows
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{1, 64}),
                   500);  // only a larger one: its time, a bound
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{2, 32}),
                   250);  // no length-32 time: by elements from 2x64
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{3, 100}),
                   1000 * 300.0 / 256.0);  // oversize: from 4x64

  // Nothing measured: padded elements plus a full batch of the shortest length (4 x 16).
  BatchPlanner unmeasured(TestSpec(), Options(1000));
  EXPECT_DOUBLE_EQ(unmeasured.CostUs(BucketShape{4, 64}), 256 + 64);
  EXPECT_DOUBLE_EQ(unmeasured.CostUs(BucketShape{2, 16}), 32 + 64);
}

TEST(BatchPlannerTest, FifoPolicyTakesArrivalOrderAndPadsToTheLongest) {
  SchedulerOptions options = Options(100);
  options.policy = BatchingPolicy::kFifo;
  FakeClock clock;
  BatchPlanner planner(TestSpec(), options);
  const auto a = MakeRequest(1, 60), b = MakeRequest(1, 5), c = MakeRequest(1, 20), d = MakeRequest(2, 7);
  for (const auto& r : {a, b, c}) {
    AddAt(planner, clock, r);
    clock.Set(clock.NowMicros() + 10);
  }
  // 3 rows do not fill the largest batch (4) and nobody is due yet, so even an idle executor waits
  // (the size-binned policy would run a batch nobody is expected to join at once).
  EXPECT_FALSE(planner.Next(clock.NowMicros(), /*executor_idle=*/true));
  EXPECT_EQ(planner.NextWakeUp(clock.NowMicros(), /*executor_idle=*/true), 100);
  AddAt(planner, clock, d);
  std::optional<DispatchDecision> batch = planner.Next(clock.NowMicros(), true);
  ASSERT_TRUE(batch);
  // a, b, c in arrival order; d's 2 rows do not fit beside them. Padded to the longest: 60 → 64.
  std::vector<std::shared_ptr<PendingRequest>> taken = batch->requests;
  std::sort(taken.begin(), taken.end());
  std::vector<std::shared_ptr<PendingRequest>> expected = {a, b, c};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(taken, expected);
  EXPECT_EQ(batch->padded_shape, (BucketShape{4, 64}));
  EXPECT_EQ(batch->ride_alongs, 0);
  // d alone goes once it has waited the delay.
  EXPECT_FALSE(planner.Next(clock.NowMicros() + 99, true));
  batch = planner.Next(clock.NowMicros() + 100, true);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->requests, (std::vector<std::shared_ptr<PendingRequest>>{d}));
  EXPECT_EQ(batch->padded_shape, (BucketShape{2, 16}));
}

// ---------------------------------------------------------------------------------------------------
// A token budget: batches of short requests beyond max_batch_size rows (StaircaseTestSpec).

std::vector<std::shared_ptr<PendingRequest>> AddMany(BatchPlanner& planner, const FakeClock& clock,
                                                     int count, int64_t rows, int64_t length) {
  std::vector<std::shared_ptr<PendingRequest>> added;
  for (int i = 0; i < count; ++i) {
    added.push_back(MakeRequest(rows, length, i));
    AddAt(planner, clock, added.back());
  }
  return added;
}

// `decision` is a batch of `requests` requests padded to `shape`.
void ExpectBatch(const std::optional<DispatchDecision>& decision, size_t requests, BucketShape shape) {
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->requests.size(), requests);
  EXPECT_EQ(decision->padded_shape, shape);
}

TEST(BatchPlannerTest, ShortRequestsFillABatchOfMoreRowsThanARequestMayCarry) {
  FakeClock clock;
  BatchPlanner planner(StaircaseTestSpec(), Options(1000));
  AddMany(planner, clock, 127, 1, 10);
  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));  // 127 of 128 rows, nobody due
  AddMany(planner, clock, 3, 1, 12);
  ExpectBatch(planner.Next(clock.NowMicros(), false), 128, {128, 16});  // full before the delay
  EXPECT_EQ(planner.queued_requests(), 2u);

  // The rest falls due and goes in the smallest bucket of its length that holds it.
  clock.Set(1000);
  ExpectBatch(planner.Next(clock.NowMicros(), false), 2, {2, 16});
}

TEST(BatchPlannerTest, LongRequestsStayWithinTheTokenBudget) {
  FakeClock clock;
  BatchPlanner planner(StaircaseTestSpec(), Options(1000));
  // Length 40 pads to 64, where 2048 tokens hold 32 rows: 40 requests of 1 row fill one batch.
  AddMany(planner, clock, 40, 1, 40);
  ExpectBatch(planner.Next(clock.NowMicros(), false), 32, {32, 64});
  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));  // 8 left, not due

  // Requests of max_batch_size rows: 32 of them are 128 rows, two full batches of 64 at length 32.
  clock.Set(1000);
  ExpectBatch(planner.Next(clock.NowMicros(), false), 8, {8, 64});  // the 8 left, due
  AddMany(planner, clock, 32, 4, 30);
  for (int batch = 0; batch < 2; ++batch) {
    SCOPED_TRACE(batch);
    ExpectBatch(planner.Next(clock.NowMicros(), false), 16, {64, 32});
  }
  EXPECT_EQ(planner.queued_requests(), 0u);
}

TEST(BatchPlannerTest, ADueShortBinGoesWholeUpToItsOwnLargestBatch) {
  FakeClock clock;
  BatchPlanner planner(StaircaseTestSpec(), Options(1000));
  AddMany(planner, clock, 100, 1, 16);
  AddMany(planner, clock, 2, 1, 60);
  clock.Set(1000);  // all due: the oldest bin (16) goes whole, 100 rows in a 128-row bucket
  ExpectBatch(planner.Next(clock.NowMicros(), false), 100, {128, 16});
  ExpectBatch(planner.Next(clock.NowMicros(), false), 2, {2, 64});
}

TEST(BatchPlannerTest, CostTableCoversOnlyTheGridsPoints) {
  const BucketCosts measured = {{BucketShape{1, 16}, 100},
                                {BucketShape{128, 16}, 2000},
                                {BucketShape{128, 64}, 9999}};  // not a point: ignored
  BatchPlanner planner(StaircaseTestSpec(), Options(1000), measured);
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{128, 16}), 2000);
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{64, 16}), 6400);  // from 1x16, linear in rows
  // Off the grid (128x64 exceeds the budget): by elements from the largest point, 128x16.
  EXPECT_DOUBLE_EQ(planner.CostUs(BucketShape{128, 64}), 8000);
  // Nothing measured: padded elements plus a full batch of the shortest length (128 x 16).
  BatchPlanner unmeasured(StaircaseTestSpec(), Options(1000));
  EXPECT_DOUBLE_EQ(unmeasured.CostUs(BucketShape{32, 64}), 2048 + 2048);
}

TEST(BatchPlannerTest, FifoPolicyFormsBatchesUpToTheLongestRequestsLargestBatch) {
  SchedulerOptions options = Options(1000);
  options.policy = BatchingPolicy::kFifo;
  FakeClock clock;
  BatchPlanner planner(StaircaseTestSpec(), options);
  AddMany(planner, clock, 127, 1, 10);
  EXPECT_FALSE(planner.Next(clock.NowMicros(), true));  // not full, not due
  clock.Set(1);
  AddMany(planner, clock, 1, 1, 10);
  ExpectBatch(planner.Next(clock.NowMicros(), true), 128, {128, 16});

  // 40 short requests, then a long one: beside it a batch holds 32 rows (at 64), so the long one
  // ends the batch of the 40 short ones, which is full and goes at once.
  clock.Set(2);
  AddMany(planner, clock, 40, 1, 10);
  clock.Set(3);
  const auto long_one = AddMany(planner, clock, 1, 1, 50);
  ExpectBatch(planner.Next(clock.NowMicros(), true), 40, {64, 16});
  // Then the long one, with the 31 short ones that arrive after it: 32 rows padded to 64.
  clock.Set(4);
  AddMany(planner, clock, 40, 1, 10);
  const std::optional<DispatchDecision> mixed = planner.Next(clock.NowMicros(), true);
  ExpectBatch(mixed, 32, {32, 64});
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->requests.front(), long_one.front());
}

// ---------------------------------------------------------------------------------------------------
// A fixed-shape model: one bin, batch-only buckets.

TEST(BatchPlannerTest, FixedShapeRequestsShareOneBinPaddedToTheSmallestBatchBucket) {
  FakeClock clock;
  BatchPlanner planner(FixedShapeTestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(1, kFixedShapeLength));
  AddAt(planner, clock, MakeRequest(2, kFixedShapeLength));
  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));  // 3 rows of 4, delay not run out
  clock.Set(1000);
  auto decision = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Rows(*decision), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{4, kFixedShapeLength}));
  EXPECT_EQ(decision->ride_alongs, 0);

  // A full largest batch goes before the delay.
  for (int i = 0; i < 4; ++i) AddAt(planner, clock, MakeRequest(1, kFixedShapeLength));
  decision = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Rows(*decision), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{4, kFixedShapeLength}));
  EXPECT_EQ(planner.queued_requests(), 0u);
}

TEST(BatchPlannerTest, FixedShapeRequestThatDoesNotFitWaitsForTheNextBatch) {
  FakeClock clock;
  BatchPlanner planner(FixedShapeTestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(3, kFixedShapeLength));
  AddAt(planner, clock, MakeRequest(2, kFixedShapeLength));
  clock.Set(1000);
  auto first = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(first);
  EXPECT_EQ(Rows(*first), (std::vector<int64_t>{3}));
  EXPECT_EQ(first->padded_shape, (BucketShape{4, kFixedShapeLength}));
  auto second = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(second);
  EXPECT_EQ(Rows(*second), (std::vector<int64_t>{2}));
  EXPECT_EQ(second->padded_shape, (BucketShape{2, kFixedShapeLength}));
}

TEST(BatchPlannerTest, FixedShapeUnderFifoAndUnbatchedPolicies) {
  SchedulerOptions fifo = Options(100);
  fifo.policy = BatchingPolicy::kFifo;
  FakeClock clock;
  BatchPlanner in_order(FixedShapeTestSpec(), fifo);
  AddAt(in_order, clock, MakeRequest(1, kFixedShapeLength));
  AddAt(in_order, clock, MakeRequest(1, kFixedShapeLength));
  auto batch = in_order.Next(100, true);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->padded_shape, (BucketShape{2, kFixedShapeLength}));

  BatchPlanner alone(FixedShapeTestSpec(), Unbatched());  // graphs on: padded to its bucket
  AddAt(alone, clock, MakeRequest(3, kFixedShapeLength));
  batch = alone.Next(clock.NowMicros(), false);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->padded_shape, (BucketShape{4, kFixedShapeLength}));
}

TEST(SchedulerOptionsTest, ValidateNamesTheField) {
  EXPECT_TRUE(Options(0, 1).Validate().ok());
  EXPECT_TRUE(Options(10'000'000, 1).Validate().ok());

  for (int64_t delay : {int64_t{-1}, int64_t{10'000'001}}) {
    Status status = Options(delay).Validate();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << delay;
    EXPECT_NE(status.message().find("dynamic_batching.max_queue_delay_microseconds"),
              std::string::npos)
        << status.message();
  }
  Status status = Options(100, 0).Validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("dynamic_batching.max_queue_size"), std::string::npos)
      << status.message();

  EXPECT_TRUE(Unbatched().Validate().ok());
  SchedulerOptions waits_for_nobody = Unbatched();
  waits_for_nobody.max_queue_delay_us = 100;
  status = waits_for_nobody.Validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("dynamic_batching.max_queue_delay_microseconds"),
            std::string::npos)
      << status.message();
}

// ---------------------------------------------------------------------------------------------------
// A ragged model: rows of any lengths packed end to end, buckets of (rows, total tokens).

int64_t Tokens(const DispatchDecision& decision) {
  int64_t tokens = 0;
  for (const auto& r : decision.requests) tokens += r->item.rows * r->item.length;
  return tokens;
}

TEST(RaggedPlannerTest, RequestsOfAnyLengthsShareABatchInTheSmallestBucketHoldingTheirTokens) {
  FakeClock clock;
  BatchPlanner planner(RaggedTestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(1, 5));
  AddAt(planner, clock, MakeRequest(2, 3));
  AddAt(planner, clock, MakeRequest(1, 17));
  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));  // neither full nor due
  clock.Advance(1000);
  const auto decision = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{5, 3, 17}));  // arrival order, lengths mixed
  EXPECT_EQ(Tokens(*decision), 28);
  EXPECT_EQ(decision->padded_shape, (BucketShape{8, 32}));  // 4 rows + the filler row
}

TEST(RaggedPlannerTest, ABatchGoesOnceTheNextRequestsTokensWouldNotFit) {
  FakeClock clock;
  BatchPlanner planner(RaggedTestSpec(), Options(1'000'000));
  AddAt(planner, clock, MakeRequest(1, 30));
  AddAt(planner, clock, MakeRequest(1, 30));
  EXPECT_FALSE(planner.Next(clock.NowMicros(), false));  // 60 of 64 tokens: more may fit
  AddAt(planner, clock, MakeRequest(1, 10));
  const auto decision = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{30, 30}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{4, 64}));
  EXPECT_EQ(planner.queued_requests(), 1u);
}

TEST(RaggedPlannerTest, RowsAreBoundedTooWithARowKeptForTheTail) {
  FakeClock clock;
  BatchPlanner planner(RaggedTestSpec(), Options(1'000'000));
  // max_batch_size (7) one-token rows, then the 8-row bucket's spare row holds their tail.
  for (int i = 0; i < 8; ++i) AddAt(planner, clock, MakeRequest(1, 1));
  const auto decision = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->requests.size(), 7u);
  EXPECT_EQ(decision->padded_shape, (BucketShape{8, 16}));
}

TEST(RaggedPlannerTest, AFullBatchKeepsBackWhatWouldPadItToTheNextTokenSize) {
  FakeClock clock;
  // Time by tokens, as a GPU's is for large buckets: 7 rows of 5 tokens (35) would pad to 64 and
  // cost twice what the first 6 (30 tokens) cost in the 32-token bucket.
  BucketCosts by_tokens;
  for (int64_t rows : {4, 8}) {
    for (int64_t tokens : {16, 32, 64})
      by_tokens[BucketShape{rows, tokens}] = 10.0 * static_cast<double>(tokens);
  }
  // The first batch of `requests` requests of 5 tokens queued at once: full by its rows (7).
  const auto first_batch = [&clock](const BucketCosts& costs, int requests, size_t* left) {
    BatchPlanner planner(RaggedTestSpec(), Options(1'000'000), costs);
    for (int i = 0; i < requests; ++i) AddAt(planner, clock, MakeRequest(1, 5));
    auto decision = planner.Next(clock.NowMicros(), false);
    *left = planner.queued_requests();
    return decision;
  };
  size_t left = 0;
  auto decision = first_batch(by_tokens, 8, &left);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->requests.size(), 6u);
  EXPECT_EQ(decision->padded_shape, (BucketShape{8, 32}));
  EXPECT_EQ(left, 2u);

  // Time by launches, as a GPU's is for small buckets: padding costs nothing, so all 7 go.
  BucketCosts flat;
  for (const auto& [shape, us] : by_tokens) flat[shape] = 100.0;
  decision = first_batch(flat, 8, &left);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->requests.size(), 7u);
  EXPECT_EQ(decision->padded_shape, (BucketShape{8, 64}));

  // Full by its rows but holding every queued request: none is kept back for a batch that may
  // never come.
  decision = first_batch(by_tokens, 7, &left);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->requests.size(), 7u);
  EXPECT_EQ(decision->padded_shape, (BucketShape{8, 64}));

  // A batch that is not full takes every request, padded, likewise.
  BatchPlanner quiet(RaggedTestSpec(), Options(1000), by_tokens);
  for (int i = 0; i < 6; ++i) AddAt(quiet, clock, MakeRequest(1, 6));
  EXPECT_FALSE(quiet.Next(clock.NowMicros(), false));
  clock.Advance(1000);
  decision = quiet.Next(clock.NowMicros(), false);  // due
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->requests.size(), 6u);
  EXPECT_EQ(decision->padded_shape, (BucketShape{8, 64}));
}

TEST(RaggedPlannerTest, ALoneRequestOfMaxBatchSizeRowsWithATailGetsABucket) {
  const ModelSpec spec = RaggedTestSpec();
  FakeClock clock;
  BatchPlanner planner(spec, Options(1'000'000));
  // 7 rows of 9 tokens: 63 of 64, so the tail needs an eighth row, which the grid keeps spare.
  AddAt(planner, clock, MakeRequest(spec.max_batch_size, 9));
  AddAt(planner, clock, MakeRequest(1, 1));
  auto decision = planner.Next(clock.NowMicros(), false);  // full by its rows: goes at once
  ASSERT_TRUE(decision);
  EXPECT_EQ(Rows(*decision), (std::vector<int64_t>{7}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{8, 64}));
  EXPECT_TRUE(spec.HasBucket(decision->padded_shape));
  // Batching disabled: still its bucket, not its exact shape.
  SchedulerOptions alone_options = Options(1'000'000);
  alone_options.batching_disabled = true;
  BatchPlanner alone(spec, alone_options);
  AddAt(alone, clock, MakeRequest(spec.max_batch_size, 2));
  decision = alone.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->padded_shape, (BucketShape{8, 16}));
}

TEST(RaggedPlannerTest, AnIdleExecutorTakesALoneRequestAtOnceAndARequestBeyondTheGridGoesAlone) {
  FakeClock clock;
  BatchPlanner planner(RaggedTestSpec(), Options(1'000'000));
  AddAt(planner, clock, MakeRequest(3, 30));  // 90 tokens: beyond the 64-token budget
  AddAt(planner, clock, MakeRequest(1, 4));
  auto decision = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(decision);
  EXPECT_EQ(Rows(*decision), (std::vector<int64_t>{3}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{3, 90}));  // its exact shape, run eagerly

  BatchPlanner quiet(RaggedTestSpec(), Options(1'000'000));
  AddAt(quiet, clock, MakeRequest(1, 4));
  EXPECT_FALSE(quiet.Next(clock.NowMicros(), false));
  decision = quiet.Next(clock.NowMicros(), true);  // no arrival rate known: waiting cannot help
  ASSERT_TRUE(decision);
  EXPECT_EQ(decision->padded_shape, (BucketShape{4, 16}));
}

TEST(RaggedPlannerTest, RandomArrivalsAreEachAnsweredOnceInBucketsThatHoldThem) {
  const ModelSpec spec = RaggedTestSpec();
  FakeClock clock;
  BatchPlanner planner(spec, Options(500));
  std::mt19937 random(3);
  size_t added = 0, taken = 0;
  for (int step = 0; step < 400; ++step) {
    if (step < 300) {
      AddAt(planner, clock,
            MakeRequest(std::uniform_int_distribution<int64_t>(1, 3)(random),
                        std::uniform_int_distribution<int64_t>(1, 20)(random)));
      ++added;
    }
    clock.Advance(std::uniform_int_distribution<int64_t>(0, 300)(random));
    while (auto decision = planner.Next(clock.NowMicros(), step % 2 == 0)) {
      taken += decision->requests.size();
      int64_t rows = 0;
      for (const auto& r : decision->requests) rows += r->item.rows;
      const int64_t tokens = Tokens(*decision);
      if (decision->requests.size() > 1) {
        EXPECT_TRUE(spec.HasBucket(decision->padded_shape)) << decision->padded_shape.ToString();
      }
      EXPECT_GE(decision->padded_shape.length, tokens);
      EXPECT_GE(decision->padded_shape.batch, RaggedRowsNeeded(rows, tokens, decision->padded_shape.length));
    }
  }
  clock.Set(BatchPlanner::kEndOfTime);
  while (auto decision = planner.Next(clock.NowMicros(), true)) taken += decision->requests.size();
  EXPECT_EQ(taken, added);
}

}  // namespace
}  // namespace graphserve
