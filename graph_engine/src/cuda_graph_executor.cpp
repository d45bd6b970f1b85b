// The CUDA-graph executor's serving half: Launch (assemble, copy in, replay, copy out) and Complete,
// and eager runs of what has no graph. Capture and verification are cuda_graph_capture.cpp.
#include "cuda_graph_executor.h"

#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "batch_accounting.h"
#include "cuda_helpers.h"
#include "device_fault.h"
#include "engine_log.h"
#include "padding.h"
#include "torch_errors.h"

namespace graphserve {

DeviceMemory CudaDeviceMemory(const c10::Device& device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  // Index 0 is StatType::AGGREGATE in every libtorch version (the enum moved between namespaces).
  DeviceMemory memory;
  memory.allocated_bytes = static_cast<uint64_t>(stats.allocated_bytes[0].current);
  memory.reserved_bytes = static_cast<uint64_t>(stats.reserved_bytes[0].current);
  return memory;
}

CudaGraphExecutor::CudaGraphExecutor(ModelSpec spec, std::unique_ptr<Model> model, c10::Device device)
    : spec_(std::move(spec)),
      model_(std::move(model)),
      device_(device),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
      counter_(spec_.ragged) {
  for (const BucketShape& shape : spec_.Buckets()) {
    GraphBucket bucket;
    bucket.info.shape = shape;
    bucket.info.graph = false;
    bucket.info.eager_reason = EagerReason::kCaptureFailed;  // until captured
    buckets_.push_back(std::move(bucket));
  }
}

CudaGraphExecutor::~CudaGraphExecutor() {
  // Graphs must go before the pool's tensors and the stream they were captured on is idle.
  try {
    stream_.synchronize();
  } catch (const std::exception&) {
  }
  for (GraphBucket& bucket : buckets_) bucket.graph.reset();
  retired_graphs_.clear();
}

std::string CudaGraphExecutor::device() const { return device_.str(); }

std::vector<at::Tensor> CudaGraphExecutor::StaticInputs(const BucketShape& shape) const {
  std::vector<at::Tensor> views;
  // A ragged model's batch inputs follow its inputs, with static buffers of their own.
  const std::vector<TensorSpec> arguments = spec_.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::vector<int64_t> padded = PaddedShape(arguments[i], shape);
    views.push_back(static_inputs_[i].narrow(0, 0, ElementCount(padded)).view(padded));
  }
  return views;
}

std::vector<at::Tensor> CudaGraphExecutor::StaticOutputs(const BucketShape& shape) const {
  std::vector<at::Tensor> views;
  for (size_t i = 0; i < spec_.outputs.size(); ++i) {
    const std::vector<int64_t> padded = PaddedShape(spec_.outputs[i], shape);
    views.push_back(static_outputs_[i].narrow(0, 0, ElementCount(padded)).view(padded));
  }
  return views;
}

CudaGraphExecutor::GraphBucket* CudaGraphExecutor::FindBucket(const BucketShape& shape) {
  for (GraphBucket& bucket : buckets_) {
    if (bucket.info.shape == shape) return &bucket;
  }
  return nullptr;
}

// What Complete needs of a launched batch: for a graph, where in its staging slot each request's
// slices land; for an eager run, the finished outputs.
class CudaGraphExecutor::CudaLaunchedBatch : public LaunchedBatch {
 public:
  const Batch* batch = nullptr;
  GraphBucket* graph_bucket = nullptr;  // null: ran eagerly, for `eager_reason`
  EagerReason eager_reason = EagerReason::kOversize;
  int slot = 0;
  std::vector<OutputSlice> slices;   // packed into the slot's pinned outputs, in this order
  std::vector<int64_t> packed_offsets;  // elements into slot.outputs[slice.output], per slice
  int64_t assemble_ns = 0;  // host time padding the batch into the slot, part of its input stage
  BatchOutputs eager_outputs;
  BatchStageTimes eager_stages;
};

Status CudaGraphExecutor::Execute(const Batch& batch, BatchOutputs* outputs) {
  std::unique_ptr<LaunchedBatch> launched;
  Status status = Launch(batch, &launched);
  if (!status.ok()) {
    outputs->clear();
    return status;
  }
  return Complete(std::move(launched), outputs);
}

