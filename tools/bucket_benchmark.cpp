// graphserve-bucket-bench: per bucket of a model's grid, the replay time of its CUDA graph against an
// eager forward of the same padded batch, both end to end through Executor::Execute (padding,
// copies in and out included) and, for the graph, the bare replay measured at capture. Prints a
// markdown table; a benchmark, not a test.
//
//   graphserve-bucket-bench [--model-repository DIR --model NAME] [--device cuda:0]
//                           [--batches 1,2,4,...] [--lengths 16,32,...] [--iterations 20]
//
// Traffic mode (--traffic-requests N): the serving ceiling instead of the table. N one-row requests
// drawn from graphserve-loadgen's length mix (the same LengthDistribution, fed by
// mt19937_64(--seed)) are binned into full batches (traffic.h) and run back to back through the
// model's executor (graphs per its config), without gRPC or batching decisions; prints real
// tokens/s and requests/s, and with --json FILE writes them for deploy/bench/e2e_benchmark.py.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graphserve/client/loadgen.h"
#include "graphserve/client/number_flags.h"
#include "graphserve/engine/executor.h"
#include "graphserve/server/config/config.h"
#include "graphserve/server/config/triton_config.h"
#include "traffic.h"

namespace {

using namespace graphserve;

// The row lengths that fill a ragged bucket (rows × total tokens) as full as one row's length
// allows: its tokens exactly when its rows can hold them (no filler row needed), else every row but
// the filler's at the longest length. Never more real rows than a batch takes (max_batch_size: the
// grid's largest row size is one more, for a tail's filler).
std::vector<int64_t> FullRaggedRows(const ModelSpec& spec, const BucketShape& shape) {
  const int64_t longest = spec.max_sequence_length;
  const int64_t rows = std::min({shape.batch, spec.max_batch_size, shape.length});
  if (rows * longest < shape.length) {
    return std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(1, std::min(shape.batch - 1, rows))),
                                longest);
  }
  std::vector<int64_t> lengths(static_cast<size_t>(rows), shape.length / rows);
  for (int64_t k = 0; k < shape.length % rows; ++k) ++lengths[static_cast<size_t>(k)];
  return lengths;
}

// One full batch of the bucket's shape: one item of every row padded to it, or for a ragged model
// one item per row of FullRaggedRows.
std::vector<InferenceItem> FullBatchItems(const ModelSpec& spec, const BucketShape& shape) {
  std::mt19937_64 random(42);
  std::vector<std::pair<int64_t, int64_t>> rows_and_lengths;
  if (spec.ragged) {
    for (int64_t length : FullRaggedRows(spec, shape)) rows_and_lengths.emplace_back(1, length);
  } else {
    rows_and_lengths.emplace_back(shape.batch, shape.length);
  }
  std::vector<InferenceItem> items;
  for (const auto& [rows, length] : rows_and_lengths) {
    InferenceItem item;
    item.rows = rows;
    item.length = length;
    for (const TensorSpec& input : spec.inputs) {
      item.inputs.push_back(tools::BucketInput(input, BucketShape{rows, length}, random));
    }
    item.outputs_wanted.assign(spec.outputs.size(), true);
    items.push_back(std::move(item));
  }
  return items;
}

// Real tokens of FullBatchItems(spec, shape).
int64_t FullBatchTokens(const ModelSpec& spec, const BucketShape& shape) {
  int64_t tokens = 0;
  for (const InferenceItem& item : FullBatchItems(spec, shape)) tokens += item.rows * item.length;
  return tokens;
}

// Median wall time of Execute over `iterations` runs of `items` in a batch padded to `shape`.
double TimeItems(Executor& executor, std::vector<InferenceItem> items, const BucketShape& shape,
                 int iterations) {
  Batch batch;
  for (InferenceItem& item : items) batch.items.push_back(&item);
  batch.padded_shape = shape;
  BatchOutputs outputs;
  std::vector<double> times;
  for (int i = 0; i < iterations + 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Status status = executor.Execute(batch, &outputs);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return -1;
    }
    if (i >= 3) times.push_back(us);  // the first runs warm caches
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median wall time of Execute over `iterations` runs of one full batch of the bucket's shape.
double TimeExecute(Executor& executor, const ModelSpec& spec, const BucketShape& shape, int iterations) {
  return TimeItems(executor, FullBatchItems(spec, shape), shape, iterations);
}

// One request of one row of `length` tokens, as a lone client sends it.
std::vector<InferenceItem> LoneRequest(const ModelSpec& spec, int64_t length) {
  std::mt19937_64 random(42);
  InferenceItem item;
  item.rows = 1;
  item.length = length;
  for (const TensorSpec& input : spec.inputs) {
    item.inputs.push_back(tools::BucketInput(input, BucketShape{1, length}, random));
  }
  item.outputs_wanted.assign(spec.outputs.size(), true);
  std::vector<InferenceItem> items;
  items.push_back(std::move(item));
  return items;
}

std::unique_ptr<Executor> Make(const ModelSpec& spec, const ExecutorOptions& options) {
  std::unique_ptr<Executor> executor;
  Status status = CreateExecutor(spec, options, &executor);
  if (status.ok()) status = executor->Warmup();
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return nullptr;
  }
  return executor;
}

