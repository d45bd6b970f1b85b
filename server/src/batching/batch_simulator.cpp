#include "graphserve/server/batching/batch_simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <sstream>
#include <tuple>

namespace graphserve::sim {
namespace {

// One batch a policy chose: indexes of its requests and its padded shape.
struct Choice {
  std::vector<int> requests;
  BucketShape padded_shape;
  int ride_alongs = 0;
};

// A batching policy as the event loop drives it. Add sees every arrival in time order; Next is
// asked whenever an executor is idle; NextWakeUp says when Next could change its mind without an
// arrival.
class Batcher {
 public:
  virtual ~Batcher() = default;
  virtual void Add(int index, const Arrival& request) = 0;
  virtual std::optional<Choice> Next(int64_t now_us) = 0;
  virtual std::optional<int64_t> NextWakeUp(int64_t now_us) const = 0;
};

// graphserve's planner, on requests that carry only their rows and length (no tensors).
class PlannerBatcher : public Batcher {
 public:
  explicit PlannerBatcher(const SimulationConfig& config)
      : planner_(config.spec, config.options, CostTable(config)) {}

  void Add(int index, const Arrival& request) override {
    auto pending = std::make_shared<PendingRequest>();
    pending->item.rows = request.rows;
    pending->item.length = request.length;
    pending->enqueue_us = request.time_us;
    index_of_[pending.get()] = index;
    planner_.Add(std::move(pending));
  }

  std::optional<Choice> Next(int64_t now_us) override {
    std::optional<DispatchDecision> decision = planner_.Next(now_us, /*executor_idle=*/true);
    if (!decision) return std::nullopt;
    Choice choice;
    choice.padded_shape = decision->padded_shape;
    choice.ride_alongs = decision->ride_alongs;
    for (const auto& request : decision->requests) {
      auto found = index_of_.find(request.get());
      choice.requests.push_back(found->second);
      index_of_.erase(found);
    }
    return choice;
  }

  std::optional<int64_t> NextWakeUp(int64_t now_us) const override {
    return planner_.NextWakeUp(now_us, /*executor_idle=*/true);
  }

 private:
  // What warm-up would have measured: the cost model on every bucket of the grid.
  static BucketCosts CostTable(const SimulationConfig& config) {
    BucketCosts costs;
    for (const BucketShape& shape : config.spec.Buckets()) {
      costs[shape] = config.cost(shape.batch, shape.length);
    }
    return costs;
  }

  BatchPlanner planner_;
  std::map<const PendingRequest*, int> index_of_;
};

// Shared by the two baselines: a FIFO of (index, request).
struct Queued {
  int index;
  Arrival request;
};

class FifoBatcher : public Batcher {
 public:
  explicit FifoBatcher(const SimulationConfig& config)
      : max_batch_(config.spec.max_batch_size), delay_us_(config.options.max_queue_delay_us) {}

  void Add(int index, const Arrival& request) override {
    queue_.push_back(Queued{index, request});
    rows_ += request.rows;
  }

  std::optional<Choice> Next(int64_t now_us) override {
    if (queue_.empty()) return std::nullopt;
    if (rows_ < max_batch_ && now_us - delay_us_ < queue_.front().request.time_us)
      return std::nullopt;
    Choice choice;
    int64_t rows = 0, longest = 0;
    while (!queue_.empty() &&
           (choice.requests.empty() || rows + queue_.front().request.rows <= max_batch_)) {
      rows += queue_.front().request.rows;
      longest = std::max(longest, queue_.front().request.length);
      choice.requests.push_back(queue_.front().index);
      queue_.pop_front();
    }
    rows_ -= rows;
    choice.padded_shape = BucketShape{rows, longest};
    return choice;
  }

  std::optional<int64_t> NextWakeUp(int64_t) const override {
    if (queue_.empty()) return std::nullopt;
    return queue_.front().request.time_us + delay_us_;
  }

 private:
  const int64_t max_batch_;
  const int64_t delay_us_;
  std::deque<Queued> queue_;
  int64_t rows_ = 0;
};

class GreedyBinBatcher : public Batcher {
 public:
  explicit GreedyBinBatcher(const SimulationConfig& config)
      : spec_(config.spec),
        delay_us_(config.options.max_queue_delay_us),
        bins_(spec_.bucket_lengths.size() + 1) {}

