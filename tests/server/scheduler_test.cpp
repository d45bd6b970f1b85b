// BatchPlanner decisions under a fake clock (exact, no threads), and ModelScheduler end to end with
// real worker threads and a fake executor that echoes each request's input back as its output.
#include "graphserve/server/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace graphserve {
namespace {

using std::chrono::seconds;

class FakeClock : public Clock {
 public:
  int64_t NowMicros() const override { return now_us_.load(); }
  void Set(int64_t now_us) { now_us_.store(now_us); }

 private:
  std::atomic<int64_t> now_us_{0};
};

// batch {1, 2, 4} × length {16, 32, 64}: small enough to reason about every decision by hand.
ModelSpec TestSpec() {
  ModelSpec spec;
  spec.name = "echo";
  spec.platform = kPlatformBuiltinEncoder;
  spec.max_batch_size = 4;
  spec.max_sequence_length = 64;
  spec.inputs = {TensorSpec{"x", DataType::kInt64, {-1}, 0.0}};
  spec.outputs = {TensorSpec{"y", DataType::kInt64, {-1}, 0.0}};
  spec.bucket_batch_sizes = {1, 2, 4};
  spec.bucket_lengths = {16, 32, 64};
  return spec;
}

SchedulerOptions Options(int64_t max_queue_delay_us, int64_t max_queue_size = 1024) {
  SchedulerOptions options;
  options.max_queue_delay_us = max_queue_delay_us;
  options.max_queue_size = max_queue_size;
  return options;
}

// An int64 [rows, length] tensor whose every element is `tag`, so that a result identifies its
// request.
HostTensor TaggedTensor(int64_t rows, int64_t length, int64_t tag) {
  HostTensor tensor;
  tensor.dtype = DataType::kInt64;
  tensor.shape = {rows, length};
  std::vector<int64_t> values(static_cast<size_t>(rows * length), tag);
  tensor.bytes.assign(reinterpret_cast<const char*>(values.data()),
                      values.size() * sizeof(int64_t));
  return tensor;
}

std::shared_ptr<PendingRequest> MakeRequest(int64_t rows, int64_t length, int64_t tag = 0) {
  auto request = std::make_shared<PendingRequest>();
  request->item.rows = rows;
  request->item.length = length;
  request->item.inputs.push_back(TaggedTensor(rows, length, tag));
  request->item.outputs_wanted = {true};
  return request;
}

// ---------------------------------------------------------------------------------------------------
// BatchPlanner

// Enqueues at the fake clock's current time, as ModelScheduler::Enqueue does.
void AddAt(BatchPlanner& planner, const FakeClock& clock,
           const std::shared_ptr<PendingRequest>& r) {
  r->enqueue_us = clock.NowMicros();
  planner.Add(r);
}

std::vector<int64_t> Lengths(const DispatchDecision& decision) {
  std::vector<int64_t> lengths;
  for (const auto& r : decision.requests) lengths.push_back(r->item.length);
  return lengths;
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

  // Once both are dispatchable, the bin with the older request wins over a full, younger one.
  clock.Set(1500);
  for (int i = 0; i < 4; ++i) AddAt(planner, clock, MakeRequest(1, 10));
  clock.Set(2000);
  auto oldest = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(oldest);
  EXPECT_EQ(Lengths(*oldest), (std::vector<int64_t>{20}));
  auto then_full = planner.Next(clock.NowMicros(), false);
  ASSERT_TRUE(then_full);
  EXPECT_EQ(then_full->padded_shape, (BucketShape{4, 16}));
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

  ASSERT_TRUE(planner.Next(1100, false));  // the bin-32 request
  EXPECT_EQ(planner.NextWakeUp(1100, false), 1150);
  ASSERT_TRUE(planner.Next(1150, false));
  EXPECT_EQ(planner.NextWakeUp(1150, false), std::nullopt);
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

TEST(BatchPlannerTest, RideAlongsNeverMakeABucketLarger) {
  FakeClock clock;
  BatchPlanner planner(TestSpec(), Options(1000));
  AddAt(planner, clock, MakeRequest(2, 60));
  clock.Set(1);
  AddAt(planner, clock, MakeRequest(1, 10));
  auto decision = planner.Next(1001, false);  // both due; bin 16's is the younger
  ASSERT_TRUE(decision);
  EXPECT_EQ(Lengths(*decision), (std::vector<int64_t>{60}));
  EXPECT_EQ(decision->padded_shape, (BucketShape{2, 64}));
  auto next = planner.Next(1001, false);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->padded_shape, (BucketShape{1, 16}));
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
// ModelScheduler

// What the executor saw of one batch.
struct RecordedBatch {
  int instance = 0;  // which executor ran it
  std::vector<int64_t> rows;
  std::vector<int64_t> lengths;
  BucketShape padded_shape;
};

// Echoes each item's input 0 as its output 0. Can hold every Execute until Release() and can fail
// every batch. Thread-safe, since the test thread inspects it while workers run it.
class FakeExecutor : public Executor {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<RecordedBatch> batches;
    int started = 0;
    bool held = false;
    Status error;
  };

  FakeExecutor(std::shared_ptr<Shared> shared, int instance, std::vector<BucketInfo> buckets = {})
      : shared_(std::move(shared)), instance_(instance), buckets_(std::move(buckets)) {}

  Status Warmup() override { return Status::Ok(); }

  Status Execute(const Batch& batch, BatchOutputs* outputs) override {
    RecordedBatch record;
    record.instance = instance_;
    record.padded_shape = batch.padded_shape;
    for (const InferenceItem* item : batch.items) {
      record.rows.push_back(item->rows);
      record.lengths.push_back(item->length);
    }
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->batches.push_back(record);
    ++shared_->started;
    shared_->changed.notify_all();
    shared_->changed.wait(lock, [this] { return !shared_->held; });
    if (!shared_->error.ok()) return shared_->error;
    outputs->clear();
    for (const InferenceItem* item : batch.items) outputs->push_back({item->inputs.at(0)});
    return Status::Ok();
  }

  std::vector<BucketInfo> Buckets() const override { return buckets_; }
  ExecutionCounters Counters() const override { return {}; }
  std::string device() const override { return "cpu"; }

 private:
  std::shared_ptr<Shared> shared_;
  const int instance_;
  const std::vector<BucketInfo> buckets_;
};

// The outcome a `done` callback delivered.
struct Outcome {
  Status status;
  std::vector<HostTensor> outputs;
  RequestTiming timing;
};

class ModelSchedulerTest : public ::testing::Test {
 protected:
  void MakeScheduler(const SchedulerOptions& options, int executors = 1) {
    std::vector<std::unique_ptr<Executor>> list;
    for (int i = 0; i < executors; ++i) list.push_back(std::make_unique<FakeExecutor>(shared_, i));
    scheduler_ = std::make_unique<ModelScheduler>(TestSpec(), options, std::move(list), &clock_);
  }

