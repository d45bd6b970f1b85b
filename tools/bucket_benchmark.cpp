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
#include "graphserve/engine/executor.h"
#include "graphserve/server/config.h"
#include "traffic.h"

namespace {

using namespace graphserve;

// Median wall time of Execute over `iterations` runs of one full batch of the bucket's shape.
double TimeExecute(Executor& executor, const ModelSpec& spec, const BucketShape& shape, int iterations) {
  std::mt19937_64 random(42);
  InferenceItem item;
  item.rows = shape.batch;
  item.length = shape.length;
  for (const TensorSpec& input : spec.inputs) {
    item.inputs.push_back(tools::TokenTensor(shape.batch, shape.length,
                                             input.name.find("mask") != std::string::npos, random));
  }
  item.outputs_wanted.assign(spec.outputs.size(), true);
  Batch batch;
  batch.items = {&item};
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

std::unique_ptr<Executor> Make(const ModelSpec& spec, const std::string& device, const std::string& dir) {
  ExecutorOptions options;
  options.device = device;
  options.model_dir = dir;
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
  std::vector<std::string> outputs;       // the outputs each request wants; empty: all
  std::string json_path;
};

// The traffic mode's whole run; returns the exit status.
int RunTrafficMode(const ModelSpec& spec, const std::string& device, const std::string& model_dir,
                   const TrafficOptions& options, int iterations) {
  loadgen::LengthDistribution distribution;
  const grpc::Status parsed = loadgen::LengthDistribution::Parse(options.lengths, &distribution);
  if (!parsed.ok()) {
    std::fprintf(stderr, "--traffic-lengths: %s\n", parsed.error_message().c_str());
    return 1;
  }
  std::vector<BucketShape> timed_shapes;
  for (const std::string& text : options.time_buckets) {
    BucketShape shape;
    if (!ParseShape(text, &shape)) {
      std::fprintf(stderr, "--time-buckets: '%s' is not BATCHxLENGTH\n", text.c_str());
      return 1;
    }
    timed_shapes.push_back(shape);
  }
  // The first N draws of the seeded generator: the test recomputes them the same way.
  std::mt19937_64 rng(options.seed);
  std::vector<int64_t> lengths;
  int64_t tokens = 0;
  for (int64_t i = 0; i < options.requests; ++i) {
    lengths.push_back(distribution.Sample(rng));
    tokens += lengths.back();
  }
  std::vector<tools::TrafficBatch> batches;
  Status status = tools::PlanTraffic(spec, lengths, &batches);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }

  std::vector<bool> wanted(spec.outputs.size(), options.outputs.empty());
  for (const std::string& name : options.outputs) {
    const auto found = std::find_if(spec.outputs.begin(), spec.outputs.end(),
                                    [&](const TensorSpec& output) { return output.name == name; });
    if (found == spec.outputs.end()) {
      std::fprintf(stderr, "--traffic-outputs: the model has no output '%s'\n", name.c_str());
      return 1;
    }
    wanted[static_cast<size_t>(found - spec.outputs.begin())] = true;
  }

  auto executor = Make(spec, device, model_dir);
  if (!executor) return 1;
  std::map<BucketShape, BucketInfo> buckets;
  for (const BucketInfo& bucket : executor->Buckets()) buckets[bucket.shape] = bucket;

  tools::TrafficResult result;
  status = tools::RunTraffic(*executor, spec, batches, wanted, options.passes, options.seed, &result);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }

  // The replay-only time: each batch's bucket at the bare replay time measured at capture. Defined
  // only when every batch replays a graph (an eager bucket's time is a whole forward).
  int64_t padded_tokens = 0;
  int64_t graph_batches = 0;
  double replay_us = 0;
  std::map<std::string, int64_t> batches_by_bucket;
  for (const tools::TrafficBatch& batch : batches) {
    padded_tokens += batch.shape.batch * batch.shape.length;
    ++batches_by_bucket[batch.shape.ToString()];
    const BucketInfo& bucket = buckets.at(batch.shape);
    if (bucket.graph) {
      ++graph_batches;
      replay_us += bucket.execute_time_us;
    }
  }
  const bool all_graphs = graph_batches == static_cast<int64_t>(batches.size());
  const double execute_s = result.median_pass_s;
  const int64_t requests = options.requests;