  void Add(int index, const Arrival& request) override {
    const size_t bin = static_cast<size_t>(
        std::lower_bound(spec_.bucket_lengths.begin(), spec_.bucket_lengths.end(), request.length) -
        spec_.bucket_lengths.begin());
    bins_[bin].requests.push_back(Queued{index, request});
    bins_[bin].rows += request.rows;
  }

  std::optional<Choice> Next(int64_t now_us) override {
    Bin* chosen = nullptr;
    for (Bin& bin : bins_) {
      if (bin.requests.empty()) continue;
      const int64_t oldest = bin.requests.front().request.time_us;
      if (bin.rows < LargestBatch(bin) && now_us - delay_us_ < oldest) continue;
      if (chosen == nullptr || oldest < chosen->requests.front().request.time_us) chosen = &bin;
    }
    if (chosen == nullptr) return std::nullopt;
    const int64_t largest = LargestBatch(*chosen);
    Choice choice;
    int64_t rows = 0, longest = 0;
    while (!chosen->requests.empty() &&
           (choice.requests.empty() || rows + chosen->requests.front().request.rows <= largest)) {
      rows += chosen->requests.front().request.rows;
      longest = std::max(longest, chosen->requests.front().request.length);
      choice.requests.push_back(chosen->requests.front().index);
      chosen->requests.pop_front();
    }
    chosen->rows -= rows;
    const bool oversize = chosen == &bins_.back() || rows > largest;
    choice.padded_shape = oversize
                              ? BucketShape{rows, longest}
                              : spec_.BucketFor(rows, spec_.bucket_lengths[chosen - bins_.data()]);
    return choice;
  }

  std::optional<int64_t> NextWakeUp(int64_t) const override {
    std::optional<int64_t> earliest;
    for (const Bin& bin : bins_) {
      if (bin.requests.empty()) continue;
      const int64_t t = bin.requests.front().request.time_us + delay_us_;
      if (!earliest || t < *earliest) earliest = t;
    }
    return earliest;
  }

 private:
  struct Bin {
    std::deque<Queued> requests;
    int64_t rows = 0;
  };
  // The most rows of a batch at the bin's length (the oversize bin: at the longest bucket's).
  int64_t LargestBatch(const Bin& bin) const {
    const size_t index = std::min(static_cast<size_t>(&bin - bins_.data()),
                                  spec_.bucket_lengths.size() - 1);
    const int64_t largest = spec_.LargestBatchFor(spec_.bucket_lengths[index]);
    return largest > 0 ? largest : spec_.max_batch_size;
  }
  const ModelSpec spec_;
  const int64_t delay_us_;
  std::vector<Bin> bins_;
};

std::unique_ptr<Batcher> MakeBatcher(const SimulationConfig& config) {
  switch (config.policy) {
    case Policy::kPlanner:
      return std::make_unique<PlannerBatcher>(config);
    case Policy::kFifoPadToLongest:
      return std::make_unique<FifoBatcher>(config);
    case Policy::kGreedyFullBins:
      return std::make_unique<GreedyBinBatcher>(config);
  }
  return nullptr;
}

int64_t SampleLength(std::mt19937_64& random, const LengthMix& mix) {
  std::lognormal_distribution<double> length(std::log(mix.median), mix.sigma);
  const double value = std::round(length(random));
  return std::clamp(static_cast<int64_t>(value), mix.min, mix.max);
}

// The event loop shared by the open and closed loops: arrivals, executors finishing and policy
// wake-ups, in time order. In a closed loop `on_answered` schedules each client's next request.
class EventLoop {
 public:
  EventLoop(const SimulationConfig& config, SimulationResult* result)
      : config_(config),
        result_(result),
        batcher_(MakeBatcher(config)),
        free_at_(config.executors, 0) {}

  // Schedules a request; `time_us` may not be earlier than the current time.
  void Schedule(const Arrival& request) {
    future_.push(std::make_tuple(request.time_us, sequence_++, request));
  }

