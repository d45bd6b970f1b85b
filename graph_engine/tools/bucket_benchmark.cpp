// graphserve-bucket-bench: per bucket of a model's grid, the replay time of its CUDA graph against an
// eager forward of the same padded batch, both end to end through Executor::Execute (padding,
// copies in and out included) and, for the graph, the bare replay measured at capture. Prints a
// markdown table; a benchmark, not a test.
//
//   graphserve-bucket-bench [--model-repository DIR --model NAME] [--device cuda:0]
//                           [--batches 1,2,4,...] [--lengths 16,32,...] [--iterations 20]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/server/config.h"

namespace {

using namespace graphserve;

HostTensor TokenTensor(int64_t rows, int64_t length, std::mt19937& random, bool ones) {
  HostTensor tensor;
  tensor.dtype = DataType::kInt64;
  tensor.shape = {rows, length};
  std::vector<int64_t> values(rows * length);
  std::uniform_int_distribution<int64_t> token(1, 999);
  for (int64_t& v : values) v = ones ? 1 : token(random);
  tensor.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
  return tensor;
}

// Median wall time of Execute over `iterations` runs of one full batch of the bucket's shape.
double TimeExecute(Executor& executor, const ModelSpec& spec, const BucketShape& shape, int iterations) {
  std::mt19937 random(42);
  InferenceItem item;
  item.rows = shape.batch;
  item.length = shape.length;
  for (const TensorSpec& input : spec.inputs) {
    item.inputs.push_back(TokenTensor(shape.batch, shape.length, random, input.name.find("mask") != std::string::npos));
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
