#include "traffic.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <random>
#include <string>

namespace graphserve::tools {

HostTensor TokenTensor(int64_t rows, int64_t length, bool mask, std::mt19937_64& random) {
  std::vector<int64_t> values(static_cast<size_t>(rows * length), 1);
  if (!mask) {
    std::uniform_int_distribution<int64_t> token(1, 999);
    for (int64_t& value : values) value = token(random);
  }
  HostTensor tensor;
  tensor.dtype = DataType::kInt64;
  tensor.shape = {rows, length};
  tensor.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
  return tensor;
}

HostTensor BucketInput(const TensorSpec& input, const BucketShape& shape, std::mt19937_64& random) {
  if (input.dtype == DataType::kInt64 && input.dims == std::vector<int64_t>{-1}) {
    return TokenTensor(shape.batch, shape.length, input.name.find("mask") != std::string::npos,
                       random);
  }
  HostTensor tensor;
  tensor.dtype = input.dtype;
  tensor.shape = PaddedShape(input, shape);
  tensor.bytes.assign(static_cast<size_t>(tensor.element_count()) * ElementSize(input.dtype), '\0');
  if (input.dtype == DataType::kFp32) {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    float* values = reinterpret_cast<float*>(tensor.bytes.data());
    for (int64_t i = 0; i < tensor.element_count(); ++i) values[i] = value(random);
  }
  return tensor;
}

namespace {

// A ragged model's traffic at saturation: requests go end to end in arrival order, as many as the
// grid's largest bucket holds, each batch into the smallest bucket that holds its rows and tokens
// (what the server's ragged planner does when the queue is never short of work).
Status PlanRaggedTraffic(const ModelSpec& spec, const std::vector<int64_t>& lengths,
                         std::vector<TrafficBatch>* batches) {
  TrafficBatch open;
  int64_t tokens = 0;
  auto close = [&]() {
    if (open.lengths.empty()) return;
    open.shape = spec.BucketFor(static_cast<int64_t>(open.lengths.size()), tokens);
    batches->push_back(std::move(open));
    open = TrafficBatch{};
    tokens = 0;
  };
  for (int64_t length : lengths) {
    if (length < 1 || length > spec.max_sequence_length || spec.IsOversize(1, length)) {
      return InvalidArgument("request length " + std::to_string(length) + " is outside [1, " +
                             std::to_string(spec.max_sequence_length) + "] or no bucket holds it");
    }
    if (spec.IsOversize(static_cast<int64_t>(open.lengths.size()) + 1, tokens + length)) close();
    open.lengths.push_back(length);
    tokens += length;
  }
  close();
  return Status::Ok();
}

}  // namespace

Status PlanTraffic(const ModelSpec& spec, const std::vector<int64_t>& lengths,
                   std::vector<TrafficBatch>* batches) {
  batches->clear();
  if (spec.ragged) return PlanRaggedTraffic(spec, lengths, batches);
  const std::vector<int64_t>& sizes = spec.bucket_batch_sizes;
  const std::vector<int64_t>& grid_lengths = spec.bucket_lengths;
  if (sizes.empty() || grid_lengths.empty()) {
    return InvalidArgument("model '" + spec.name + "' has an empty bucket grid");
  }
  std::vector<std::vector<int64_t>> bins(grid_lengths.size());
  for (int64_t length : lengths) {
    const size_t bin = SmallestAtLeast(grid_lengths, length);
    if (length < 1 || bin == grid_lengths.size()) {
      return InvalidArgument("request length " + std::to_string(length) +
                             " is outside the grid's lengths [1, " +
                             std::to_string(grid_lengths.back()) + "]");
    }
    bins[bin].push_back(length);
  }
  for (size_t bin = 0; bin < bins.size(); ++bin) {
    const std::vector<int64_t>& members = bins[bin];
    const int64_t largest = spec.LargestBatchFor(grid_lengths[bin]);
    if (largest == 0 && !members.empty()) {
      return InvalidArgument("length " + std::to_string(grid_lengths[bin]) +
                             " has no bucket within the grid's batch limits");
    }
    for (size_t first = 0; first < members.size(); first += static_cast<size_t>(largest)) {
      const size_t count = std::min(members.size() - first, static_cast<size_t>(largest));
      TrafficBatch batch;
      batch.shape = BucketShape{sizes[SmallestAtLeast(sizes, static_cast<int64_t>(count))],
                                grid_lengths[bin]};
      batch.lengths.assign(members.begin() + static_cast<std::ptrdiff_t>(first),
                           members.begin() + static_cast<std::ptrdiff_t>(first + count));
      batches->push_back(std::move(batch));
    }
  }
  return Status::Ok();
}

Status RunTraffic(Executor& executor, const ModelSpec& spec, const std::vector<TrafficBatch>& batches,
                  const std::vector<bool>& outputs_wanted, int passes, uint64_t seed,
                  TrafficResult* result) {
  for (const TensorSpec& input : spec.inputs) {
    if (input.dtype != DataType::kInt64 || input.dims != std::vector<int64_t>{-1}) {
      return InvalidArgument("traffic mode sends INT64 [-1] token inputs; input '" + input.name +
                             "' is not one");
    }
  }
  // Every request's tensors exist before the first pass, so that the passes time Execute only.
  std::mt19937_64 random(seed);
  std::vector<std::vector<InferenceItem>> items(batches.size());
  std::vector<Batch> runs(batches.size());
  for (size_t b = 0; b < batches.size(); ++b) {
    items[b].resize(batches[b].lengths.size());
    for (size_t k = 0; k < batches[b].lengths.size(); ++k) {
      InferenceItem& item = items[b][k];
      item.rows = 1;
      item.length = batches[b].lengths[k];
      for (const TensorSpec& input : spec.inputs) {
        item.inputs.push_back(
            TokenTensor(1, item.length, input.name.find("mask") != std::string::npos, random));
      }
      item.outputs_wanted = outputs_wanted;
      runs[b].items.push_back(&item);
    }
    runs[b].padded_shape = batches[b].shape;
  }

  result->pass_s.clear();
  BatchOutputs outputs;
  // As the server's workers do: the next batch is launched before the running one is awaited.
  const size_t depth = static_cast<size_t>(std::max(executor.pipeline_depth(), 1));
  std::deque<std::unique_ptr<LaunchedBatch>> in_flight;
  auto complete_oldest = [&]() {
    Status status = executor.Complete(std::move(in_flight.front()), &outputs);
    in_flight.pop_front();
    return status;
  };
  for (int pass = 0; pass <= passes; ++pass) {  // pass 0 is untimed: first-use costs
    const auto start = std::chrono::steady_clock::now();
    for (size_t b = 0; b < runs.size(); ++b) {
      std::unique_ptr<LaunchedBatch> launched;
      Status status = executor.Launch(runs[b], &launched);
      if (!status.ok()) return status;
      in_flight.push_back(std::move(launched));
      if (in_flight.size() >= depth) {
        status = complete_oldest();
        if (!status.ok()) return status;
      }
    }
    while (!in_flight.empty()) {
      Status status = complete_oldest();
      if (!status.ok()) return status;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pass > 0) result->pass_s.push_back(seconds);
  }
  std::vector<double> sorted = result->pass_s;
  std::sort(sorted.begin(), sorted.end());
  result->median_pass_s = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  return Status::Ok();
}

}  // namespace graphserve::tools