  // Runs until every scheduled request (and any it causes) has been answered. `on_answered` is
  // called with each request's answer time.
  void Run(const std::function<void(int64_t answered_us)>& on_answered) {
    int64_t now_us = future_.empty() ? 0 : std::get<0>(future_.top());
    const int64_t first_us = now_us;
    int64_t last_end_us = now_us;
    while (true) {
      while (!future_.empty() && std::get<0>(future_.top()) <= now_us) {
        const Arrival request = std::get<2>(future_.top());
        future_.pop();
        const int index = static_cast<int>(result_->requests.size());
        result_->requests.push_back(request);
        result_->queue_wait_us.push_back(-1);
        result_->answers.push_back(0);
        batcher_->Add(index, request);
      }
      for (int64_t& free_at : free_at_) {
        if (free_at > now_us) continue;
        std::optional<Choice> choice = batcher_->Next(now_us);
        if (!choice) break;
        SimulatedBatch batch;
        batch.start_us = now_us;
        batch.padded_shape = choice->padded_shape;
        batch.ride_alongs = choice->ride_alongs;
        batch.end_us = now_us + static_cast<int64_t>(std::ceil(config_.cost(
                                    batch.padded_shape.batch, batch.padded_shape.length)));
        free_at = batch.end_us;
        last_end_us = std::max(last_end_us, batch.end_us);
        result_->padded_elements += static_cast<double>(config_.spec.BucketElements(batch.padded_shape));
        std::sort(choice->requests.begin(), choice->requests.end());
        for (int index : choice->requests) {
          const Arrival& request = result_->requests[index];
          result_->queue_wait_us[index] = now_us - request.time_us;
          ++result_->answers[index];
          result_->real_elements += static_cast<double>(request.rows * request.length);
          if (on_answered) on_answered(batch.end_us);
        }
        batch.requests = std::move(choice->requests);
        result_->batches.push_back(std::move(batch));
      }

      // The next moment anything can happen: an arrival, an executor finishing, a policy wake-up.
      std::optional<int64_t> next;
      auto consider = [&next, now_us](int64_t t) {
        if (t > now_us && (!next || t < *next)) next = t;
      };
      if (!future_.empty()) consider(std::get<0>(future_.top()));
      bool idle = false;
      for (int64_t free_at : free_at_) {
        consider(free_at);
        idle = idle || free_at <= now_us;
      }
      if (idle) {
        if (std::optional<int64_t> wake = batcher_->NextWakeUp(now_us))
          consider(std::max(*wake, now_us + 1));
      }
      if (!next) break;
      now_us = *next;
    }
    result_->makespan_us = last_end_us - first_us;
  }

 private:
  const SimulationConfig& config_;
  SimulationResult* result_;
  std::unique_ptr<Batcher> batcher_;
  std::vector<int64_t> free_at_;
  // (time, sequence, request): earliest first, then in scheduling order.
  using Event = std::tuple<int64_t, int64_t, Arrival>;
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return std::tie(std::get<0>(a), std::get<1>(a)) > std::tie(std::get<0>(b), std::get<1>(b));
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> future_;
  int64_t sequence_ = 0;
};

}  // namespace

double H200BertBaseUs(int64_t batch, int64_t length) {
  // a + c·bL + d·bL² through (8x128, 1000), (32x128, 2170), (32x512, 8400); floored at the
  // launch-bound 730 µs of the small buckets.
  const double elements = static_cast<double>(batch * length);
  return std::max(
      730.0, 610.0 + 0.34932454 * elements + 2.4636587e-4 * elements * static_cast<double>(length));
}

double H200BertBaseRaggedUs(int64_t rows, int64_t tokens) {
  // The default mix's E[L²] / E[L]: median 48, σ 0.8 → 48·e^(1.5·0.64) ≈ 125 tokens.
  constexpr double kAttendedTokens = 125.0;
  // FlashAttention's work for every row of a bucket, empty ones included: an H100 layer of 1,024
  // tokens took 16 µs in 33 rows and 32 in 289 (varlen_bound.py), about 0.75 µs a row in 12 layers.
  constexpr double kRowUs = 0.75;
  const double packed = static_cast<double>(tokens);
  return std::max(730.0, 610.0 + 0.34932454 * packed + 2.4636587e-4 * packed * kAttendedTokens +
                             kRowUs * static_cast<double>(rows));
}

namespace {

// The cost of `batch` rows at one measured length (batch size -> µs, at least one entry).
double AtMeasuredLength(const std::map<int64_t, double>& row, int64_t batch) {
  if (row.size() == 1) {
    return row.begin()->second * std::max(1.0, static_cast<double>(batch) /
                                                   static_cast<double>(row.begin()->first));
  }
  auto upper = row.lower_bound(batch);
  if (upper != row.end() && upper->first == batch) return upper->second;
  if (upper == row.begin()) ++upper;  // below the smallest: the first step's line
  if (upper == row.end()) --upper;    // beyond the largest: the last step's line
  const auto lower = std::prev(upper);
  const double slope = (upper->second - lower->second) / static_cast<double>(upper->first - lower->first);
  return lower->second + slope * static_cast<double>(batch - lower->first);
}

}  // namespace

CostModel MeasuredCostModel(const std::vector<MeasuredBucket>& buckets) {
  auto table = std::make_shared<std::map<int64_t, std::map<int64_t, double>>>();
  for (const MeasuredBucket& bucket : buckets) (*table)[bucket.length][bucket.batch] = bucket.us;
  return [table](int64_t batch, int64_t length) {
    auto upper = table->lower_bound(length);
    if (upper != table->end() && upper->first == length) return AtMeasuredLength(upper->second, batch);
    if (upper == table->begin()) return AtMeasuredLength(upper->second, batch);
    if (upper == table->end()) {
      if (table->size() == 1) return AtMeasuredLength(table->begin()->second, batch);
      --upper;
    }
    const auto lower = std::prev(upper);
    const double low = AtMeasuredLength(lower->second, batch);
    const double high = AtMeasuredLength(upper->second, batch);
    return low + (high - low) * static_cast<double>(length - lower->first) /
                     static_cast<double>(upper->first - lower->first);
  };
}

bool ReadMeasuredBuckets(const std::string& path, std::vector<MeasuredBucket>* buckets,
                         std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read " + path;
    return false;
  }
  buckets->clear();
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string shape;
    if (!(fields >> shape)) continue;
    MeasuredBucket bucket;
    char separator = 0;
    std::istringstream dims(shape);
    std::string rest;
    if (!(dims >> bucket.batch >> separator >> bucket.length) || separator != 'x' || (dims >> rest) ||
        !(fields >> bucket.us) || (fields >> rest) || bucket.batch < 1 || bucket.length < 1 ||
        !(bucket.us > 0)) {
      *error = path + ":" + std::to_string(number) + ": expected BATCHxLENGTH MICROSECONDS";
      return false;
    }
    buckets->push_back(bucket);
  }
  if (buckets->empty()) {
    *error = path + ": no bucket";
    return false;
  }
  return true;
}