  // A request whose `done` fulfils the returned future; a second call would throw in the worker.
  std::shared_ptr<PendingRequest> Request(int64_t rows, int64_t length, int64_t tag,
                                          std::future<Outcome>* outcome) {
    auto request = MakeRequest(rows, length, tag);
    auto promise = std::make_shared<std::promise<Outcome>>();
    *outcome = promise->get_future();
    request->done = [promise](const Status& status, std::vector<HostTensor>&& outputs,
                              const RequestTiming& timing) {
      promise->set_value(Outcome{status, std::move(outputs), timing});
    };
    return request;
  }

  void Hold() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->held = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->held = false;
    shared_->changed.notify_all();
  }
  // Waits (generously) until `n` batches have entered Execute.
  bool WaitForStarted(int n) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    return shared_->changed.wait_for(lock, seconds(30), [&] { return shared_->started >= n; });
  }
  std::vector<RecordedBatch> Batches() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->batches;
  }

  SteadyClock clock_;
  std::shared_ptr<FakeExecutor::Shared> shared_ = std::make_shared<FakeExecutor::Shared>();
  std::unique_ptr<ModelScheduler> scheduler_;
};

bool Ready(std::future<Outcome>& f) { return f.wait_for(seconds(30)) == std::future_status::ready; }

TEST_F(ModelSchedulerTest, EveryConcurrentRequestGetsItsOwnResultExactlyOnce) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50;
  constexpr int kTotal = kThreads * kPerThread;
  MakeScheduler(Options(200), /*executors=*/2);
  scheduler_->Start();

  std::vector<std::shared_ptr<PendingRequest>> requests(kTotal);
  std::vector<std::atomic<int>> calls(kTotal);
  std::vector<Outcome> outcomes(kTotal);
  std::vector<std::promise<void>> answered(kTotal);
  for (int id = 0; id < kTotal; ++id) {
    const int64_t rows = 1 + id % 2;
    const int64_t length = 1 + (id * 7) % 64;
    requests[id] = MakeRequest(rows, length, /*tag=*/id);
    requests[id]->done = [&, id](const Status& status, std::vector<HostTensor>&& outputs,
                                 const RequestTiming& timing) {
      if (calls[id].fetch_add(1) == 0) {
        outcomes[id] = Outcome{status, std::move(outputs), timing};
        answered[id].set_value();
      }
    };
  }

  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        if (!scheduler_->Enqueue(requests[t * kPerThread + i]).ok()) ++refused;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_EQ(refused.load(), 0);

  for (int id = 0; id < kTotal; ++id) {
    ASSERT_EQ(answered[id].get_future().wait_for(seconds(30)), std::future_status::ready) << id;
  }
  scheduler_->Stop();

  int64_t total_rows = 0;
  for (int id = 0; id < kTotal; ++id) {
    EXPECT_EQ(calls[id].load(), 1) << id;
    ASSERT_TRUE(outcomes[id].status.ok()) << outcomes[id].status.ToString();
    ASSERT_EQ(outcomes[id].outputs.size(), 1u);
    const HostTensor& input = requests[id]->item.inputs[0];
    EXPECT_EQ(outcomes[id].outputs[0].shape, input.shape) << id;
    EXPECT_EQ(outcomes[id].outputs[0].bytes, input.bytes) << id;
    const BucketShape& padded = outcomes[id].timing.padded_shape;
    EXPECT_GE(padded.length, requests[id]->item.length);
    EXPECT_GE(padded.batch, requests[id]->item.rows);
    total_rows += requests[id]->item.rows;
  }

  // Every batch fits its padded shape, and the counters add up to what the executors saw.
  std::vector<RecordedBatch> batches = Batches();
  int64_t executed_rows = 0;
  for (const RecordedBatch& batch : batches) {
    int64_t rows = 0;
    for (int64_t r : batch.rows) rows += r;
    EXPECT_LE(rows, batch.padded_shape.batch);
    EXPECT_LE(rows, 4);
    EXPECT_LE(*std::max_element(batch.lengths.begin(), batch.lengths.end()),
              batch.padded_shape.length);
    executed_rows += rows;
  }
  EXPECT_EQ(executed_rows, total_rows);
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, static_cast<uint64_t>(kTotal));
  EXPECT_EQ(counters.batches, batches.size());
  EXPECT_EQ(counters.batch_rows, static_cast<uint64_t>(total_rows));
  EXPECT_EQ(counters.rejected_queue_full, 0u);
  EXPECT_EQ(counters.deadline_exceeded, 0u);
  EXPECT_EQ(counters.cancelled, 0u);
  EXPECT_EQ(scheduler_->QueueDepth(), 0u);
}

