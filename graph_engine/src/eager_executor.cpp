#include "eager_executor.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <iterator>
#include <set>
#include <sstream>
#include <utility>

#include "device_fault.h"
#include "engine_log.h"
#include "padding.h"
#include "torch_errors.h"

namespace graphserve {
namespace {

// On a CPU, warm-up runs a sample of the grid: eager CPU execution has no per-shape set-up to pay
// in advance, and running every length of the default grid (93 of its 284 points) took 13 s on an
// idle 2-core host and 100 s on a busy one. The sample: kCpuSampledLengths lengths spread over the
// grid (its first and last included), and at each up to kCpuSampledBatches batch sizes spread over
// those of up to kCpuMeasuredTokens padded tokens (the smallest always), where fixed per-call costs
// make time far from linear in rows. The other buckets' times are estimated from these
// (EstimateUnmeasuredBuckets).
constexpr size_t kCpuSampledLengths = 5;
constexpr size_t kCpuSampledBatches = 3;
constexpr int64_t kCpuMeasuredTokens = 256;
// Timed runs of a measured bucket; the fastest counts, so that a run slowed by another process on a
// shared host, or by a first use of the shape, does not set the bucket's cost.
constexpr int kTimedRuns = 2;

// Blocks until the device has finished the work queued so far, so that wall times are real.
void WaitForDevice(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// `count` of the ascending `values` at evenly spaced positions, the first and last included.
std::vector<int64_t> SampleEvenly(const std::vector<int64_t>& values, size_t count) {
  if (values.size() <= count) return values;
  std::vector<int64_t> sampled;
  for (size_t i = 0; i < count; ++i) sampled.push_back(values[i * (values.size() - 1) / (count - 1)]);
  return sampled;
}

}  // namespace

EagerExecutor::EagerExecutor(ModelSpec spec, std::unique_ptr<Model> model, c10::Device device)
    : spec_(std::move(spec)), model_(std::move(model)), device_(device), counter_(spec_.ragged) {
  for (const BucketShape& shape : spec_.Buckets()) {
    BucketInfo info;
    info.shape = shape;
    info.graph = false;
    info.eager_reason = ReasonFor(info.shape);
    buckets_.push_back(info);
  }
}

EagerReason EagerExecutor::ReasonFor(const BucketShape& shape) const {
  if (!device_.is_cuda()) return EagerReason::kNoCuda;
  // With graphs turned off nothing would replay, whatever the shape: a lone request at its exact
  // shape (dynamic_batching.disable) or a batch beyond the grid runs eagerly because of the config.
  if (spec_.cuda_graphs_disabled) return EagerReason::kDisabled;
  if (spec_.IsUnpaddableLength(shape.length)) return EagerReason::kExactLength;
  if (spec_.IsOversize(shape.batch, shape.length)) return EagerReason::kOversize;
  return EagerReason::kDisabled;
}

Status EagerExecutor::Forward(const BucketShape& shape, const std::vector<at::Tensor>& inputs,
                              std::vector<at::Tensor>* outputs) {
  std::vector<at::Tensor> device_inputs;
  device_inputs.reserve(inputs.size());
  for (const at::Tensor& input : inputs) device_inputs.push_back(input.to(device_));
  Status status = model_->Forward(device_inputs, outputs);
  if (!status.ok()) {
    return Status(status.code(), DescribeBucket(spec_, shape) + ": " + status.message());
  }
  return ValidateOutputs(spec_, shape, *outputs);
}

Status EagerExecutor::WarmupBucket(const BucketShape& shape, bool untimed_first_run,
                                   double* execute_time_us) {
  std::vector<at::Tensor> inputs;
  Status status = MakeWarmupInputs(spec_, shape, &inputs);
  if (!status.ok()) return status;
  std::vector<at::Tensor> outputs;
  if (untimed_first_run) {
    // The model's first run pays one-time costs (thread pools, kernel selection, TorchScript
    // profiling) that no request will see again.
    status = Forward(shape, inputs, &outputs);
    if (!status.ok()) return status;
    WaitForDevice(device_);
  }
  for (int run = 0; run < kTimedRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    status = Forward(shape, inputs, &outputs);
    if (!status.ok()) return status;
    // Execute copies every output to the host; so does the measured run.
    for (const at::Tensor& output : outputs) output.to(at::kCPU);
    WaitForDevice(device_);
    const double run_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    *execute_time_us = run == 0 ? run_us : std::min(*execute_time_us, run_us);
  }
  return Status::Ok();
}

std::set<BucketShape> EagerExecutor::WarmupSample() const {
  std::set<BucketShape> sample;
  if (device_.is_cuda()) {  // a GPU's eager times are not this smooth in the shape: run them all
    const std::vector<BucketShape> all = spec_.Buckets();
    return std::set<BucketShape>(all.begin(), all.end());
  }
  for (int64_t length : SampleEvenly(spec_.bucket_lengths, kCpuSampledLengths)) {
    std::vector<int64_t> batches;
    for (int64_t batch : spec_.bucket_batch_sizes) {
      if (!spec_.HasBucket({batch, length})) continue;
      if (!batches.empty() && spec_.BucketElements({batch, length}) > kCpuMeasuredTokens) break;
      batches.push_back(batch);
    }
    for (int64_t batch : SampleEvenly(batches, kCpuSampledBatches)) sample.insert({batch, length});
  }
  return sample;
}

Status EagerExecutor::Warmup() {
  const auto start = std::chrono::steady_clock::now();
  const std::set<BucketShape> sample = WarmupSample();
  std::vector<size_t> measured;  // indices into buckets_, in grid order
  std::vector<BucketShape> shapes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < buckets_.size(); ++i) {
      shapes.push_back(buckets_[i].shape);
      if (sample.count(buckets_[i].shape) > 0) measured.push_back(i);
    }
  }
  const int total = static_cast<int>(measured.size());
  std::ostringstream detail;
  for (size_t done = 0; done < measured.size(); ++done) {
    const BucketShape& shape = shapes[measured[done]];
    double execute_time_us = 0.0;
    Status status;
    try {
      c10::InferenceMode inference_mode;
      // A GPU pays per-shape costs on first use (cuDNN and cuBLAS choices, allocator growth).
      status = WarmupBucket(shape, /*untimed_first_run=*/done == 0 || device_.is_cuda(), &execute_time_us);
    } catch (const std::exception& error) {
      status = Internal(DescribeBucket(spec_, shape) + ": warm-up forward on " + device() +
                        " failed: " + ExceptionMessage(error));
    }
    if (!status.ok()) return status;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      buckets_[measured[done]].execute_time_us = execute_time_us;
      buckets_[measured[done]].time_measured = true;
    }
    detail << (done == 0 ? "" : ", ") << spec_.BucketLabel(shape) << " " << execute_time_us << " us";
    ReportWarmupProgress(WarmupStage::kWarmingUp, static_cast<int>(done) + 1, total);
  }
  EstimateUnmeasuredBuckets();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ostringstream summary;
  summary << "model '" << spec_.name << "': warmed up on " << device() << " in " << seconds << " s, " << total
          << " of " << shapes.size() << " buckets measured"
          << (static_cast<size_t>(total) < shapes.size() ? ", the others estimated from them" : "");
  EngineLog(LogLevel::kInfo, summary.str());
  if (total > 0) EngineLog(LogLevel::kDebug, "model '" + spec_.name + "': measured times: " + detail.str());
  return Status::Ok();
}

