#pragma once
// A deterministic discrete-event simulation of one model's batching, for comparing batching
// policies on padding, throughput and queue wait without a GPU: requests arrive (scripted, Poisson,
// or from a closed loop of clients), a policy forms batches, and fake executors take as long per
// batch as a cost model says. Simulated time only, so results are exact and repeatable, whatever
// the host.
//
// Policies:
//   kPlanner          graphserve's BatchPlanner (bins, ride-alongs, measured costs, rate-aware
//   waits)
//                     on the spec's grid; the cost model evaluated on the grid is its cost table.
//   kFifoPadToLongest FIFO batching padded to the batch maximum (what servers without size binning
//                     do): up to max_batch_size rows in arrival order, padded to the longest
//                     request, run eagerly at that exact shape; dispatched when full or when the
//                     oldest request has waited the delay.
//   kGreedyFullBins   bins on the spec's grid, a bin dispatched when it fills the largest batch of
//                     its length or its oldest request has waited the delay, oldest first, padded
//                     to the smallest bucket (graphserve's batcher before the padding-aware
//                     planner).
//
// Used by batch_policy_test (assertions) and batch_policy_report (the comparison table).
// Not thread-safe; every function is a pure function of its arguments.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graphserve/engine/model_spec.h"
#include "graphserve/server/batching/scheduler.h"

namespace graphserve::sim {

// Execution time in µs of one batch of `batch` rows padded to `length` (a ragged spec: `batch` rows
// of `length` total tokens).
using CostModel = std::function<double(int64_t batch, int64_t length)>;

// A BERT-base bf16 encoder on an H200, replayed as a CUDA graph: 0.73 ms at 1x16 and 1x64 (launch
// bound), 1.00 ms at 8x128, 2.17 ms at 32x128, 8.4 ms at 32x512; in between
// max(730, 610 + c·b·L + d·b·L²), the quadratic term being attention, fitted through the last
// three.
double H200BertBaseUs(int64_t batch, int64_t length);

// An estimate, not a measurement, of the same encoder run ragged (ModelSpec::ragged) on a bucket of
// `rows` rows and `tokens` packed tokens: H200BertBaseUs's per-token term on the tokens, its
// attention term with each token attending over its own row only, at the default LengthMix's
// E[L²] / E[L] (about 125 tokens), and FlashAttention's 0.75 µs for each row of the bucket (an
// H100's, measured by varlen_bound.py). Replace it with measured buckets once a ragged export has
// been benchmarked (MeasuredCostModel reads "ROWSxTOKENS us" just as well).
double H200BertBaseRaggedUs(int64_t rows, int64_t tokens);

// One bucket's replay time as measured on a device (graphserve-bucket-bench, the e2e benchmark's
// ceiling, or the log's capture-time line).
struct MeasuredBucket {
  int64_t batch = 0;
  int64_t length = 0;
  double us = 0;
};

// Measured buckets as a cost model, for grids with buckets that were not measured: a measured bucket
// costs what it measured; at a measured length, a batch between two measured batch sizes is
// interpolated linearly in rows, and one beyond the largest is extrapolated from the largest two
// (cost keeps growing at the last measured step's rate, which overstates it where larger batches
// grow more efficient); a length between two measured lengths is interpolated linearly between
// them, one beyond the longest extrapolated from the longest two, one below the shortest costs
// what the shortest does. A length with one measured batch size scales it in proportion to rows.
// `buckets` must not be empty. Not plan-grid's planner::CostModel (client/grid_planner.h), which
// prices every unmeasured bucket from one fitted c0 + c1·bL + c2·bL²: on the H200's BERT-base table
// that fit misses measured buckets by up to 39% (512x8) and prices a 384x40 batch 9% below the line
// through its measured neighbours: batch sizes in steps of 1.5 would gain 4.5% at 2,048 clients
// on it against 1.5% here.
CostModel MeasuredCostModel(const std::vector<MeasuredBucket>& buckets);

// Reads "BATCHxLENGTH MICROSECONDS" lines ('#' starts a comment, blank lines are skipped). False,
// with `error` naming the line, on anything else or on no bucket at all.
bool ReadMeasuredBuckets(const std::string& path, std::vector<MeasuredBucket>* buckets,
                         std::string* error);

// Request lengths: log-normal with this median and σ (of the log), rounded, clipped to [min, max].
// The default is the skewed mix.
struct LengthMix {
  double median = 48;
  double sigma = 0.8;
  int64_t min = 8;
  int64_t max = 512;
};

struct Arrival {
  int64_t time_us = 0;
  int64_t rows = 1;
  int64_t length = 1;
};

// `count` single-row requests with exponential gaps at `per_second`, from a fixed seed.
std::vector<Arrival> PoissonArrivals(double per_second, int count, const LengthMix& mix,
                                     uint64_t seed);

enum class Policy { kPlanner, kFifoPadToLongest, kGreedyFullBins };
const char* PolicyName(Policy policy);

struct SimulationConfig {
  Policy policy = Policy::kPlanner;
  ModelSpec spec;  // the grid (kPlanner, kGreedyFullBins) and max_batch_size (all)
  SchedulerOptions options;
  int executors = 1;
  CostModel cost = H200BertBaseUs;
};

// What the executors saw of one batch.
struct SimulatedBatch {
  int64_t start_us = 0;
  int64_t end_us = 0;
  BucketShape padded_shape;
  std::vector<int> requests;  // indexes into the simulation's requests, in arrival order
  int ride_alongs = 0;
};

struct SimulationResult {
  std::vector<Arrival> requests;       // every request, in arrival order
  std::vector<int64_t> queue_wait_us;  // per request: arrival → its batch's start
  std::vector<int> answers;            // per request: how many batches it was part of
  std::vector<SimulatedBatch> batches;
  double real_elements = 0;    // Σ rows × length
  double padded_elements = 0;  // Σ padded batch × padded length
  int64_t makespan_us = 0;     // first arrival → last batch's end