// "8x128" → {8, 128}.
bool ParseShape(const std::string& text, BucketShape* shape) {
  const size_t x = text.find('x');
  if (x == std::string::npos) return false;
  try {
    size_t used = 0;
    shape->batch = std::stoll(text.substr(0, x), &used);
    if (used != x) return false;
    shape->length = std::stoll(text.substr(x + 1), &used);
    if (used != text.size() - x - 1) return false;
  } catch (const std::exception&) {
    return false;
  }
  return shape->batch > 0 && shape->length > 0;
}

struct TrafficOptions {
  int64_t requests = 0;
  uint64_t seed = 1;
  std::string lengths = "skewed";
  int passes = 3;
  std::vector<std::string> time_buckets;  // "BxL" shapes whose single Execute is also timed
  int64_t lone_request_length = 0;        // > 0: also time one such request alone in its bucket
  std::vector<std::string> outputs;       // the outputs each request wants; empty: all
  std::string json_path;
};

// Everything fixed before the executor exists: the length mix, the requests drawn from it binned into
// batches, the outputs each request wants and the buckets also timed alone.
struct TrafficPlan {
  loadgen::LengthDistribution distribution;
  std::vector<BucketShape> timed_shapes;
  int64_t tokens = 0;  // real tokens over all requests
  std::vector<tools::TrafficBatch> batches;
  std::vector<bool> wanted;  // one flag per spec output
};

bool ParseTimedShapes(const std::vector<std::string>& texts, std::vector<BucketShape>* shapes) {
  for (const std::string& text : texts) {
    BucketShape shape;
    if (!ParseShape(text, &shape)) {
      std::fprintf(stderr, "--time-buckets: '%s' is not BATCHxLENGTH\n", text.c_str());
      return false;
    }
    shapes->push_back(shape);
  }
  return true;
}

bool DrawAndBinRequests(const ModelSpec& spec, const TrafficOptions& options, TrafficPlan* plan) {
  // The first N draws of the seeded generator: the test recomputes them the same way.
  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < options.requests; ++i) {
    lengths.push_back(plan->distribution.Sample(rng));
    plan->tokens += lengths.back();
  }
  const Status status = tools::PlanTraffic(spec, lengths, &plan->batches);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return false;
  }
  return true;
}

// All outputs when `names` is empty.
bool WantedOutputs(const ModelSpec& spec, const std::vector<std::string>& names, std::vector<bool>* wanted) {
  wanted->assign(spec.outputs.size(), names.empty());
  for (const std::string& name : names) {
    const auto found = std::find_if(spec.outputs.begin(), spec.outputs.end(),
                                    [&](const TensorSpec& output) { return output.name == name; });
    if (found == spec.outputs.end()) {
      std::fprintf(stderr, "--traffic-outputs: the model has no output '%s'\n", name.c_str());
      return false;
    }
    (*wanted)[static_cast<size_t>(found - spec.outputs.begin())] = true;
  }
  return true;
}

// Stops at the first bad flag (or a length no bucket holds), having said why on stderr.
bool PlanTrafficRun(const ModelSpec& spec, const TrafficOptions& options, TrafficPlan* plan) {
  const grpc::Status parsed = loadgen::LengthDistribution::Parse(options.lengths, &plan->distribution);
  if (!parsed.ok()) {
    std::fprintf(stderr, "--traffic-lengths: %s\n", parsed.error_message().c_str());
    return false;
  }
  return ParseTimedShapes(options.time_buckets, &plan->timed_shapes) &&
         DrawAndBinRequests(spec, options, plan) && WantedOutputs(spec, options.outputs, &plan->wanted);
}

// What the run measured, and what the executor's buckets say about the planned batches.
struct TrafficMeasurements {
  tools::TrafficResult passes;
  int64_t padded_tokens = 0;
  int64_t graph_batches = 0;
  double replay_us = 0;
  bool all_graphs = false;
  std::map<std::string, int64_t> batches_by_bucket;
  nlohmann::json timed = nlohmann::json::object();  // "BxL" → one full batch's Execute
  nlohmann::json lone_request;                      // TimeLoneRequest's, or null
  nlohmann::json bucket_times = nlohmann::json::array();
};

