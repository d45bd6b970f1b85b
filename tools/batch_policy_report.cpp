// Prints the batching policies' comparison on the simulated H200 BERT-base cost model (see
// batch_simulator.h): padding ratio, throughput and queue wait, below capacity and at saturation,
// for one and two executors. Simulated time: the figures are the same on any host. Run by hand:
// <build>/tools/batch_policy_report [requests per run, default 40000]
//                                   [fifo-parity | grids [MEASURED_BUCKETS]: that table only]
// MEASURED_BUCKETS: replay times measured on a device ("BATCHxLENGTH US" lines), the cost model of
// the grids table instead of the fitted one (MeasuredCostModel, batch_simulator.h).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "graphserve/server/batching/batch_simulator.h"

namespace graphserve::sim {
namespace {

constexpr uint64_t kSeed = 2024;
constexpr int64_t kDelayUs = 500;  // the default max_queue_delay_us
constexpr int kSaturationClients = 512;

struct Contender {
  const char* name;
  Policy policy;
  EncoderGrid grid;
};

// graphserve's planner on its default grid and on the same grid without the token budget (what
// batches beyond 32 rows bring); the baselines; and the old greedy batcher on the 32-row grid too,
// which separates what the grid brings from what the policy brings.
constexpr Contender kContenders[] = {
    {"planner, default grid", Policy::kPlanner, EncoderGrid::kTokenBudget},
    {"planner, 32-row grid", Policy::kPlanner, EncoderGrid::kRowsOnly},
    {"FIFO, pad to longest", Policy::kFifoPadToLongest, EncoderGrid::kRowsOnly},
    {"greedy bins, 6x6 grid", Policy::kGreedyFullBins, EncoderGrid::kSixBySix},
    {"greedy bins, 32-row grid", Policy::kGreedyFullBins, EncoderGrid::kRowsOnly},
    {"planner, ragged (est.)", Policy::kPlanner, EncoderGrid::kRagged},
};

SimulationConfig Config(const Contender& contender, int executors) {
  SimulationConfig config;
  config.policy = contender.policy;
  config.spec = EncoderSpec(contender.grid);
  // A ragged bucket is (rows, total tokens): priced by its tokens, an estimate until measured.
  if (config.spec.ragged) config.cost = H200BertBaseRaggedUs;
  config.options.max_queue_delay_us = kDelayUs;
  config.executors = executors;
  return config;
}

void PrintHeader() {
  std::printf("| %-28s | %-25s | %7s | %11s | %7s | %6s | %6s | %7s | %7s | %8s |\n", "load",
              "policy", "padding", "real ktok/s", "req/s", "rows/b", "riders", "p50 us", "p99 us",
              "max us");
  std::printf(
      "|------------------------------|---------------------------|---------|-------------|--------"
      "-|"
      "--------|--------|---------|---------|----------|\n");
}

void PrintRow(const std::string& load, const Contender& contender, const SimulationResult& result) {
  std::printf(
      "| %-28s | %-25s | %7.3f | %11.2f | %7.0f | %6.1f | %5.1f%% | %7lld | %7lld | %8lld |\n",
      load.c_str(), contender.name, result.padding_ratio(), result.real_tokens_per_second() / 1e6,
      result.requests_per_second(), result.mean_batch_rows(),
      100.0 * static_cast<double>(result.ride_alongs()) /
          static_cast<double>(result.requests.size()),
      static_cast<long long>(result.wait_percentile_us(50)),
      static_cast<long long>(result.wait_percentile_us(99)),
      static_cast<long long>(result.wait_percentile_us(100)));
}

// Issue #17's criterion: at each load, the planner's throughput at least FIFO's and its p50 and p99
// latency at most 1.05 x FIFO's, both graphserve's policies (SchedulerOptions::policy) on the
// default grid, one executor. Capacity is FIFO's saturation throughput: the loads both serve.
void PrintFifoParity(int requests, const LengthMix& mix) {
  SimulationConfig binned = Config(kContenders[0], 1);
  SimulationConfig fifo = binned;
  fifo.options.policy = BatchingPolicy::kFifo;
  const double capacity = CapacityPerSecond(fifo, requests, mix, kSeed);
  std::printf(
      "\nFIFO parity (issue #17): the planner (binned) against graphserve's FIFO policy on the default "
      "grid, 1 executor;\ncapacity = FIFO at saturation, %.0f requests/s; latency = arrival to "
      "answer; ok = tok/s >= FIFO's (open loop: within\n0.1%%, the last batch's drain), p50 and p99 <= 1.05 x FIFO's.\n\n",
      capacity);
  std::printf("| %-28s | %-7s | %11s | %7s | %7s | %7s | %-4s |\n", "load", "policy", "real ktok/s",
              "p50 us", "p99 us", "padding", "ok");
  std::printf("|------------------------------|---------|-------------|---------|---------|---------|------|\n");
  for (const LoadPoint& load : FifoParityLoads()) {
    const SimulationResult b = SimulateLoad(binned, load, capacity, requests, mix, kSeed);
    const SimulationResult f = SimulateLoad(fifo, load, capacity, requests, mix, kSeed);
    const bool ok = MeetsFifoParity(b, f, load);
    auto row = [&](const char* policy, const SimulationResult& r, const char* verdict) {
      std::printf("| %-28s | %-7s | %11.1f | %7lld | %7lld | %7.3f | %-4s |\n", load.Name().c_str(),
                  policy, r.real_tokens_per_second() / 1e3,
                  static_cast<long long>(r.latency_percentile_us(50)),
                  static_cast<long long>(r.latency_percentile_us(99)), r.padding_ratio(), verdict);
    };
    row("binned", b, ok ? "yes" : "NO");
    row("FIFO", f, "");
  }
}

// The default lengths up to 128, then each doubling up to 512 in `steps_per_doubling` equal steps:
// DefaultBucketLengths' rule (4 steps) with the step count varied, for the comparison only.
std::vector<int64_t> LengthsWithStepsAbove128(int steps_per_doubling) {
  std::vector<int64_t> lengths;
  for (int64_t length : DefaultBucketLengths(512)) {
    if (length <= 128) lengths.push_back(length);
  }
  for (int64_t power = 128; power < 512; power *= 2) {
    for (int step = 1; step <= steps_per_doubling; ++step) {
      lengths.push_back(power + power / steps_per_doubling * step);
    }
  }
  return lengths;
}

// The default grid against finer and coarser steps for long requests (above 128 tokens), batch
// sizes in powers of two (the default before steps of 1.5) and a larger token budget, in closed
// loops: finer bins pad less but fill smaller batches, and the comparison says which wins at which
// load before a device run does.
void PrintGridChoices(int requests, const LengthMix& mix, const CostModel& cost, const char* cost_name) {
  struct Grid {
    std::string name;
    std::vector<int64_t> lengths;
    std::vector<int64_t> batch_sizes;  // empty: the default for the token budget
    int64_t max_batch_tokens;
  };
  const std::vector<int64_t> default_lengths = DefaultBucketLengths(512);
  const std::vector<Grid> grids = {
      {"default", default_lengths, {}, kDefaultMaxBatchTokens},
      {"8 steps per doubling >128", LengthsWithStepsAbove128(8), {}, kDefaultMaxBatchTokens},
      {"2 steps per doubling >128", LengthsWithStepsAbove128(2), {}, kDefaultMaxBatchTokens},
      {"batch sizes powers of 2",
       default_lengths,
       {1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
       kDefaultMaxBatchTokens},
      {"24576 tokens", default_lengths, {}, 24576},
  };
  std::printf(
      "\nGrids: the planner, 1 executor, closed loops, cost model: %s. The default takes 4 steps "
      "per doubling above 128 tokens and batch sizes in steps of 1.5 within 16384 tokens.\n\n",
      cost_name);
  std::printf("| %-7s | %-25s | %7s | %11s | %7s | %6s | %7s | %7s |\n", "clients", "grid", "buckets",
              "real ktok/s", "padding", "rows/b", "p50 us", "p99 us");
  std::printf("|---------|---------------------------|---------|-------------|---------|--------|---------|---------|\n");
  for (int clients : {1, 8, 64, 512, 2048}) {
    for (const Grid& grid : grids) {
      SimulationConfig config = Config(kContenders[0], 1);
      config.cost = cost;
      config.spec.bucket_lengths = grid.lengths;
      config.spec.max_batch_tokens = grid.max_batch_tokens;
      config.spec.bucket_batch_sizes =
          !grid.batch_sizes.empty()
              ? grid.batch_sizes
              : DefaultBucketBatchSizes(config.spec.max_batch_size, grid.max_batch_tokens, grid.lengths.front());
      const SimulationResult r = SimulateClosedLoop(config, clients, requests, mix, kSeed);
      std::printf("| %7d | %-25s | %7zu | %11.1f | %7.3f | %6.1f | %7lld | %7lld |\n", clients,
                  grid.name.c_str(), config.spec.Buckets().size(), r.real_tokens_per_second() / 1e3,
                  r.padding_ratio(), r.mean_batch_rows(),
                  static_cast<long long>(r.latency_percentile_us(50)),
                  static_cast<long long>(r.latency_percentile_us(99)));
    }
  }
}

int Main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 40000;
  const LengthMix mix;  // log-normal, median 48, sigma 0.8, clipped to [8, 512]
  if (argc > 2 && std::string(argv[2]) == "fifo-parity") {
    PrintFifoParity(requests, mix);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "grids") {
    if (argc > 3) {
      std::vector<MeasuredBucket> measured;
      std::string error;
      if (!ReadMeasuredBuckets(argv[3], &measured, &error)) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 2;
      }
      const std::string name = std::string("measured buckets from ") + argv[3];
      PrintGridChoices(requests, mix, MeasuredCostModel(measured), name.c_str());
    } else {
      PrintGridChoices(requests, mix, H200BertBaseUs, "the fitted H200 BERT-base formula");
    }
    return 0;
  }
  const ModelSpec grid = EncoderSpec(EncoderGrid::kTokenBudget);
  std::printf(
      "Cost model: BERT-base bf16 on an H200 as CUDA graphs (0.73 ms up to ~1x64 .. 8.4 ms at "
      "32x512).\n");
  std::printf(
      "Mix: single-row requests, log-normal lengths (median 48, sigma 0.8, clipped to [8, 512]), "
      "seed %llu.\n",
      static_cast<unsigned long long>(kSeed));
  std::printf("Default grid: batch sizes");
  for (int64_t b : grid.bucket_batch_sizes) std::printf(" %lld", static_cast<long long>(b));
  std::printf(" x lengths");
  for (int64_t l : grid.bucket_lengths) std::printf(" %lld", static_cast<long long>(l));
  std::printf(
      " within %lld tokens beyond 32 rows (%zu buckets; 32-row grid: up to 32 rows at every length)."
      " max_queue_delay %lld us. %d requests per run.\n",
      static_cast<long long>(grid.max_batch_tokens), grid.Buckets().size(),
      static_cast<long long>(kDelayUs), requests);
  std::printf(
      "padding = padded / real elements; riders = requests that rode in a longer bin's batch;\n"
      "wait = arrival to batch start; saturation = %d clients in a closed loop.\n\n",
      kSaturationClients);
  PrintHeader();
  for (int executors : {1, 2}) {
    for (double rate_per_executor : {2000.0, 6000.0, 12000.0}) {
      const double rate = rate_per_executor * executors;
      const auto arrivals = PoissonArrivals(rate, requests, mix, kSeed);
      const std::string load = std::to_string(executors) + " exec, Poisson " +
                               std::to_string(static_cast<int>(rate)) + "/s";
      for (const Contender& contender : kContenders) {
        PrintRow(load, contender, Simulate(Config(contender, executors), arrivals));
      }
    }
    const std::string load = std::to_string(executors) + " exec, saturation";
    for (const Contender& contender : kContenders) {
      PrintRow(load, contender,
               SimulateClosedLoop(Config(contender, executors), kSaturationClients, requests, mix,
                                  kSeed));
    }
  }
  PrintFifoParity(requests, mix);
  PrintGridChoices(requests, mix, H200BertBaseUs, "the fitted H200 BERT-base formula");
  return 0;
}

}  // namespace
}  // namespace graphserve::sim

int main(int argc, char** argv) { return graphserve::sim::Main(argc, argv); }