TEST_F(ModelSchedulerTest, FullQueueRefusesWithoutCallingDone) {
  MakeScheduler(Options(0, /*max_queue_size=*/2));
  scheduler_->Start();
  Hold();

  std::future<Outcome> running, queued1, queued2, refused_outcome;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 1, &running)).ok());
  ASSERT_TRUE(WaitForStarted(1));  // the first request left the queue and holds the only executor
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 2, &queued1)).ok());
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 3, &queued2)).ok());
  EXPECT_EQ(scheduler_->QueueDepth(), 2u);

  auto refused = Request(1, 10, 4, &refused_outcome);
  Status status = scheduler_->Enqueue(refused);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("'echo'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("max_queue_size"), std::string::npos) << status.message();

  Release();
  for (auto* f : {&running, &queued1, &queued2}) {
    ASSERT_TRUE(Ready(*f));
    EXPECT_TRUE(f->get().status.ok());
  }
  scheduler_->Stop();
  EXPECT_EQ(refused_outcome.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, 3u);
  EXPECT_EQ(counters.rejected_queue_full, 1u);
}

TEST_F(ModelSchedulerTest, ExpiredDeadlineIsNeverExecuted) {
  MakeScheduler(Options(0));
  scheduler_->Start();
  std::future<Outcome> outcome;
  auto request = Request(1, 10, 1, &outcome);
  request->deadline_us = clock_.NowMicros() - 1;
  ASSERT_TRUE(scheduler_->Enqueue(request).ok());

  ASSERT_TRUE(Ready(outcome));
  Outcome result = outcome.get();
  EXPECT_EQ(result.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(result.status.message().find("deadline expired after"), std::string::npos)
      << result.status.message();
  EXPECT_TRUE(result.outputs.empty());
  scheduler_->Stop();

  EXPECT_TRUE(Batches().empty());
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, 1u);
  EXPECT_EQ(counters.deadline_exceeded, 1u);
  EXPECT_EQ(counters.batches, 0u);
}