// The replay-only time: each batch's bucket at the bare replay time measured at capture. Defined
// only when every batch replays a graph (an eager bucket's time is a whole forward).
void TallyBatches(const ModelSpec& spec, const std::vector<tools::TrafficBatch>& batches,
                  const std::map<BucketShape, BucketInfo>& buckets, TrafficMeasurements* measured) {
  for (const tools::TrafficBatch& batch : batches) {
    measured->padded_tokens += spec.BucketElements(batch.shape);
    ++measured->batches_by_bucket[batch.shape.ToString()];
    const BucketInfo& bucket = buckets.at(batch.shape);
    if (bucket.graph) {
      ++measured->graph_batches;
      measured->replay_us += bucket.execute_time_us;
    }
  }
  measured->all_graphs = measured->graph_batches == static_cast<int64_t>(batches.size());
}

bool TimeChosenBuckets(Executor& executor, const ModelSpec& spec, const std::vector<BucketShape>& shapes,
                       const std::map<BucketShape, BucketInfo>& buckets, int iterations,
                       nlohmann::json* timed) {
  for (const BucketShape& shape : shapes) {
    const double execute_us = TimeExecute(executor, spec, shape, iterations);
    if (execute_us < 0) return false;
    const auto found = buckets.find(shape);
    const bool graph = found != buckets.end() && found->second.graph;
    (*timed)[shape.ToString()] = {
        {"execute_us", execute_us},
        {"graph", graph},
        {"replay_us", graph ? nlohmann::json(found->second.execute_time_us) : nlohmann::json()}};
  }
  return true;
}

// One request of one row alone, in the bucket the server's batcher gives it (BucketFor): what a
// client at concurrency 1 waits for beyond the front end. A ragged model's lone row goes into a
// bucket of its grid's row size, a padded model's into 1 x its padded length.
bool TimeLoneRequest(Executor& executor, const ModelSpec& spec, int64_t length,
                     const std::map<BucketShape, BucketInfo>& buckets, int iterations,
                     nlohmann::json* timed) {
  const BucketShape shape = spec.BucketFor(1, length);
  const double execute_us = TimeItems(executor, LoneRequest(spec, length), shape, iterations);
  if (execute_us < 0) return false;
  const auto found = buckets.find(shape);
  const bool graph = found != buckets.end() && found->second.graph;
  *timed = {{"length", length},
            {"bucket", shape.ToString()},
            {"execute_us", execute_us},
            {"graph", graph},
            {"replay_us", graph ? nlohmann::json(found->second.execute_time_us) : nlohmann::json()}};
  return true;
}

// Every bucket with the time Warmup measured: the bare replay for a graph, a forward otherwise.
nlohmann::json BucketTimes(const std::map<BucketShape, BucketInfo>& buckets) {
  nlohmann::json bucket_list = nlohmann::json::array();
  for (const auto& [shape, bucket] : buckets) {
    bucket_list.push_back({{"bucket", shape.ToString()},
                           {"graph", bucket.graph},
                           {"time_us", bucket.execute_time_us}});
  }
  return bucket_list;
}

nlohmann::json TrafficReport(const ModelSpec& spec, const std::string& device, const TrafficOptions& options,
                             const TrafficPlan& plan, const TrafficMeasurements& measured) {
  const double execute_s = measured.passes.median_pass_s;
  const int64_t requests = options.requests;
  const int64_t tokens = plan.tokens;
  const double replay_us = measured.replay_us;
  return {
      {"model", spec.name},
      {"device", device},
      {"precision", PrecisionName(spec.precision)},
      {"lengths", plan.distribution.description()},
      {"seed", options.seed},
      {"requests", requests},
      {"tokens", tokens},
      {"padded_tokens", measured.padded_tokens},
      {"padding_ratio", tokens > 0 ? static_cast<double>(measured.padded_tokens) / tokens : 0.0},
      {"batches", plan.batches.size()},
      {"graph_batches", measured.graph_batches},
      {"batches_by_bucket", measured.batches_by_bucket},
      {"pass_s", measured.passes.pass_s},
      {"execute_s", execute_s},
      {"requests_per_s", execute_s > 0 ? requests / execute_s : 0.0},
      {"tokens_per_s", execute_s > 0 ? tokens / execute_s : 0.0},
      {"replay_s", measured.all_graphs ? nlohmann::json(replay_us / 1e6) : nlohmann::json()},
      {"replay_tokens_per_s",
       measured.all_graphs && replay_us > 0 ? nlohmann::json(tokens / (replay_us / 1e6)) : nlohmann::json()},
      {"timed_buckets", measured.timed},
      {"lone_request", measured.lone_request},
      {"buckets", measured.bucket_times},
  };
}