Status CudaGraphExecutor::Launch(const Batch& batch, std::unique_ptr<LaunchedBatch>* launched) {
  auto run = std::make_unique<CudaLaunchedBatch>();
  run->batch = &batch;
  GraphBucket* bucket = FindBucket(batch.padded_shape);
  if (bucket != nullptr && bucket->graph) {
    run->graph_bucket = bucket;
  } else {
    // Graphs turned off in the config explain every eager run, on the grid or not.
    const bool unpaddable = spec_.IsUnpaddableLength(batch.padded_shape.length);
    run->eager_reason = spec_.cuda_graphs_disabled ? EagerReason::kDisabled
                        : unpaddable               ? EagerReason::kExactLength
                        : bucket == nullptr        ? EagerReason::kOversize
                                                   : bucket->info.eager_reason;
  }
  try {
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStreamGuard stream_guard(stream_);
    c10::InferenceMode inference_mode;
    Status status = run->graph_bucket != nullptr
                        ? LaunchGraph(run->graph_bucket, run.get())
                        : ExecuteEager(batch, &run->eager_outputs, &run->eager_stages);
    if (!status.ok()) return status;
  } catch (const std::exception& error) {
    NoteFailureOn(device_);
    return ExecutionFailure(DescribeBucket(spec_, batch.padded_shape) + ": execution on " + device() + " failed",
                            error);
  }
  *launched = std::move(run);
  return Status::Ok();
}

Status CudaGraphExecutor::LaunchGraph(GraphBucket* bucket, CudaLaunchedBatch* launched) {
  const Batch& batch = *launched->batch;
  const BucketShape shape = batch.padded_shape;
  const std::string bucket_name = spec_.BucketLabel(shape);
  // The slot is taken for good only once the launch is queued whole (below): a failed launch leaves
  // nothing to complete, and the next one must not take the slot of a batch still outstanding.
  launched->slot = next_slot_;
  StagingSlot& slot = staging_[launched->slot];
  {
    NvtxRange range("assemble " + bucket_name);
    // Normally long done: the batch that used this slot before has been completed.
    slot.done.synchronize();
    const auto assemble_start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> staging;
    const std::vector<TensorSpec> arguments = spec_.arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      const std::vector<int64_t> padded = PaddedShape(arguments[i], shape);
      staging.push_back(slot.inputs[i].narrow(0, 0, ElementCount(padded)).view(padded));
    }
    Status status = FillPaddedInputs(spec_, batch, staging);
    if (!status.ok()) return status;
    launched->assemble_ns = NanosSince(assemble_start);
    NvtxRange copy_range("copy-in " + bucket_name);
    slot.started.record(stream_);
    const std::vector<at::Tensor> statics = StaticInputs(shape);
    for (size_t i = 0; i < statics.size(); ++i) statics[i].copy_(staging[i], /*non_blocking=*/true);
    slot.inputs_copied.record(stream_);
  }
  {
    NvtxRange range("replay " + bucket_name);
    bucket->graph->replay();
    slot.replayed.record(stream_);
  }

  // Copy back only what each request owns: its rows and, along the variable dimension, its own
  // length (PlanOutputSlices, the geometry SliceOutputs uses on the host), packed into the slot's
  // pinned outputs; requests whose shares continue each other in one copy.
  NvtxRange range("copy-out " + bucket_name);
  const std::vector<at::Tensor> static_outputs = StaticOutputs(shape);
  launched->slices = PlanOutputSlices(spec_, batch);
  launched->packed_offsets = PackedOffsets(launched->slices, spec_.outputs.size());
  for (const SliceCopy& copy : MergedSliceCopies(launched->slices, spec_.outputs.size())) {
    const size_t element_size = ElementSize(spec_.outputs[copy.output].dtype);
    const char* source = static_cast<const char*>(static_outputs[copy.output].data_ptr()) +
                         static_cast<size_t>(copy.offset) * element_size;
    char* staging = static_cast<char*>(slot.outputs[copy.output].data_ptr()) +
                    static_cast<size_t>(copy.packed_offset) * element_size;
    const size_t width = static_cast<size_t>(copy.width) * element_size;
    CheckCuda(cudaMemcpy2DAsync(staging, width, source, static_cast<size_t>(copy.pitch) * element_size, width,
                                static_cast<size_t>(copy.height), cudaMemcpyDeviceToHost, stream_.stream()),
              "copy-out");
  }
  slot.done.record(stream_);
  next_slot_ = (next_slot_ + 1) % kStagingSlots;
  return Status::Ok();
}