TEST_F(ModelSchedulerTest, CancelledWhileQueuedIsAnsweredCancelledAfterPoke) {
  // The longest delay. Three requests in one bin: from the second on, the bin's arrival rate says
  // company is coming, so the second and third wait (about 5 s, until the expected gap reaches the
  // remaining delay); only Poke can wake the worker sooner.
  MakeScheduler(Options(10'000'000));
  scheduler_->Start();
  std::vector<std::future<Outcome>> outcomes(3);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  for (int i = 0; i < 3; ++i) {
    requests.push_back(Request(1, 10, i, &outcomes[i]));
    ASSERT_TRUE(scheduler_->Enqueue(requests.back()).ok());
  }
  requests[2]->cancelled = true;
  scheduler_->Poke();

  ASSERT_EQ(outcomes[2].wait_for(seconds(2)), std::future_status::ready);
  EXPECT_EQ(outcomes[2].get().status.code(), StatusCode::kCancelled);
  scheduler_->Stop();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(outcomes[i].get().status.ok()) << i;

  for (const RecordedBatch& batch : Batches()) EXPECT_EQ(batch.lengths.size(), batch.rows.size());
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.cancelled, 1u);
  EXPECT_EQ(counters.batch_rows, 2u);
}

TEST_F(ModelSchedulerTest, StopDrainsQueuedRequests) {
  MakeScheduler(Options(10'000'000));
  scheduler_->Start();
  Hold();
  // A first request occupies the only executor, so that the next six queue: three rows in bin 16
  // and three in bin 32, neither full, with the longest delay.
  std::future<Outcome> blocker;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 60, 99, &blocker)).ok());
  ASSERT_TRUE(WaitForStarted(1));
  std::vector<std::future<Outcome>> outcomes(6);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(Request(1, i < 3 ? 10 : 20, i, &outcomes[i]));
    ASSERT_TRUE(scheduler_->Enqueue(requests.back()).ok());
  }
  EXPECT_EQ(scheduler_->QueueDepth(), 6u);
  // Released, the worker finds both bins expecting company and sleeps again: only Stop drains them.
  Release();

  scheduler_->Stop();
  ASSERT_EQ(blocker.wait_for(seconds(0)), std::future_status::ready);
  for (int i = 0; i < 6; ++i) {
    // Stop returns only after every queued request has been answered.
    ASSERT_EQ(outcomes[i].wait_for(seconds(0)), std::future_status::ready) << i;
    Outcome result = outcomes[i].get();
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    ASSERT_EQ(result.outputs.size(), 1u);
    EXPECT_EQ(result.outputs[0].bytes, requests[i]->item.inputs[0].bytes) << i;
  }
  std::vector<RecordedBatch> batches = Batches();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1].padded_shape, (BucketShape{4, 16}));
  EXPECT_EQ(batches[2].padded_shape, (BucketShape{4, 32}));
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.batches, 3u);
  EXPECT_EQ(counters.batch_rows, 7u);
  EXPECT_EQ(scheduler_->QueueDepth(), 0u);
  scheduler_->Stop();  // idempotent
}