  nlohmann::json timed = nlohmann::json::object();
  for (const BucketShape& shape : timed_shapes) {
    const double execute_us = TimeExecute(*executor, spec, shape, iterations);
    if (execute_us < 0) return 1;
    const auto found = buckets.find(shape);
    const bool graph = found != buckets.end() && found->second.graph;
    timed[shape.ToString()] = {
        {"execute_us", execute_us},
        {"graph", graph},
        {"replay_us", graph ? nlohmann::json(found->second.execute_time_us) : nlohmann::json()}};
  }
  // Every bucket with the time Warmup measured: the bare replay for a graph, a forward otherwise.
  nlohmann::json bucket_list = nlohmann::json::array();
  for (const auto& [shape, bucket] : buckets) {
    bucket_list.push_back({{"bucket", shape.ToString()},
                           {"graph", bucket.graph},
                           {"time_us", bucket.execute_time_us}});
  }
  const nlohmann::json report = {
      {"model", spec.name},
      {"device", executor->device()},
      {"precision", PrecisionName(spec.precision)},
      {"lengths", distribution.description()},
      {"seed", options.seed},
      {"requests", requests},
      {"tokens", tokens},
      {"padded_tokens", padded_tokens},
      {"padding_ratio", tokens > 0 ? static_cast<double>(padded_tokens) / tokens : 0.0},
      {"batches", batches.size()},
      {"graph_batches", graph_batches},
      {"batches_by_bucket", batches_by_bucket},
      {"pass_s", result.pass_s},
      {"execute_s", execute_s},
      {"requests_per_s", execute_s > 0 ? requests / execute_s : 0.0},
      {"tokens_per_s", execute_s > 0 ? tokens / execute_s : 0.0},
      {"replay_s", all_graphs ? nlohmann::json(replay_us / 1e6) : nlohmann::json()},
      {"replay_tokens_per_s",
       all_graphs && replay_us > 0 ? nlohmann::json(tokens / (replay_us / 1e6)) : nlohmann::json()},
      {"timed_buckets", timed},
      {"buckets", bucket_list},
  };
  std::printf("traffic %s on %s: %lld requests (%s), %lld real tokens in %zu batches (%lld as graphs), "
              "padding %.3f\n  Execute, median of %d passes: %.3f s = %.0f requests/s, %.0f real tokens/s\n",
              spec.name.c_str(), executor->device().c_str(), static_cast<long long>(requests),
              distribution.description().c_str(), static_cast<long long>(tokens), batches.size(),
              static_cast<long long>(graph_batches), report["padding_ratio"].get<double>(),
              options.passes, execute_s, report["requests_per_s"].get<double>(),
              report["tokens_per_s"].get<double>());
  if (all_graphs && replay_us > 0) {
    std::printf("  bare replays (capture-time times): %.3f s = %.0f real tokens/s\n", replay_us / 1e6,
                tokens / (replay_us / 1e6));
  }
  for (const auto& [shape, entry] : timed.items()) {
    std::printf("  %s: Execute %.0f us\n", shape.c_str(), entry["execute_us"].get<double>());
  }
  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    file << report.dump(2) << "\n";
    file.close();
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", options.json_path.c_str());
      return 1;
    }
  }
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
  app.add_option("--batches", batches, "bucket batch sizes (default: the model's grid)")->delimiter(',');
  app.add_option("--lengths", lengths, "bucket lengths (default: the model's grid)")->delimiter(',');
  app.add_option("--iterations", iterations)->capture_default_str();
  TrafficOptions traffic;
  app.add_option("--traffic-requests", traffic.requests,
                 "Traffic mode: run this many one-row requests of the length mix, binned into full "
                 "batches, back to back through the executor")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", traffic.seed, "Traffic mode: seed of the lengths")->capture_default_str();
  app.add_option("--traffic-lengths", traffic.lengths,
                 "Traffic mode: length mix, as graphserve-loadgen's --lengths")
      ->capture_default_str();
  app.add_option("--passes", traffic.passes, "Traffic mode: timed passes (the median counts)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--time-buckets", traffic.time_buckets,
                 "Traffic mode: also time one full batch of these buckets (e.g. 1x64)")
      ->delimiter(',');
  app.add_option("--traffic-outputs", traffic.outputs,
                 "Traffic mode: the outputs each request wants, comma-separated (default: all)")
      ->delimiter(',');
  app.add_option("--json", traffic.json_path, "Traffic mode: write the figures as JSON here");
  CLI11_PARSE(app, argc, argv);

  config::ModelConfig model_config = BuiltinEncoderConfig();
  std::string model_dir;
  if (!repository.empty()) {
    model_dir = repository + "/" + model_name;
    Status status = LoadModelConfig(model_dir + "/config.pbtxt", &model_config);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
  }
  ModelSpec spec;
  Status status = ModelSpecFromConfig(model_config, &spec);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  if (!batches.empty()) spec.bucket_batch_sizes = batches;
  if (!lengths.empty()) spec.bucket_lengths = lengths;
  if (traffic.requests > 0) return RunTrafficMode(spec, device, model_dir, traffic, iterations);

  const auto load_start = std::chrono::steady_clock::now();
  auto graphs = Make(spec, device, model_dir);
  if (!graphs) return 1;
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const DeviceMemory memory = GetDeviceMemory(device);
  ModelSpec eager_spec = spec;
  eager_spec.cuda_graphs_disabled = true;
  auto eager = Make(eager_spec, device, model_dir);
  if (!eager) return 1;

  const CaptureSummary summary = graphs->capture_summary();
  std::printf("model %s (%s, %s) on %s: %d graphs captured, %d disabled; grid warm-up+capture+verify %.2f s "
              "(load included %.2f s); graph pool %.1f MiB; device memory in use after capture %.2f GiB\n\n",
              spec.name.c_str(), spec.platform.c_str(), PrecisionName(spec.precision), device.c_str(),
              summary.graphs_captured, summary.graphs_disabled, summary.capture_time_us / 1e6, load_s,
              summary.graph_pool_bytes / 1048576.0, memory.allocated_bytes / 1073741824.0);
  std::printf("| bucket | replay (µs) | graph Execute (µs) | eager Execute (µs) | eager ÷ graph |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  for (const BucketInfo& bucket : graphs->Buckets()) {
    const double graph_us = TimeExecute(*graphs, spec, bucket.shape, iterations);
    const double eager_us = TimeExecute(*eager, spec, bucket.shape, iterations);
    std::printf("| %s | %s | %.0f | %.0f | %.2f |\n", bucket.shape.ToString().c_str(),
                bucket.graph ? std::to_string(static_cast<int64_t>(bucket.execute_time_us)).c_str()
                             : EagerReasonName(bucket.eager_reason),
                graph_us, eager_us, eager_us / graph_us);
  }
  return 0;
}
