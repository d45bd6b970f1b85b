// The batching policy under simulated load (batch_simulator.h: simulated time and a GPU cost model,
// so these are exact and take no wall time to speak of): padding and throughput against FIFO
// batching and the greedy 6x6 batcher, every request answered exactly once, and the wait bound
// under scripted mixes that try to starve a bin.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "graphserve/server/batching/batch_simulator.h"

namespace graphserve::sim {
namespace {

constexpr uint64_t kSeed = 2024;
constexpr int64_t kDelayUs = 500;

// The default grid's length for a request of `length`.
int64_t BucketFor(int64_t length) {
  return EncoderSpec(EncoderGrid::kTokenBudget).BucketFor(1, length).length;
}

// On the 32-row grid unless told: the scripted mixes below count on 32 rows filling a batch.
SimulationConfig Config(Policy policy, int executors, EncoderGrid grid = EncoderGrid::kRowsOnly) {
  SimulationConfig config;
  config.policy = policy;
  config.spec = EncoderSpec(grid);
  config.options.max_queue_delay_us = kDelayUs;
  config.executors = executors;
  return config;
}

// Every request ran in exactly one batch, and every batch held its requests, in a bucket of
// `spec`'s grid unless no bucket holds its first request.
void ExpectEveryRequestAnsweredOnceInAFittingBatch(
    const SimulationResult& result, const ModelSpec& spec = EncoderSpec(EncoderGrid::kRowsOnly)) {
  for (size_t i = 0; i < result.answers.size(); ++i) {
    ASSERT_EQ(result.answers[i], 1) << "request " << i;
  }
  for (const SimulatedBatch& batch : result.batches) {
    int64_t rows = 0;
    for (int index : batch.requests) {
      rows += result.requests[index].rows;
      EXPECT_LE(result.requests[index].length, batch.padded_shape.length);
    }
    EXPECT_LE(rows, batch.padded_shape.batch);
    const Arrival& first = result.requests[static_cast<size_t>(batch.requests.front())];
    if (!spec.IsOversize(first.rows, first.length)) {
      EXPECT_TRUE(spec.HasBucket(batch.padded_shape)) << batch.padded_shape.ToString();
    }
  }
}

// The wait bound below capacity: once due (arrival + delay), a request goes in the first batch an
// executor starts; if all were busy then, when the first of their batches ends.
void ExpectWaitBoundHolds(const SimulationResult& result, int executors, int64_t delay_us) {
  int late = 0;
  for (size_t i = 0; i < result.requests.size(); ++i) {
    const int64_t due_us = result.requests[i].time_us + delay_us;
    int running = 0;
    int64_t first_end_us = 0;
    for (const SimulatedBatch& batch : result.batches) {
      if (batch.start_us <= due_us && due_us < batch.end_us) {
        first_end_us = running == 0 ? batch.end_us : std::min(first_end_us, batch.end_us);
        ++running;
      }
    }
    const int64_t latest_us = running < executors ? due_us : first_end_us;
    const int64_t start_us = result.requests[i].time_us + result.queue_wait_us[i];
    if (start_us > latest_us && ++late <= 5) {
      ADD_FAILURE() << "request " << i << " (length " << result.requests[i].length
                    << ", arrived at " << result.requests[i].time_us << " us) started at "
                    << start_us << " us, after " << latest_us << " us";
    }
  }
  EXPECT_EQ(late, 0);
}

// No starvation, at any load: after a request falls due, every batch dispatched before its own
// carries a due request at least as old as it. Neither full bins, nor efficient ones, nor later
// arrivals get ahead of it.
void ExpectOnlyOlderDueRequestsGoFirst(const SimulationResult& result, int64_t delay_us) {
  std::vector<size_t> batch_of(result.requests.size());
  for (size_t b = 0; b < result.batches.size(); ++b) {
    for (int index : result.batches[b].requests) batch_of[static_cast<size_t>(index)] = b;
  }
  int overtaken = 0;
  for (size_t i = 0; i < result.requests.size(); ++i) {
    const int64_t due_us = result.requests[i].time_us + delay_us;
    for (size_t b = 0; b < batch_of[i]; ++b) {
      const SimulatedBatch& batch = result.batches[b];
      if (batch.start_us < due_us) continue;
      const bool older_due =
          std::any_of(batch.requests.begin(), batch.requests.end(), [&](int other) {
            const int64_t arrived_us = result.requests[static_cast<size_t>(other)].time_us;
            return arrived_us <= result.requests[i].time_us &&
                   arrived_us + delay_us <= batch.start_us;
          });
      if (!older_due && ++overtaken <= 5) {
        ADD_FAILURE() << "request " << i << " (arrived at " << result.requests[i].time_us
                      << " us) was due when batch " << b << " started at " << batch.start_us
                      << " us without an older due request";
      }
    }
  }
  EXPECT_EQ(overtaken, 0);
}

TEST(BatchPolicyTest, AtSaturationPlannerPadsAtMost1_2AndOutrunsFifoAndGreedy) {
  for (int executors : {1, 2}) {
    SCOPED_TRACE(std::to_string(executors) + " executor(s)");
    const LengthMix mix;
    const SimulationResult planner =
        SimulateClosedLoop(Config(Policy::kPlanner, executors), 512, 20000, mix, kSeed);
    const SimulationResult fifo =
        SimulateClosedLoop(Config(Policy::kFifoPadToLongest, executors), 512, 20000, mix, kSeed);
    const SimulationResult greedy = SimulateClosedLoop(
        Config(Policy::kGreedyFullBins, executors, EncoderGrid::kSixBySix), 512, 20000, mix, kSeed);
    ExpectEveryRequestAnsweredOnceInAFittingBatch(planner);

    EXPECT_LE(planner.padding_ratio(), 1.2);
    EXPECT_LT(planner.padding_ratio(), fifo.padding_ratio());
    EXPECT_LT(planner.padding_ratio(), greedy.padding_ratio());
    EXPECT_GE(planner.requests_per_second(), fifo.requests_per_second());
    EXPECT_GE(planner.real_tokens_per_second(), fifo.real_tokens_per_second());
    EXPECT_GE(planner.real_tokens_per_second(), greedy.real_tokens_per_second());
    // What the issue quotes for greedy full batches on the 6x6 grid, as a check on the simulator.
    EXPECT_NEAR(greedy.padding_ratio(), 1.45, 0.05);
  }
}

TEST(BatchPolicyTest, AtSaturationTheTokenBudgetBatchesShortRequestsBeyond32Rows) {
  // The default grid against the same grid without its token budget: short requests batch up to
  // hundreds of rows, which the cost model (like the H200) runs at several times the tokens/s of
  // 32 rows, while long ones stay within 32 rows and no batch exceeds the budget.
  const SimulationConfig budget = Config(Policy::kPlanner, 1, EncoderGrid::kTokenBudget);
  const SimulationResult wide = SimulateClosedLoop(budget, 1024, 20000, LengthMix{}, kSeed);
  const SimulationResult narrow = SimulateClosedLoop(Config(Policy::kPlanner, 1), 1024, 20000,
                                                     LengthMix{}, kSeed);
  ExpectEveryRequestAnsweredOnceInAFittingBatch(wide, budget.spec);
  int64_t beyond_32 = 0;
  for (const SimulatedBatch& batch : wide.batches) {
    const BucketShape& shape = batch.padded_shape;
    if (shape.batch > 32) {
      ++beyond_32;
      EXPECT_LE(shape.batch * shape.length, kDefaultMaxBatchTokens) << shape.ToString();
    }
  }
  EXPECT_GT(beyond_32, 0);
  EXPECT_GT(wide.mean_batch_rows(), 2 * narrow.mean_batch_rows());
  EXPECT_GT(wide.real_tokens_per_second(), 1.3 * narrow.real_tokens_per_second());
  EXPECT_LE(wide.padding_ratio(), 1.25);
}

TEST(BatchPolicyTest, ARaggedGridPacksRequestsEndToEndWithOnlyItsBucketsTailsAsPadding) {
  SimulationConfig ragged = Config(Policy::kPlanner, 1, EncoderGrid::kRagged);
  ragged.cost = H200BertBaseRaggedUs;
  const SimulationResult result = SimulateClosedLoop(ragged, 512, 20000, LengthMix{}, kSeed);
  int64_t answered = 0;
  for (int answers : result.answers) answered += answers;
  EXPECT_EQ(answered, 20000);
  for (const SimulatedBatch& batch : result.batches) {
    int64_t rows = 0, tokens = 0;
    for (int index : batch.requests) {
      rows += result.requests[static_cast<size_t>(index)].rows;
      tokens += result.requests[static_cast<size_t>(index)].rows *
                result.requests[static_cast<size_t>(index)].length;
    }
    EXPECT_TRUE(ragged.spec.HasBucket(batch.padded_shape)) << batch.padded_shape.ToString();
    EXPECT_LE(tokens, batch.padded_shape.length);
    EXPECT_LE(RaggedRowsNeeded(rows, tokens, batch.padded_shape.length), batch.padded_shape.batch);
  }
  // The target at saturation (padded grids: 1.15 and more): packing leaves the tails only.
  EXPECT_LE(result.padding_ratio(), 1.05);
}

TEST(BatchPolicyTest, RaggedRowSizesSpareSmallBatchesTheEmptyRowsAndChangeNothingAtSaturation) {
  // FlashAttention's rows cost (H200BertBaseRaggedUs): a lone client's request in a bucket of 9
  // rows beats one of 513; at saturation every batch is full and both grids are one.
  SimulationConfig staircase = Config(Policy::kPlanner, 1, EncoderGrid::kRagged);
  staircase.cost = H200BertBaseRaggedUs;
  SimulationConfig one_size = staircase;
  one_size.spec.bucket_batch_sizes = {RaggedLargestRows(one_size.spec.max_batch_size)};
  const SimulationResult lone_staircase = SimulateClosedLoop(staircase, 1, 2000, LengthMix{}, kSeed);
  const SimulationResult lone_one_size = SimulateClosedLoop(one_size, 1, 2000, LengthMix{}, kSeed);
  EXPECT_LT(lone_staircase.latency_percentile_us(50) + 200, lone_one_size.latency_percentile_us(50));
  const SimulationResult full_staircase = SimulateClosedLoop(staircase, 512, 20000, LengthMix{}, kSeed);
  const SimulationResult full_one_size = SimulateClosedLoop(one_size, 512, 20000, LengthMix{}, kSeed);
  EXPECT_NEAR(full_staircase.real_tokens_per_second(), full_one_size.real_tokens_per_second(),
              0.02 * full_one_size.real_tokens_per_second());
}

TEST(BatchPolicyTest, BelowCapacityPlannerPadsLessThanFifoOnItsGridAndAnswersSooner) {
  // Below capacity the planner trades padding for launches: where a batch costs about a launch
  // whatever it holds, one batch of what is queued (arrival order's) beats a launch per bin. It
  // then pads more than binning alone or the greedy batcher would (which launch more, and answer
  // later), but less than FIFO batching on the same grid, and answers sooner than both (p50; at
  // p99 sooner than the greedy batcher and no later than FIFO).
  for (double rate : {2000.0, 6000.0}) {
    SCOPED_TRACE(std::to_string(rate) + " requests/s");
    const auto arrivals = PoissonArrivals(rate, 20000, LengthMix{}, kSeed);
    const SimulationResult planner = Simulate(Config(Policy::kPlanner, 1), arrivals);
    SimulationConfig fifo_config = Config(Policy::kPlanner, 1);
    fifo_config.options.policy = BatchingPolicy::kFifo;
    const SimulationResult fifo = Simulate(fifo_config, arrivals);
    const SimulationResult greedy = Simulate(Config(Policy::kGreedyFullBins, 1), arrivals);
    ExpectEveryRequestAnsweredOnceInAFittingBatch(planner);

    EXPECT_LT(planner.padding_ratio(), fifo.padding_ratio());
    for (const SimulationResult* other : {&fifo, &greedy}) {
      EXPECT_LT(planner.latency_percentile_us(50), other->latency_percentile_us(50));
    }
    EXPECT_LT(planner.latency_percentile_us(99), greedy.latency_percentile_us(99));
    // At 2,000 requests/s FIFO's tail is level with the planner's (1,933 against 1,938 us): with
    // batch sizes in steps of 1.5 its partial batches pad few rows.
    EXPECT_LE(planner.latency_percentile_us(99), 1.01 * fifo.latency_percentile_us(99));
    // Below capacity every policy keeps up with the arrivals: the same throughput, within the drain
    // of the last batches.
    EXPECT_NEAR(planner.requests_per_second(), fifo.requests_per_second(), 0.01 * rate);
    EXPECT_NEAR(planner.requests_per_second(), rate, 0.02 * rate);
    // Spare rows carried requests from shorter bins.
    EXPECT_GT(planner.ride_alongs(), 0);
  }
}

// A request every `gap_us` from `start_us` on, `count` of them, all of `length`.
std::vector<Arrival> Stream(int64_t start_us, int64_t gap_us, int count, int64_t length) {
  std::vector<Arrival> arrivals;
  for (int i = 0; i < count; ++i) arrivals.push_back(Arrival{start_us + i * gap_us, 1, length});
  return arrivals;
}

std::vector<Arrival> Merge(const std::vector<std::vector<Arrival>>& streams) {
  std::vector<Arrival> all;
  for (const auto& stream : streams) all.insert(all.end(), stream.begin(), stream.end());
  std::stable_sort(all.begin(), all.end(),
                   [](const Arrival& a, const Arrival& b) { return a.time_us < b.time_us; });
  return all;
}

TEST(BatchPolicyTest, FullShortBatchesCannotStarveLoneRequests) {
  // Every 3 ms: 32 short requests at once (a full 32x16 batch, 0.79 ms), a lone request of another
  // length 0.3 ms later, and 32 requests of length 28 (a full 32x32 batch) at 0.4 ms. When the
  // executor frees up, the second full batch is waiting and does far more work per µs than the lone
  // request; it goes first, and the lone request falls due while it runs, then goes next.
  std::vector<std::vector<Arrival>> streams;
  const std::vector<int64_t> lengths = {40, 60, 75, 90, 120, 180, 250, 380, 500};
  for (int cycle = 0; cycle < 90; ++cycle) {
    const int64_t start_us = 3000 * cycle;
    streams.push_back(Stream(start_us, 0, 32, 12));
    streams.push_back(
        Stream(start_us + 300, 0, 1, lengths[static_cast<size_t>(cycle) % lengths.size()]));
    streams.push_back(Stream(start_us + 400, 0, 32, 28));
  }
  const auto arrivals = Merge(streams);
  const SimulationResult result = Simulate(Config(Policy::kPlanner, 1), arrivals);
  ExpectEveryRequestAnsweredOnceInAFittingBatch(result);
  ExpectWaitBoundHolds(result, 1, kDelayUs);
  ExpectOnlyOlderDueRequestsGoFirst(result, kDelayUs);
  // Lone requests were held back by full batches until they fell due, then went first.
  int held_until_due = 0;
  for (size_t i = 0; i < result.requests.size(); ++i) {
    if (result.requests[i].length > 28 && result.queue_wait_us[i] >= kDelayUs) ++held_until_due;
  }
  EXPECT_EQ(held_until_due, 90);
}

TEST(BatchPolicyTest, EfficientLongBatchesCannotStarveAShortRequest) {
  // Every 20 ms: 32 long requests at once (a full 32x512 batch: 8.4 ms, the most real work per µs
  // on the grid), a short request 1 ms later, due while that batch runs, and 32 more long ones at
  // 8 ms, full and waiting when the executor frees up. The due short request goes first.
  std::vector<std::vector<Arrival>> streams;
  for (int cycle = 0; cycle < 10; ++cycle) {
    const int64_t start_us = 20000 * cycle;
    streams.push_back(Stream(start_us, 0, 32, 480));
    streams.push_back(Stream(start_us + 1000, 0, 1, 8 + 10 * cycle));
    streams.push_back(Stream(start_us + 8000, 0, 32, 500));
  }
  const auto arrivals = Merge(streams);
  const SimulationResult result = Simulate(Config(Policy::kPlanner, 1), arrivals);
  ExpectEveryRequestAnsweredOnceInAFittingBatch(result);
  ExpectWaitBoundHolds(result, 1, kDelayUs);
  ExpectOnlyOlderDueRequestsGoFirst(result, kDelayUs);
  // Each cycle: long, short, long.
  ASSERT_EQ(result.batches.size(), 30u);
  for (size_t b = 0; b < result.batches.size(); ++b) {
    const SimulatedBatch& batch = result.batches[b];
    EXPECT_EQ(batch.requests.size(), b % 3 == 1 ? 1u : 32u) << b;
    EXPECT_EQ(batch.padded_shape.length,
              b % 3 == 1 ? BucketFor(result.requests[batch.requests[0]].length) : 512)
        << b;
  }
}

TEST(BatchPolicyTest, OnlyOlderDueRequestsOvertakeADueRequestAtAnyLoad) {
  // Random lengths and 1 to 8 rows per request, below capacity, near it, and beyond it.
  for (double rate : {1000.0, 6000.0, 30000.0}) {
    SCOPED_TRACE(std::to_string(rate) + " requests/s");
    std::vector<Arrival> arrivals = PoissonArrivals(rate, 5000, LengthMix{}, kSeed);
    for (size_t i = 0; i < arrivals.size(); ++i)
      arrivals[i].rows = 1 + static_cast<int64_t>(i * 7 % 8);
    for (int executors : {1, 3}) {
      for (EncoderGrid grid : {EncoderGrid::kRowsOnly, EncoderGrid::kTokenBudget}) {
        SCOPED_TRACE(std::to_string(executors) + " executor(s), grid " +
                     std::to_string(static_cast<int>(grid)));
        const SimulationResult result = Simulate(Config(Policy::kPlanner, executors, grid), arrivals);
        ExpectEveryRequestAnsweredOnceInAFittingBatch(result, EncoderSpec(grid));
        ExpectOnlyOlderDueRequestsGoFirst(result, kDelayUs);
      }
    }
  }
}

TEST(BatchPolicyTest, LoneRequestsOnAnIdleModelDoNotWait) {
  // One request every 5 ms, of any length: each finds the executor idle and no company coming.
  std::vector<Arrival> arrivals;
  for (int i = 0; i < 100; ++i) arrivals.push_back(Arrival{5000 * i, 1, 8 + (i * 37) % 500});
  const SimulationResult result = Simulate(Config(Policy::kPlanner, 1), arrivals);
  ExpectEveryRequestAnsweredOnceInAFittingBatch(result);
  EXPECT_EQ(result.wait_percentile_us(100), 0);
  EXPECT_EQ(result.batches.size(), arrivals.size());
}

// Issue #17's criterion at its eight loads for `binned` (graphserve's planner) against the same
// configuration with graphserve's FIFO policy.
void ExpectFifoParityAtEveryLoad(const SimulationConfig& binned) {
  SimulationConfig fifo = binned;
  fifo.options.policy = BatchingPolicy::kFifo;
  constexpr int kRequests = 20000;
  const double capacity = CapacityPerSecond(fifo, kRequests, LengthMix{}, kSeed);
  for (const LoadPoint& load : FifoParityLoads()) {
    SCOPED_TRACE(load.Name());
    const SimulationResult b = SimulateLoad(binned, load, capacity, kRequests, LengthMix{}, kSeed);
    const SimulationResult f = SimulateLoad(fifo, load, capacity, kRequests, LengthMix{}, kSeed);
    ExpectEveryRequestAnsweredOnceInAFittingBatch(b, binned.spec);
    EXPECT_TRUE(MeetsFifoParity(b, f, load))
        << "binned " << b.real_tokens_per_second() << " tok/s, p50 " << b.latency_percentile_us(50)
        << " us, p99 " << b.latency_percentile_us(99) << " us; FIFO "
        << f.real_tokens_per_second() << " tok/s, p50 " << f.latency_percentile_us(50)
        << " us, p99 " << f.latency_percentile_us(99) << " us";
  }
}

TEST(BatchPolicyTest, NeverWorseThanFifoFromOneClientToSaturation) {
  // Issue #17: at closed-loop concurrency 1, 8, 64 and 512 and Poisson load at 25, 50, 75 and 95%
  // of capacity (FIFO's at saturation: the loads both policies serve), the planner's throughput is
  // at least FIFO's and its p50 and p99 latency at most 1.05 x FIFO's, both graphserve's policies
  // on the default grid. A closed loop of 8 is where binning alone lost: each bin's batch was a
  // launch of its own, where FIFO sent everything queued in one.
  ExpectFifoParityAtEveryLoad(Config(Policy::kPlanner, 1, EncoderGrid::kTokenBudget));
}

TEST(BatchPolicyTest, NeverWorseThanFifoOnTheH200sMeasuredReplayTimes) {
  // The same criterion with the cost of every bucket as the H200 measured it (BERT-base bf16, the
  // default grid) instead of the fitted formula, which is off by a quarter for large short batches.
  std::vector<MeasuredBucket> measured;
  std::string error;
  ASSERT_TRUE(ReadMeasuredBuckets(H200_BERT_BASE_BUCKETS, &measured, &error)) << error;
  SimulationConfig binned = Config(Policy::kPlanner, 1, EncoderGrid::kTokenBudget);
  binned.cost = MeasuredCostModel(measured);
  for (const BucketShape& bucket : binned.spec.Buckets()) {
    EXPECT_TRUE(std::any_of(measured.begin(), measured.end(), [&](const MeasuredBucket& m) {
      return m.batch == bucket.batch && m.length == bucket.length;
    })) << "not measured: " << bucket.ToString();
  }
  ExpectFifoParityAtEveryLoad(binned);
}

TEST(MeasuredCostModelTest, MeasuredBucketsAndWhatLiesBetweenAndBeyond) {
  const CostModel cost = MeasuredCostModel({{1, 16, 600}, {4, 16, 700}, {8, 16, 900},  //
                                            {1, 64, 650}, {4, 64, 1000}});
  EXPECT_DOUBLE_EQ(cost(4, 16), 700);                    // measured
  EXPECT_DOUBLE_EQ(cost(6, 16), 800);                    // between 4 and 8 rows
  EXPECT_DOUBLE_EQ(cost(16, 16), 1300);                  // beyond 8 rows: the last step's rate
  EXPECT_DOUBLE_EQ(cost(4, 40), (700.0 + 1000.0) / 2);   // halfway between lengths 16 and 64
  EXPECT_DOUBLE_EQ(cost(4, 8), 700);                     // below the shortest length
  EXPECT_DOUBLE_EQ(cost(4, 112), 1000 + (1000 - 700));   // beyond the longest: its step's rate
  const CostModel single = MeasuredCostModel({{2, 32, 500}});
  EXPECT_DOUBLE_EQ(single(8, 32), 2000);  // one batch size: in proportion to rows
  EXPECT_DOUBLE_EQ(single(1, 32), 500);   // never below what was measured
}

TEST(MeasuredCostModelTest, ReadsBucketLinesAndNamesABadOne) {
  char dir[] = "/tmp/graphserve_batch_policy_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/buckets.txt";
  auto write = [&](const char* text) {
    std::ofstream out(path, std::ios::trunc);
    out << text;
  };
  std::vector<MeasuredBucket> buckets;
  std::string error;
  write("# measured\n1x8 620.5\n\n32x512 8250  # the largest\n");
  ASSERT_TRUE(ReadMeasuredBuckets(path, &buckets, &error)) << error;
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[1].batch, 32);
  EXPECT_EQ(buckets[1].length, 512);
  EXPECT_DOUBLE_EQ(buckets[1].us, 8250);
  for (const char* bad : {"1x8 620\n32*512 8250\n", "1x8\n", "1x8 620 7\n", "0x8 620\n", "1x8 -3\n",
                          "# nothing\n"}) {
    write(bad);
    EXPECT_FALSE(ReadMeasuredBuckets(path, &buckets, &error)) << bad;
    EXPECT_NE(error.find(path), std::string::npos) << error;
  }
  write("1x8 620\n32*512 8250\n");
  ASSERT_FALSE(ReadMeasuredBuckets(path, &buckets, &error));
  EXPECT_NE(error.find(":2:"), std::string::npos) << error;
  EXPECT_FALSE(ReadMeasuredBuckets(std::string(dir) + "/missing.txt", &buckets, &error));
  std::remove(path.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace graphserve::sim