TEST_F(ModelSchedulerTest, StopWithoutStartDrainsOnTheCallersThread) {
  MakeScheduler(Options(10'000'000));
  std::future<Outcome> outcome;
  auto request = Request(2, 30, 7, &outcome);
  ASSERT_TRUE(scheduler_->Enqueue(request).ok());
  scheduler_->Stop();
  ASSERT_EQ(outcome.wait_for(seconds(0)), std::future_status::ready);
  Outcome result = outcome.get();
  ASSERT_TRUE(result.status.ok());
  EXPECT_EQ(result.outputs.at(0).bytes, request->item.inputs[0].bytes);
  EXPECT_EQ(result.timing.padded_shape, (BucketShape{2, 32}));
}

TEST_F(ModelSchedulerTest, EnqueueAfterStopIsUnavailable) {
  MakeScheduler(Options(0));
  scheduler_->Start();
  scheduler_->Stop();
  std::future<Outcome> outcome;
  auto request = Request(1, 10, 1, &outcome);  // the caller keeps a refused request
  Status status = scheduler_->Enqueue(request);
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("model 'echo' is shutting down"), std::string::npos)
      << status.message();
  EXPECT_EQ(outcome.wait_for(seconds(0)), std::future_status::timeout);
  EXPECT_EQ(scheduler_->Counters().accepted, 0u);
}

TEST_F(ModelSchedulerTest, ExecutorErrorFailsEveryRequestOfTheBatch) {
  shared_->error = Internal("model 'echo' bucket 4x16: boom");
  MakeScheduler(Options(10'000'000));
  // Not started: Stop runs the queue on this thread, and four rows of bin 16 make one batch.
  std::vector<std::future<Outcome>> outcomes(3);
  ASSERT_TRUE(scheduler_->Enqueue(Request(2, 10, 0, &outcomes[0])).ok());
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 11, 1, &outcomes[1])).ok());
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 12, 2, &outcomes[2])).ok());
  scheduler_->Stop();
  for (auto& f : outcomes) {
    ASSERT_TRUE(Ready(f));
    Outcome result = f.get();
    EXPECT_EQ(result.status.code(), StatusCode::kInternal);
    EXPECT_EQ(result.status.message(), "model 'echo' bucket 4x16: boom");
    EXPECT_TRUE(result.outputs.empty());
  }
  ASSERT_EQ(Batches().size(), 1u);
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, 3u);
  EXPECT_EQ(counters.batches, 1u);
  EXPECT_EQ(counters.batch_rows, 4u);
}

TEST_F(ModelSchedulerTest, RideAlongsAreCountedAndGetTheirOwnRowsBack) {
  MakeScheduler(Options(10'000'000));
  // Not started: Stop runs the queue on this thread. Three rows of bin 64, then one of bin 16, which
  // fills the fourth row of the 4x64 batch.
  std::vector<std::future<Outcome>> outcomes(4);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  const int64_t lengths[] = {40, 50, 60, 10};
  for (int i = 0; i < 4; ++i) {
    requests.push_back(Request(1, lengths[i], i, &outcomes[i]));
    ASSERT_TRUE(scheduler_->Enqueue(requests.back()).ok());
  }
  scheduler_->Stop();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    Outcome result = outcomes[i].get();
    ASSERT_TRUE(result.status.ok());
    EXPECT_EQ(result.outputs.at(0).shape, (std::vector<int64_t>{1, lengths[i]}));
    EXPECT_EQ(result.outputs.at(0).bytes, requests[i]->item.inputs[0].bytes) << i;
    EXPECT_EQ(result.timing.padded_shape, (BucketShape{4, 64}));
  }
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.batches, 1u);
  EXPECT_EQ(counters.ride_alongs, 1u);
  EXPECT_EQ(counters.batch_rows, 4u);
}