Status CudaGraphExecutor::Complete(std::unique_ptr<LaunchedBatch> launched, BatchOutputs* outputs) {
  outputs->clear();
  auto* run = dynamic_cast<CudaLaunchedBatch*>(launched.get());
  if (run == nullptr) return Internal("Complete: the batch was not launched by this executor");
  const Batch& batch = *run->batch;
  if (run->graph_bucket == nullptr) {
    *outputs = std::move(run->eager_outputs);
    CountExecution(batch, nullptr, run->eager_reason);
    if (batch.stage_times != nullptr) *batch.stage_times = run->eager_stages;
    return Status::Ok();
  }
  const StagingSlot& slot = staging_[run->slot];
  // The device's share of each stage, between the slot's events (all complete once `done` is).
  BatchStageTimes stages;
  try {
    NvtxRange range("wait " + spec_.BucketLabel(batch.padded_shape));
    slot.done.synchronize();
    auto nanos_between = [](const at::cuda::CUDAEvent& from, const at::cuda::CUDAEvent& to) {
      return static_cast<int64_t>(static_cast<double>(from.elapsed_time(to)) * 1e6);
    };
    stages.input_ns = run->assemble_ns + nanos_between(slot.started, slot.inputs_copied);
    stages.infer_ns = nanos_between(slot.inputs_copied, slot.replayed);
    stages.output_ns = nanos_between(slot.replayed, slot.done);
  } catch (const std::exception& error) {
    NoteFailureOn(device_);
    return ExecutionFailure(DescribeBucket(spec_, batch.padded_shape) + ": execution on " + device() + " failed",
                            error);
  }
  const auto unpack_start = std::chrono::steady_clock::now();
  outputs->assign(batch.items.size(), std::vector<HostTensor>(spec_.outputs.size()));
  for (size_t k = 0; k < batch.items.size(); ++k) {
    for (size_t o = 0; o < spec_.outputs.size(); ++o) {
      HostTensor& tensor = (*outputs)[k][o];
      tensor.dtype = spec_.outputs[o].dtype;
      tensor.shape = {0};  // not wanted, unless a slice fills it below
    }
  }
  for (size_t i = 0; i < run->slices.size(); ++i) {
    const OutputSlice& slice = run->slices[i];
    HostTensor& tensor = (*outputs)[slice.item][slice.output];
    tensor.shape = slice.shape;
    const char* packed = static_cast<const char*>(slot.outputs[slice.output].data_ptr()) +
                         static_cast<size_t>(run->packed_offsets[i]) * ElementSize(tensor.dtype);
    tensor.bytes.assign(packed, packed + static_cast<size_t>(slice.width * slice.height) *
                                             ElementSize(tensor.dtype));
  }
  stages.output_ns += NanosSince(unpack_start);
  CountExecution(batch, run->graph_bucket, run->eager_reason);
  if (batch.stage_times != nullptr) *batch.stage_times = stages;
  return Status::Ok();
}

Status CudaGraphExecutor::ExecuteEager(const Batch& batch, BatchOutputs* outputs,
                                       BatchStageTimes* stages) {
  NvtxRange range("eager " + spec_.BucketLabel(batch.padded_shape));
  auto stage_start = std::chrono::steady_clock::now();
  std::vector<at::Tensor> inputs;
  Status status = MakePaddedInputs(spec_, batch, &inputs);
  if (!status.ok()) return status;
  for (at::Tensor& input : inputs) input = input.to(device_, /*non_blocking=*/false);
  stages->input_ns = NanosSince(stage_start);

  stage_start = std::chrono::steady_clock::now();
  std::vector<at::Tensor> model_outputs;
  status = model_->Forward(inputs, &model_outputs);
  if (!status.ok()) {
    return Status(status.code(), DescribeBucket(spec_, batch.padded_shape) + ": " + status.message());
  }
  // The kernels are still running: charged to the forward rather than to the copy back that would
  // wait for them.
  stream_.synchronize();
  stages->infer_ns = NanosSince(stage_start);

  stage_start = std::chrono::steady_clock::now();
  status = SliceOutputs(spec_, batch, model_outputs, outputs);
  stages->output_ns = NanosSince(stage_start);
  return status;
}

void CudaGraphExecutor::CountExecution(const Batch& batch, const GraphBucket* graph_bucket,
                                       EagerReason reason) {
  if (graph_bucket != nullptr) {
    counter_.RecordReplay(batch);
    return;
  }
  const uint64_t fallbacks = counter_.RecordEager(batch, reason);
  // A warning for the 1st, 10th, 100th, ... fallback: visible, but never a flood.
  uint64_t power_of_ten = 1;
  while (power_of_ten * 10 <= fallbacks) power_of_ten *= 10;
  if (fallbacks == power_of_ten) {
    EngineLog(LogLevel::kWarning, DescribeBucket(spec_, batch.padded_shape) + " on " + device() +
                                      ": ran eagerly (" + EagerReasonName(reason) + "); " +
                                      std::to_string(fallbacks) + " eager fallback(s) so far");
  }
}

std::vector<BucketInfo> CudaGraphExecutor::Buckets() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<BucketInfo> infos;
  for (const GraphBucket& bucket : buckets_) infos.push_back(bucket.info);
  return infos;
}

ExecutionCounters CudaGraphExecutor::Counters() const { return counter_.Snapshot(); }

CaptureSummary CudaGraphExecutor::capture_summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return summary_;
}

}  // namespace graphserve