std::vector<Arrival> PoissonArrivals(double per_second, int count, const LengthMix& mix,
                                     uint64_t seed) {
  std::mt19937_64 random(seed);
  std::exponential_distribution<double> gap_us(per_second / 1e6);
  std::vector<Arrival> arrivals;
  double t = 0;
  for (int i = 0; i < count; ++i) {
    t += gap_us(random);
    arrivals.push_back(Arrival{static_cast<int64_t>(t), 1, SampleLength(random, mix)});
  }
  return arrivals;
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kPlanner:
      return "graphserve planner";
    case Policy::kFifoPadToLongest:
      return "FIFO, pad to longest";
    case Policy::kGreedyFullBins:
      return "greedy bins 6x6";
  }
  return "?";
}

double SimulationResult::requests_per_second() const {
  return makespan_us > 0
             ? static_cast<double>(requests.size()) * 1e6 / static_cast<double>(makespan_us)
             : 0;
}

double SimulationResult::real_tokens_per_second() const {
  return makespan_us > 0 ? real_elements * 1e6 / static_cast<double>(makespan_us) : 0;
}

int64_t SimulationResult::wait_percentile_us(double percentile) const {
  if (queue_wait_us.empty()) return 0;
  std::vector<int64_t> sorted = queue_wait_us;
  std::sort(sorted.begin(), sorted.end());
  const size_t rank =
      static_cast<size_t>(std::ceil(percentile / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

int64_t SimulationResult::latency_percentile_us(double percentile) const {
  if (requests.empty()) return 0;
  std::vector<int64_t> latency(requests.size(), 0);
  for (const SimulatedBatch& batch : batches) {
    for (int index : batch.requests) latency[index] = batch.end_us - requests[index].time_us;
  }
  std::sort(latency.begin(), latency.end());
  const size_t rank =
      static_cast<size_t>(std::ceil(percentile / 100.0 * static_cast<double>(latency.size())));
  return latency[std::clamp<size_t>(rank, 1, latency.size()) - 1];
}

int64_t SimulationResult::ride_alongs() const {
  int64_t total = 0;
  for (const SimulatedBatch& batch : batches) total += batch.ride_alongs;
  return total;
}

double SimulationResult::mean_batch_rows() const {
  double rows = 0;
  for (const Arrival& request : requests) rows += static_cast<double>(request.rows);
  return batches.empty() ? 0 : rows / static_cast<double>(batches.size());
}

double SimulationResult::longest_batch_us() const {
  int64_t longest = 0;
  for (const SimulatedBatch& batch : batches)
    longest = std::max(longest, batch.end_us - batch.start_us);
  return static_cast<double>(longest);
}

SimulationResult Simulate(const SimulationConfig& config, const std::vector<Arrival>& arrivals) {
  SimulationResult result;
  EventLoop loop(config, &result);
  for (const Arrival& arrival : arrivals) loop.Schedule(arrival);
  loop.Run(nullptr);
  return result;
}

SimulationResult SimulateClosedLoop(const SimulationConfig& config, int clients, int total,
                                    const LengthMix& mix, uint64_t seed) {
  SimulationResult result;
  EventLoop loop(config, &result);
  std::mt19937_64 random(seed);
  int sent = 0;
  for (; sent < std::min(clients, total); ++sent)
    loop.Schedule(Arrival{0, 1, SampleLength(random, mix)});
  loop.Run([&](int64_t answered_us) {
    if (sent < total) {
      loop.Schedule(Arrival{answered_us, 1, SampleLength(random, mix)});
      ++sent;
    }
  });
  return result;
}

std::string LoadPoint::Name() const {
  if (clients > 0) return "closed loop, " + std::to_string(clients) + " clients";
  return "Poisson, " + std::to_string(static_cast<int>(std::lround(100 * capacity_fraction))) +
         "% of capacity";
}

std::vector<LoadPoint> FifoParityLoads() {
  std::vector<LoadPoint> loads;
  for (int clients : {1, 8, 64, 512}) loads.push_back(LoadPoint{clients, 0});
  for (double fraction : {0.25, 0.50, 0.75, 0.95}) loads.push_back(LoadPoint{0, fraction});
  return loads;
}

double CapacityPerSecond(const SimulationConfig& config, int requests, const LengthMix& mix,
                         uint64_t seed) {
  return SimulateClosedLoop(config, 512, requests, mix, seed).requests_per_second();
}

SimulationResult SimulateLoad(const SimulationConfig& config, const LoadPoint& load,
                              double capacity_per_s, int requests, const LengthMix& mix,
                              uint64_t seed) {
  if (load.clients > 0) return SimulateClosedLoop(config, load.clients, requests, mix, seed);
  return Simulate(config,
                  PoissonArrivals(load.capacity_fraction * capacity_per_s, requests, mix, seed));
}

bool MeetsFifoParity(const SimulationResult& binned, const SimulationResult& fifo,
                     const LoadPoint& load) {
  const double drain_allowance = load.clients > 0 ? 1.0 : 0.999;
  return binned.real_tokens_per_second() >= drain_allowance * fifo.real_tokens_per_second() &&
         binned.latency_percentile_us(50) <= 1.05 * fifo.latency_percentile_us(50) &&
         binned.latency_percentile_us(99) <= 1.05 * fifo.latency_percentile_us(99);
}

ModelSpec EncoderSpec(EncoderGrid grid) {
  ModelSpec spec;
  spec.name = "encoder";
  spec.platform = kPlatformBuiltinEncoder;
  spec.max_batch_size = 32;
  spec.max_sequence_length = 512;
  if (grid == EncoderGrid::kRagged) {
    spec.platform = kPlatformAotInductor;
    spec.ragged = true;
    spec.max_batch_size = 512;
    spec.inputs = {RaggedTokenInput("input_ids", DataType::kInt64)};
    spec.batch_inputs = {
        BatchInputOf("cu_seqlens", BatchInputKind::kAccumulatedElementCountWithZero, DataType::kInt32)};
    spec.outputs = {TensorSpec{"pooled", DataType::kFp32, {768}}};
    spec.max_batch_tokens = kDefaultMaxBatchTokens;
    spec.bucket_lengths = DefaultRaggedTokenSizes(spec.max_sequence_length, spec.max_batch_tokens);
    spec.bucket_batch_sizes = DefaultRaggedRowSizes(spec.max_batch_size);
    return spec;
  }
  spec.bucket_lengths = grid == EncoderGrid::kSixBySix
                            ? std::vector<int64_t>{16, 32, 64, 128, 256, 512}
                            : DefaultBucketLengths(512);
  spec.max_batch_tokens = grid == EncoderGrid::kTokenBudget ? kDefaultMaxBatchTokens : 0;
  spec.bucket_batch_sizes =
      DefaultBucketBatchSizes(32, spec.max_batch_tokens, spec.bucket_lengths.front());
  return spec;
}

}  // namespace graphserve::sim
