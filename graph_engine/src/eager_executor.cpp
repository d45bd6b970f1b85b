#include "eager_executor.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#include <chrono>
#include <exception>
#include <sstream>
#include <utility>

#include "device_fault.h"
#include "engine_log.h"
#include "padding.h"
#include "torch_errors.h"

namespace graphserve {
namespace {

// On a CPU, warm-up runs only the buckets up to this many padded tokens: eager CPU execution has no
// per-shape set-up to pay in advance, and running a 32x512 grid point twice on a small machine takes
// minutes of start-up. Larger buckets' times are scaled from the measured ones.
constexpr int64_t kCpuMeasuredTokens = 512;

// Blocks until the device has finished the work queued so far, so that wall times are real.
void WaitForDevice(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace

EagerExecutor::EagerExecutor(ModelSpec spec, std::unique_ptr<Model> model, c10::Device device)
    : spec_(std::move(spec)), model_(std::move(model)), device_(device) {
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

Status EagerExecutor::WarmupBucket(const BucketShape& shape, double* execute_time_us) {
  std::vector<at::Tensor> inputs;
  Status status = MakeWarmupInputs(spec_, shape, &inputs);
  if (!status.ok()) return status;
  std::vector<at::Tensor> outputs;
  // The first run pays one-time costs (allocator growth, kernel selection, TorchScript profiling);
  // the second is the one a request will see.
  status = Forward(shape, inputs, &outputs);
  if (!status.ok()) return status;
  WaitForDevice(device_);
  const auto start = std::chrono::steady_clock::now();
  status = Forward(shape, inputs, &outputs);
  if (!status.ok()) return status;
  // Execute copies every output to the host; so does the measured run.
  for (const at::Tensor& output : outputs) output.to(at::kCPU);
  WaitForDevice(device_);
  *execute_time_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

Status EagerExecutor::Warmup() {
  std::vector<BucketShape> shapes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const BucketInfo& info : buckets_) shapes.push_back(info.shape);
  }
  std::ostringstream summary;
  size_t measured = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    // The smallest batch of every length is always measured: it is what the others scale from.
    if (!device_.is_cuda() && shapes[i].batch != spec_.bucket_batch_sizes.front() &&
        shapes[i].batch * shapes[i].length > kCpuMeasuredTokens) {
      continue;  // estimated below
    }
    double execute_time_us = 0.0;
    Status status;
    try {
      c10::InferenceMode inference_mode;
      status = WarmupBucket(shapes[i], &execute_time_us);
    } catch (const std::exception& error) {
      status = Internal(DescribeBucket(spec_, shapes[i]) + ": warm-up forward on " + device() +
                        " failed: " + ExceptionMessage(error));
    }
    if (!status.ok()) return status;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      buckets_[i].execute_time_us = execute_time_us;
      buckets_[i].time_measured = true;
    }
    summary << (measured++ == 0 ? "" : ", ") << spec_.BucketLabel(shapes[i]) << " " << execute_time_us << " us";
  }
  EstimateUnmeasuredBuckets();
  EngineLog(LogLevel::kInfo, "model '" + spec_.name + "': warmed up " + std::to_string(measured) +
                                 " of " + std::to_string(shapes.size()) + " buckets on " + device() +
                                 (measured == 0 ? "" : ": " + summary.str()));
  return Status::Ok();
}

void EagerExecutor::EstimateUnmeasuredBuckets() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (BucketInfo& bucket : buckets_) {
    if (bucket.time_measured) continue;
    // Eager CPU time grows about linearly with rows at a fixed length: scale the largest measured
    // bucket of the same length.
    const BucketInfo* reference = nullptr;
    for (const BucketInfo& candidate : buckets_) {
      if (candidate.time_measured && candidate.shape.length == bucket.shape.length &&
          (reference == nullptr || candidate.shape.batch > reference->shape.batch)) {
        reference = &candidate;
      }
    }
    if (reference == nullptr) continue;
    bucket.execute_time_us = reference->execute_time_us * static_cast<double>(bucket.shape.batch) /
                             static_cast<double>(reference->shape.batch);
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