  double padding_ratio() const { return padded_elements / real_elements; }
  double requests_per_second() const;
  double real_tokens_per_second() const;  // real elements per second of makespan
  int64_t wait_percentile_us(double percentile) const;
  // Arrival to answer (the end of the request's batch): what a client sees.
  int64_t latency_percentile_us(double percentile) const;
  int64_t ride_alongs() const;
  double mean_batch_rows() const;
  double longest_batch_us() const;
};

// Open loop: the given arrivals (sorted by time).
SimulationResult Simulate(const SimulationConfig& config, const std::vector<Arrival>& arrivals);

// Closed loop: `clients` clients each send a single-row request at time 0 and the next one as soon
// as the previous is answered, `total` requests in all, lengths from `mix` with `seed`. Keeps the
// queue as deep as the clients allow: the saturation throughput.
SimulationResult SimulateClosedLoop(const SimulationConfig& config, int clients, int total,
                                    const LengthMix& mix, uint64_t seed);

// A load of issue #17's FIFO-parity criterion: a closed loop of `clients` clients, or (clients 0)
// Poisson arrivals at `capacity_fraction` of the capacity the caller measured.
struct LoadPoint {
  int clients = 0;
  double capacity_fraction = 0;
  std::string Name() const;
};

// The criterion's eight loads: closed loops of 1, 8, 64 and 512 clients; Poisson at 25, 50, 75 and
// 95% of capacity.
std::vector<LoadPoint> FifoParityLoads();

// Capacity, in requests per second: what `config` sustains with 512 clients in a closed loop, the
// report's saturation.
double CapacityPerSecond(const SimulationConfig& config, int requests, const LengthMix& mix,
                         uint64_t seed);

// `requests` requests of `mix` at `load`, capacity being `capacity_per_s`.
SimulationResult SimulateLoad(const SimulationConfig& config, const LoadPoint& load,
                              double capacity_per_s, int requests, const LengthMix& mix,
                              uint64_t seed);

// Issue #17's criterion at `load`: `binned`'s throughput at least `fifo`'s, and its p50 and p99
// latency at most 1.05 x `fifo`'s. In an open loop both serve the offered load and their
// throughputs differ only by when the last batch ends, so there it may be 0.1% lower (about a
// millisecond of a run of seconds).
bool MeetsFifoParity(const SimulationResult& binned, const SimulationResult& fifo,
                     const LoadPoint& load);

// The grids EncoderSpec offers.
enum class EncoderGrid {
  kTokenBudget,  // graphserve's default: lengths DefaultBucketLengths(512), batch sizes
                 // DefaultBucketBatchSizes (steps of 1.5) 1..32 at every length and up to 512
                 // within kDefaultMaxBatchTokens (284 buckets)
  kRowsOnly,     // the same lengths × batch sizes 1..32 (the grid before the budget; 200)
  kSixBySix,     // the default batch sizes 1..32 x {16..512}
  kRagged,       // the same encoder ragged (Triton's ragged batching): up to 512 rows, the default
                 // token sizes DefaultRaggedTokenSizes(512, kDefaultMaxBatchTokens); cost it with
                 // H200BertBaseRaggedUs
};

// The built-in encoder's spec (max batch 32, length 512) on `grid`.
ModelSpec EncoderSpec(EncoderGrid grid);

}  // namespace graphserve::sim