void PrintTrafficSummary(const ModelSpec& spec, const std::string& device, const TrafficOptions& options,
                         const TrafficPlan& plan, const TrafficMeasurements& measured,
                         const nlohmann::json& report) {
  std::printf("traffic %s on %s: %lld requests (%s), %lld real tokens in %zu batches (%lld as graphs), "
              "padding %.3f\n  Execute, median of %d passes: %.3f s = %.0f requests/s, %.0f real tokens/s\n",
              spec.name.c_str(), device.c_str(), static_cast<long long>(options.requests),
              plan.distribution.description().c_str(), static_cast<long long>(plan.tokens),
              plan.batches.size(), static_cast<long long>(measured.graph_batches),
              report["padding_ratio"].get<double>(),
              options.passes, measured.passes.median_pass_s, report["requests_per_s"].get<double>(),
              report["tokens_per_s"].get<double>());
  if (measured.all_graphs && measured.replay_us > 0) {
    std::printf("  bare replays (capture-time times): %.3f s = %.0f real tokens/s\n",
                measured.replay_us / 1e6, plan.tokens / (measured.replay_us / 1e6));
  }
  for (const auto& [shape, entry] : measured.timed.items()) {
    std::printf("  %s: Execute %.0f us\n", shape.c_str(), entry["execute_us"].get<double>());
  }
  if (!measured.lone_request.is_null()) {
    std::printf("  one request of %lld tokens alone, in %s: Execute %.0f us\n",
                static_cast<long long>(measured.lone_request["length"].get<int64_t>()),
                measured.lone_request["bucket"].get<std::string>().c_str(),
                measured.lone_request["execute_us"].get<double>());
  }
}