double EagerExecutor::TimeAtMeasuredLength(int64_t batch, int64_t length) const {
  // The measured buckets of that length nearest to `batch` on either side.
  const BucketInfo* below = nullptr;
  const BucketInfo* above = nullptr;
  for (const BucketInfo& candidate : buckets_) {
    if (!candidate.time_measured || candidate.shape.length != length) continue;
    if (candidate.shape.batch == batch) return candidate.execute_time_us;
    if (candidate.shape.batch < batch && (below == nullptr || candidate.shape.batch > below->shape.batch)) {
      below = &candidate;
    }
    if (candidate.shape.batch > batch && (above == nullptr || candidate.shape.batch < above->shape.batch)) {
      above = &candidate;
    }
  }
  if (below == nullptr) return above == nullptr ? 0.0 : above->execute_time_us;
  const double rows = static_cast<double>(batch);
  if (above == nullptr) {
    // A ragged bucket's rows cost next to nothing: its tokens (the length) are the work.
    if (spec_.ragged) return below->execute_time_us;
    // Beyond the largest measured: eager CPU time grows about linearly with rows at a fixed length,
    // and a little less (fixed per-call costs): scaling the largest errs on the safe side.
    return below->execute_time_us * rows / static_cast<double>(below->shape.batch);
  }
  const double low_rows = static_cast<double>(below->shape.batch);
  const double high_rows = static_cast<double>(above->shape.batch);
  return below->execute_time_us +
         (above->execute_time_us - below->execute_time_us) * (rows - low_rows) / (high_rows - low_rows);
}