TEST_F(ModelSchedulerTest, EveryInstanceRunsBatchesFromTheOneQueue) {
  MakeScheduler(Options(0), /*executors=*/3);
  scheduler_->Start();
  Hold();
  // Each request reaches a different idle instance while the others are busy with theirs.
  std::vector<std::future<Outcome>> outcomes(4);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10 + 20 * i, i, &outcomes[i])).ok());
    ASSERT_TRUE(WaitForStarted(i + 1));
  }
  // All three busy: the fourth waits in the queue for whichever frees up first.
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 5, 3, &outcomes[3])).ok());
  EXPECT_EQ(scheduler_->QueueDepth(), 1u);
  std::vector<int> instances;
  for (const RecordedBatch& batch : Batches()) instances.push_back(batch.instance);
  std::sort(instances.begin(), instances.end());
  EXPECT_EQ(instances, (std::vector<int>{0, 1, 2}));

  Release();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    Outcome result = outcomes[i].get();
    ASSERT_TRUE(result.status.ok());
    EXPECT_EQ(result.outputs.at(0).shape, (std::vector<int64_t>{1, i < 3 ? 10 + 20 * i : 5}));
  }
  scheduler_->Stop();
  EXPECT_EQ(scheduler_->Counters().batches, 4u);
}

TEST(ModelSchedulerCostsTest, TheInstancesMeasuredBucketTimesAreAveraged) {
  auto shared = std::make_shared<FakeExecutor::Shared>();
  auto bucket = [](int64_t batch, int64_t length, double time_us) {
    BucketInfo info;
    info.shape = BucketShape{batch, length};
    info.execute_time_us = time_us;
    info.time_measured = true;
    return info;
  };
  std::vector<std::unique_ptr<Executor>> executors;
  executors.push_back(
      std::make_unique<FakeExecutor>(shared, 0, std::vector<BucketInfo>{bucket(1, 16, 100)}));
  executors.push_back(std::make_unique<FakeExecutor>(
      shared, 1,
      std::vector<BucketInfo>{bucket(1, 16, 300), bucket(2, 16, 400), bucket(4, 16, 0)}));
  SteadyClock clock;
  ModelScheduler scheduler(TestSpec(), Options(0), std::move(executors), &clock);
  // 1x16 averaged over both; 2x16 from the one that measured it; 4x16 had no time (not measured).
  EXPECT_EQ(scheduler.bucket_costs(),
            (BucketCosts{{BucketShape{1, 16}, 200}, {BucketShape{2, 16}, 400}}));
}

// Launch returns at once, as on a GPU; Complete waits until the test releases the batch. Records the
// order of launches and completions, so that a test can see batches overlap.
class PipelinedFakeExecutor : public Executor {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::string> events;  // "launch N" / "complete N", N counting launches from 1
    int launched = 0;
    int in_flight = 0;
    int most_in_flight = 0;
    bool held = true;
    bool fail_launches = false;
  };

  explicit PipelinedFakeExecutor(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  Status Warmup() override { return Status::Ok(); }
  Status Execute(const Batch& batch, BatchOutputs* outputs) override {
    std::unique_ptr<LaunchedBatch> launched;
    Status status = Launch(batch, &launched);
    return status.ok() ? Complete(std::move(launched), outputs) : status;
  }
  Status Launch(const Batch& batch, std::unique_ptr<LaunchedBatch>* launched) override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (shared_->fail_launches) return Internal("launch refused");
    auto run = std::make_unique<Run>();
    run->number = ++shared_->launched;
    for (const InferenceItem* item : batch.items) run->outputs.push_back({item->inputs.at(0)});
    shared_->events.push_back("launch " + std::to_string(run->number));
    shared_->most_in_flight = std::max(shared_->most_in_flight, ++shared_->in_flight);
    shared_->changed.notify_all();
    *launched = std::move(run);
    return Status::Ok();
  }
  Status Complete(std::unique_ptr<LaunchedBatch> launched, BatchOutputs* outputs) override {
    auto* run = static_cast<Run*>(launched.get());
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->changed.wait(lock, [this] { return !shared_->held; });
    shared_->events.push_back("complete " + std::to_string(run->number));
    --shared_->in_flight;
    *outputs = std::move(run->outputs);
    return Status::Ok();
  }
  int pipeline_depth() const override { return 2; }
  std::vector<BucketInfo> Buckets() const override { return {}; }
  ExecutionCounters Counters() const override { return {}; }
  std::string device() const override { return "cuda:0"; }

 private:
  struct Run : LaunchedBatch {
    int number = 0;
    BatchOutputs outputs;
  };
  std::shared_ptr<Shared> shared_;
};