bool WriteJson(const std::string& path, const nlohmann::json& report) {
  std::ofstream file(path);
  file << report.dump(2) << "\n";
  file.close();
  if (!file) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

// The traffic mode's whole run; returns the exit status.
int RunTrafficMode(const ModelSpec& spec, const ExecutorOptions& where, const TrafficOptions& options,
                   int iterations) {
  TrafficPlan plan;
  if (!PlanTrafficRun(spec, options, &plan)) return 1;
  auto executor = Make(spec, where);
  if (!executor) return 1;
  std::map<BucketShape, BucketInfo> buckets;
  for (const BucketInfo& bucket : executor->Buckets()) buckets[bucket.shape] = bucket;

  TrafficMeasurements measured;
  const Status status = tools::RunTraffic(*executor, spec, plan.batches, plan.wanted, options.passes,
                                          options.seed, &measured.passes);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  TallyBatches(spec, plan.batches, buckets, &measured);
  if (!TimeChosenBuckets(*executor, spec, plan.timed_shapes, buckets, iterations, &measured.timed)) return 1;
  if (options.lone_request_length > 0 && !TimeLoneRequest(*executor, spec, options.lone_request_length,
                                                          buckets, iterations, &measured.lone_request)) {
    return 1;
  }
  measured.bucket_times = BucketTimes(buckets);

  const nlohmann::json report = TrafficReport(spec, executor->device(), options, plan, measured);
  PrintTrafficSummary(spec, executor->device(), options, plan, measured, report);
  if (!options.json_path.empty() && !WriteJson(options.json_path, report)) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string repository, model_name, device = "cuda:0";
  std::vector<int64_t> batches, lengths;
  int iterations = 20;
  CLI::App app{"Per-bucket CUDA graph replay against eager execution of the same padded batch"};
  app.add_option("--model-repository", repository, "model repository (default: the built-in encoder)");
  app.add_option("--model", model_name, "model folder in the repository");
  app.add_option("--device", device)->capture_default_str();
  app.add_option("--batches", batches,
                 "bucket batch sizes, each at every length (default: the model's grid)")
      ->delimiter(',');
  app.add_option("--lengths", lengths, "bucket lengths (default: the model's grid)")->delimiter(',');
  app.add_option("--iterations", iterations)->capture_default_str();
  TrafficOptions traffic;
  app.add_option("--traffic-requests", traffic.requests,
                 "Traffic mode: run this many one-row requests of the length mix, binned into full "
                 "batches, back to back through the executor")
      ->check(graphserve::PositiveFlag());
  app.add_option("--seed", traffic.seed, "Traffic mode: seed of the lengths")->capture_default_str();
  app.add_option("--traffic-lengths", traffic.lengths,
                 "Traffic mode: length mix, as graphserve-loadgen's --lengths")
      ->capture_default_str();
  app.add_option("--passes", traffic.passes, "Traffic mode: timed passes (the median counts)")
      ->check(graphserve::PositiveFlag())
      ->capture_default_str();
  app.add_option("--time-buckets", traffic.time_buckets,
                 "Traffic mode: also time one full batch of these buckets (e.g. 1x64)")
      ->delimiter(',');
  app.add_option("--time-lone-request", traffic.lone_request_length,
                 "Traffic mode: also time one request of one row of this many tokens, alone in its bucket")
      ->check(CLI::PositiveNumber);
  app.add_option("--traffic-outputs", traffic.outputs,
                 "Traffic mode: the outputs each request wants, comma-separated (default: all)")
      ->delimiter(',');
  app.add_option("--json", traffic.json_path, "Traffic mode: write the figures as JSON here");
  CLI11_PARSE(app, argc, argv);

  inference::ModelConfig model_config = BuiltinEncoderConfig();
  ExecutorOptions where;
  where.device = device;
  Status status;
  if (!repository.empty()) {
    where.model_dir = repository + "/" + model_name;
    status = LoadModelConfig(where.model_dir + "/config.pbtxt", &model_config);
    if (status.ok()) status = ResolveModelConfig(where.model_dir, &model_config, nullptr);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    where.model_filename = model_config.default_model_filename();
  }
  ModelSpec spec;
  status = ModelSpecFromConfig(model_config, &spec);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  if (!batches.empty()) {
    // Every given size at every length, as asked: a rectangular grid, whatever the model's budget.
    std::sort(batches.begin(), batches.end());
    batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
    spec.bucket_batch_sizes = batches;
    spec.max_batch_size = std::max(spec.max_batch_size, batches.back());
    spec.max_batch_tokens = 0;
  }
  if (!lengths.empty()) {
    std::sort(lengths.begin(), lengths.end());
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    spec.bucket_lengths = lengths;
  }
  if (traffic.requests > 0) return RunTrafficMode(spec, where, traffic, iterations);

  const auto load_start = std::chrono::steady_clock::now();
  auto graphs = Make(spec, where);
  if (!graphs) return 1;
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const DeviceMemory memory = GetDeviceMemory(device);
  ModelSpec eager_spec = spec;
  eager_spec.cuda_graphs_disabled = true;
  auto eager = Make(eager_spec, where);
  if (!eager) return 1;

  const CaptureSummary summary = graphs->capture_summary();
  std::printf("model %s (%s, %s) on %s: %d graphs captured, %d disabled; grid warm-up+capture+verify %.2f s "
              "(load included %.2f s); graph pool %.1f MiB; device memory in use after capture %.2f GiB\n\n",
              spec.name.c_str(), spec.platform.c_str(), PrecisionName(spec.precision), device.c_str(),
              summary.graphs_captured, summary.graphs_disabled, summary.capture_time_us / 1e6, load_s,
              summary.graph_pool_bytes / 1048576.0, memory.allocated_bytes / 1073741824.0);
  std::printf(
      "| bucket | replay (µs) | graph Execute (µs) | eager Execute (µs) | eager ÷ graph | real tokens "
      "| real tokens/s of the replay |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (const BucketInfo& bucket : graphs->Buckets()) {
    const double graph_us = TimeExecute(*graphs, spec, bucket.shape, iterations);
    const double eager_us = TimeExecute(*eager, spec, bucket.shape, iterations);
    // A padded bucket's real tokens are its batch × length only when every row is that long; a
    // ragged bucket's are what FullBatchItems packed into it.
    const int64_t tokens = FullBatchTokens(spec, bucket.shape);
    const std::string per_second =
        bucket.graph && bucket.execute_time_us > 0
            ? std::to_string(static_cast<int64_t>(tokens / (bucket.execute_time_us / 1e6)))
            : std::string("-");
    std::printf("| %s | %s | %.0f | %.0f | %.2f | %lld | %s |\n", spec.BucketLabel(bucket.shape).c_str(),
                bucket.graph ? std::to_string(static_cast<int64_t>(bucket.execute_time_us)).c_str()
                             : EagerReasonName(bucket.eager_reason),
                graph_us, eager_us, eager_us / graph_us, static_cast<long long>(tokens), per_second.c_str());
  }
  return 0;
}