void EagerExecutor::EstimateUnmeasuredBuckets() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::set<int64_t> measured_lengths;
  for (const BucketInfo& bucket : buckets_) {
    if (bucket.time_measured) measured_lengths.insert(bucket.shape.length);
  }
  if (measured_lengths.empty()) return;
  for (BucketInfo& bucket : buckets_) {
    if (bucket.time_measured) continue;
    const int64_t length = bucket.shape.length;
    const auto above = measured_lengths.lower_bound(length);
    if (above != measured_lengths.end() && *above == length) {
      bucket.execute_time_us = TimeAtMeasuredLength(bucket.shape.batch, length);
      continue;
    }
    // Between two measured lengths: linear in the length. Attention's part grows faster than
    // linearly, so the line between them lies above it: an estimate on the safe side.
    if (above == measured_lengths.begin() || above == measured_lengths.end()) {
      const int64_t nearest = above == measured_lengths.end() ? *measured_lengths.rbegin() : *above;
      bucket.execute_time_us = TimeAtMeasuredLength(bucket.shape.batch, nearest);
      continue;
    }
    const int64_t upper = *above;
    const int64_t lower = *std::prev(above);
    const double lower_us = TimeAtMeasuredLength(bucket.shape.batch, lower);
    const double upper_us = TimeAtMeasuredLength(bucket.shape.batch, upper);
    bucket.execute_time_us = lower_us + (upper_us - lower_us) * static_cast<double>(length - lower) /
                                            static_cast<double>(upper - lower);
  }
}

Status EagerExecutor::Execute(const Batch& batch, BatchOutputs* outputs) {
  outputs->clear();
  BatchStageTimes stages;
  try {
    c10::InferenceMode inference_mode;
    auto stage_start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> inputs;
    Status status = MakePaddedInputs(spec_, batch, &inputs);
    if (!status.ok()) return status;
    for (at::Tensor& input : inputs) input = input.to(device_);  // Forward's own move is then a no-op
    stages.input_ns = NanosSince(stage_start);

    stage_start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> model_outputs;
    status = Forward(batch.padded_shape, inputs, &model_outputs);
    if (!status.ok()) return status;
    // On a GPU the kernels are still running: without this wait they would be charged to the copy
    // back, which waits for them anyway. Only this instance's stream, not the whole device.
    if (device_.is_cuda()) c10::impl::VirtualGuardImpl(device_.type()).getStream(device_).synchronize();
    stages.infer_ns = NanosSince(stage_start);

    stage_start = std::chrono::steady_clock::now();
    status = SliceOutputs(spec_, batch, model_outputs, outputs);
    if (!status.ok()) return status;
    stages.output_ns = NanosSince(stage_start);
  } catch (const std::exception& error) {
    outputs->clear();
    NoteFailureOn(device_);
    return ExecutionFailure(DescribeBucket(spec_, batch.padded_shape) + ": forward on " + device() + " failed",
                            error);
  }

  counter_.RecordEager(batch, ReasonFor(batch.padded_shape));
  if (batch.stage_times != nullptr) *batch.stage_times = stages;
  return Status::Ok();
}

std::vector<BucketInfo> EagerExecutor::Buckets() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return buckets_;
}

ExecutionCounters EagerExecutor::Counters() const { return counter_.Snapshot(); }

std::string EagerExecutor::device() const { return device_.str(); }

}  // namespace graphserve