class PipelinedSchedulerTest : public ModelSchedulerTest {
 protected:
  void MakePipelinedScheduler(const SchedulerOptions& options) {
    std::vector<std::unique_ptr<Executor>> list;
    list.push_back(std::make_unique<PipelinedFakeExecutor>(pipeline_));
    scheduler_ = std::make_unique<ModelScheduler>(TestSpec(), options, std::move(list), &clock_);
  }
  void ReleasePipeline() {
    std::lock_guard<std::mutex> lock(pipeline_->mutex);
    pipeline_->held = false;
    pipeline_->changed.notify_all();
  }
  std::shared_ptr<PipelinedFakeExecutor::Shared> pipeline_ =
      std::make_shared<PipelinedFakeExecutor::Shared>();
};

TEST_F(PipelinedSchedulerTest, NextReadyBatchIsLaunchedBeforeTheRunningOneIsAwaited) {
  MakePipelinedScheduler(Options(0));
  // Three full batches of 4 rows (the largest batch) wait before the worker starts.
  std::vector<std::future<Outcome>> outcomes(12);
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10 + i % 4, i, &outcomes[i])).ok());
  scheduler_->Start();
  {
    std::unique_lock<std::mutex> lock(pipeline_->mutex);
    ASSERT_TRUE(pipeline_->changed.wait_for(lock, seconds(30), [&] { return pipeline_->launched >= 2; }));
  }
  // The device "runs" batch 1 (held): batch 2 is launched behind it, batch 3 is not (depth 2).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(pipeline_->mutex);
    EXPECT_EQ(pipeline_->events, (std::vector<std::string>{"launch 1", "launch 2"}));
  }
  ReleasePipeline();
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    Outcome result = outcomes[i].get();
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    EXPECT_EQ(result.outputs.at(0).bytes, TaggedTensor(1, 10 + i % 4, i).bytes) << "request " << i;
  }
  scheduler_->Stop();
  std::lock_guard<std::mutex> lock(pipeline_->mutex);
  EXPECT_EQ(pipeline_->events, (std::vector<std::string>{"launch 1", "launch 2", "complete 1", "launch 3",
                                                         "complete 2", "complete 3"}));
  EXPECT_EQ(pipeline_->most_in_flight, 2);
}

TEST_F(PipelinedSchedulerTest, ALoneBatchIsAnsweredWithoutWaitingForAnother) {
  // A batch that nothing follows must come back once it has run, not sit in flight until a second
  // batch arrives to overlap with.
  MakePipelinedScheduler(Options(0));
  ReleasePipeline();
  scheduler_->Start();
  std::future<Outcome> outcome;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 20, 7, &outcome)).ok());
  ASSERT_TRUE(Ready(outcome));
  EXPECT_TRUE(outcome.get().status.ok());
  scheduler_->Stop();
}

TEST_F(PipelinedSchedulerTest, FailedLaunchFailsEveryRequestOfItsBatchOnly) {
  MakePipelinedScheduler(Options(0));
  ReleasePipeline();
  {
    std::lock_guard<std::mutex> lock(pipeline_->mutex);
    pipeline_->fail_launches = true;
  }
  scheduler_->Start();
  std::future<Outcome> failed;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 20, 1, &failed)).ok());
  ASSERT_TRUE(Ready(failed));
  Outcome result = failed.get();
  EXPECT_EQ(result.status.code(), StatusCode::kInternal);
  EXPECT_NE(result.status.message().find("launch refused"), std::string::npos);
  {
    std::lock_guard<std::mutex> lock(pipeline_->mutex);
    pipeline_->fail_launches = false;
  }
  std::future<Outcome> next;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 20, 2, &next)).ok());
  ASSERT_TRUE(Ready(next));
  EXPECT_TRUE(next.get().status.ok());
  scheduler_->Stop();
}

}  // namespace
}  // namespace graphserve
