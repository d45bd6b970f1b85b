// The CUDA-graph executor's start-up half: static buffers, warm-up, and per bucket the capture into
// the shared pool and its verification against eager. The launch half is cuda_graph_executor.cpp.
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "cuda_graph_executor.h"
#include "cuda_helpers.h"
#include "engine_log.h"
#include "padding.h"
#include "torch_errors.h"

namespace graphserve {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

double DefaultTolerance(Precision precision) {
  switch (precision) {
    case Precision::kFp16: return 1e-2;
    case Precision::kBf16: return 2e-2;
    case Precision::kFp32: break;
  }
  return 1e-4;
}

// max|a - b| / max|b| over all outputs; infinity for NaN or Inf anywhere.
double RelativeDifference(const std::vector<at::Tensor>& replayed, const std::vector<at::Tensor>& eager) {
  double worst = 0.0;
  for (size_t i = 0; i < replayed.size(); ++i) {
    const at::Tensor a = replayed[i].to(at::kDouble);
    const at::Tensor b = eager[i].to(at::kDouble);
    if (!a.isfinite().all().item<bool>() || !b.isfinite().all().item<bool>()) return INFINITY;
    const double scale = b.abs().max().item<double>();
    const double difference = (a - b).abs().max().item<double>();
    worst = std::max(worst, scale > 0 ? difference / scale : difference);
  }
  return worst;
}


}  // namespace

Status CudaGraphExecutor::AllocateStaticBuffers() {
  uint64_t bytes = 0;
  auto allocate = [&](const TensorSpec& tensor, std::vector<at::Tensor>* device_buffers,
                      std::vector<at::Tensor> StagingSlot::*pinned_buffers) {
    // Each tensor's own largest bucket: on a staircase grid the most rows (a per-row output such
    // as a pooled vector) and the most rows × length (a per-token one) are different buckets.
    int64_t elements = 0;
    for (const GraphBucket& bucket : buckets_) {
      elements = std::max(elements, ElementCount(PaddedShape(tensor, bucket.info.shape)));
    }
    const at::ScalarType type = ToScalarType(tensor.dtype);
    device_buffers->push_back(at::zeros({elements}, at::TensorOptions().dtype(type).device(device_)));
    for (StagingSlot& slot : staging_) {
      (slot.*pinned_buffers)
          .push_back(at::empty({elements}, at::TensorOptions().dtype(type).pinned_memory(true)));
    }
    bytes += (1 + kStagingSlots) * static_cast<uint64_t>(elements) * ElementSize(tensor.dtype);
  };
  for (const TensorSpec& input : spec_.arguments()) allocate(input, &static_inputs_, &StagingSlot::inputs);
  for (const TensorSpec& output : spec_.outputs) allocate(output, &static_outputs_, &StagingSlot::outputs);
  std::lock_guard<std::mutex> lock(mutex_);
  summary_.static_buffer_bytes = bytes;
  return Status::Ok();
}

Status CudaGraphExecutor::ForwardEager(const BucketShape& shape, std::vector<at::Tensor>* outputs) {
  Status status = model_->Forward(StaticInputs(shape), outputs);
  if (!status.ok()) return Status(status.code(), DescribeBucket(spec_, shape) + ": " + status.message());
  return ValidateOutputs(spec_, shape, *outputs);
}

Status CudaGraphExecutor::Warmup() {
  const Clock::time_point start = Clock::now();
  try {
    c10::cuda::CUDAGuard device_guard(device_);
    c10::cuda::CUDAStreamGuard stream_guard(stream_);
    c10::InferenceMode inference_mode;
    Status status = AllocateStaticBuffers();
    if (!status.ok()) return status;

    // Largest first: the pool grows to the largest bucket's needs once, and the smaller captures
    // reuse its freed blocks instead of growing it further.
    std::vector<GraphBucket*> order;
    for (GraphBucket& bucket : buckets_) order.push_back(&bucket);
    const ModelSpec& spec = spec_;
    std::stable_sort(order.begin(), order.end(), [&spec](const GraphBucket* a, const GraphBucket* b) {
      const int64_t ea = spec.BucketElements(a->info.shape);
      const int64_t eb = spec.BucketElements(b->info.shape);
      return ea != eb ? ea > eb : a->info.shape.batch > b->info.shape.batch;
    });
    pool_ = at::cuda::graph_pool_handle();
    const int total = static_cast<int>(order.size());
    for (int done = 0; done < total; ++done) {
      status = PrepareBucket(order[done]);
      if (!status.ok()) return status;
      ReportWarmupProgress(WarmupStage::kCapturing, done + 1, total);
    }
  } catch (const std::exception& error) {
    return Internal("model '" + spec_.name + "': warm-up on " + device() + " failed: " +
                    ExceptionMessage(error));
  }
  CaptureSummary summary;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    summary_.capture_time_us = MicrosSince(start);
    summary = summary_;
  }
  std::ostringstream message;
  message << "model '" << spec_.name << "' on " << device() << ": " << summary.graphs_captured
          << " graphs captured, " << summary.graphs_disabled << " disabled, graph pool "
          << summary.graph_pool_bytes / (1024.0 * 1024.0) << " MiB, static buffers "
          << summary.static_buffer_bytes / (1024.0 * 1024.0) << " MiB, grid ready in "
          << summary.capture_time_us / 1e6 << " s";
  EngineLog(LogLevel::kInfo, message.str());
  return Status::Ok();
}

Status CudaGraphExecutor::PrepareBucket(GraphBucket* bucket) {
  const Clock::time_point start = Clock::now();
  Status status = WarmUpEagerly(bucket);
  if (!status.ok()) return status;

  const uint64_t reserved_before = CudaDeviceMemory(device_).reserved_bytes;
  double difference = 0.0;
  std::string failure;
  EagerReason reason = EagerReason::kCaptureFailed;
  status = CaptureBucket(bucket, &difference);
  if (!status.ok()) {
    if (status.code() != StatusCode::kUnavailable) return status;
    failure = status.message();
  }
  const uint64_t reserved_after = CudaDeviceMemory(device_).reserved_bytes;
  const uint64_t capture_bytes = reserved_after > reserved_before ? reserved_after - reserved_before : 0;

  if (failure.empty()) {
    failure = VerificationFailure(difference);
    if (!failure.empty()) {
      reason = EagerReason::kVerifyFailed;
      // Kept, not destroyed: destroying a graph releases its hold on the shared pool, and libtorch
      // deletes a pool whose last graph is gone, which would fail the captures still to come.
      retired_graphs_.push_back(std::move(bucket->graph));
    }
  }
  // Replay time (graph) or eager time (disabled bucket): what the scheduler plans with.
  const double execute_time_us = failure.empty() ? TimeReplays(*bucket) : bucket->eager_time_us;
  RecordPreparedBucket(bucket, execute_time_us, capture_bytes, failure, reason);

  std::ostringstream message;
  message << DescribeBucket(spec_, bucket->info.shape) << " on " << device() << ": ";
  if (failure.empty()) {
    message << "captured in " << MicrosSince(start) / 1000.0 << " ms, pool +"
            << capture_bytes / (1024.0 * 1024.0) << " MiB, replay " << execute_time_us
            << " us vs eager " << bucket->eager_time_us << " us, verified (difference " << difference
            << ")";
  } else {
    message << "disabled (" << EagerReasonName(reason) << "): " << failure
            << "; its batches run eagerly";
  }
  // One line per bucket is hundreds at start-up: the captured ones are detail (the grid's summary
  // and the progress lines say how far capture got); a disabled one is worth a warning.
  EngineLog(failure.empty() ? LogLevel::kDebug : LogLevel::kWarning, message.str());
  return Status::Ok();
}

// Eager runs first: cuBLAS handles and workspaces, lazily built module state and the caching
// allocator's blocks must exist before capture, which may not allocate them from the driver.
Status CudaGraphExecutor::WarmUpEagerly(GraphBucket* bucket) {
  const BucketShape shape = bucket->info.shape;
  std::vector<at::Tensor> warmup_inputs;
  Status status = MakeWarmupInputs(spec_, shape, &warmup_inputs);
  if (!status.ok()) return status;
  const std::vector<at::Tensor> statics = StaticInputs(shape);
  for (size_t i = 0; i < statics.size(); ++i) statics[i].copy_(warmup_inputs[i]);
  std::vector<at::Tensor> outputs;
  for (int run = 0; run < 3; ++run) {
    const Clock::time_point eager_start = Clock::now();
    status = ForwardEager(shape, &outputs);
    if (!status.ok()) return status;
    stream_.synchronize();
    bucket->eager_time_us = MicrosSince(eager_start);
  }
  return Status::Ok();
}

// Why a replay that differs from eager by `difference` (relative) fails verification; "" if not.
std::string CudaGraphExecutor::VerificationFailure(double difference) const {
  const double tolerance =
      spec_.verify_rtol > 0 ? spec_.verify_rtol : DefaultTolerance(spec_.precision);
  if (difference <= tolerance) return "";  // false for NaN too
  std::ostringstream why;
  why << "replay differs from eager by " << difference << " (relative), tolerance " << tolerance;
  return why.str();
}

double CudaGraphExecutor::TimeReplays(const GraphBucket& bucket) {
  constexpr int kTimedReplays = 5;
  stream_.synchronize();
  const Clock::time_point replay_start = Clock::now();
  for (int i = 0; i < kTimedReplays; ++i) bucket.graph->replay();
  stream_.synchronize();
  return MicrosSince(replay_start) / kTimedReplays;
}

void CudaGraphExecutor::RecordPreparedBucket(GraphBucket* bucket, double execute_time_us,
                                             uint64_t capture_bytes, const std::string& failure,
                                             EagerReason reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  bucket->info.execute_time_us = execute_time_us;
  bucket->info.time_measured = true;
  bucket->info.graph = failure.empty();
  summary_.graph_pool_bytes += capture_bytes;
  if (failure.empty()) {
    ++summary_.graphs_captured;
  } else {
    bucket->info.eager_reason = reason;
    ++summary_.graphs_disabled;
  }
}

// UNAVAILABLE means "this bucket cannot be captured" (the bucket is disabled); any other error is
// the model's and fails the warm-up.
Status CudaGraphExecutor::CaptureBucket(GraphBucket* bucket, double* verify_difference) {
  const BucketShape shape = bucket->info.shape;
  const std::vector<at::Tensor> statics = StaticInputs(shape);
  const std::vector<at::Tensor> static_outputs = StaticOutputs(shape);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  stream_.synchronize();
  Status forward_status;
  try {
    NvtxRange range("capture " + spec_.BucketLabel(shape));
    // Thread-local capture: with --model-control-mode explicit a model loads while others serve on
    // the same device, and in the default global mode their threads' CUDA calls would break this
    // capture (and fail themselves).
    graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    std::vector<at::Tensor> outputs;
    forward_status = model_->Forward(statics, &outputs);
    if (forward_status.ok()) forward_status = ValidateOutputs(spec_, shape, outputs);
    // The graph ends by writing its results, in the spec's dtypes, into the shared static outputs,
    // so that its own output tensors are temporaries the next capture may reuse.
    if (forward_status.ok()) {
      for (size_t i = 0; i < outputs.size(); ++i) static_outputs[i].copy_(outputs[i]);
    }
    graph->capture_end();
  } catch (const std::exception& error) {
    const std::string message = ExceptionMessage(error);
    // Leave capture mode so the stream and the allocator work again, then drop the graph.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_.stream(), &capturing) == cudaSuccess &&
        capturing != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream_.stream(), &partial);
      if (partial != nullptr) cudaGraphDestroy(partial);
    }
    try {
      // capture_end did not get as far as handing allocations back from the pool.
      c10::cuda::CUDACachingAllocator::endAllocateToPool(device_.index(), pool_);
    } catch (const std::exception&) {
    }
    (void)cudaGetLastError();  // capture errors are not sticky; clear them
    graph.reset();
    return Unavailable("capture threw: " + message.substr(0, 300));
  }
  if (!forward_status.ok()) return forward_status;

  // Verification: fresh random valid inputs, replay, and eager on the very same inputs.
  const std::vector<at::Tensor> fresh =
      MakeVerificationInputs(spec_, shape, 0x9e3779b9u ^ static_cast<uint64_t>(shape.batch * 4099 + shape.length));
  for (size_t i = 0; i < statics.size(); ++i) statics[i].copy_(fresh[i]);
  graph->replay();
  std::vector<at::Tensor> replayed;
  for (const at::Tensor& output : static_outputs) replayed.push_back(output.clone());
  std::vector<at::Tensor> eager;
  Status status = ForwardEager(shape, &eager);
  if (!status.ok()) return status;
  for (size_t i = 0; i < eager.size(); ++i) eager[i] = eager[i].to(replayed[i].scalar_type());
  *verify_difference = RelativeDifference(replayed, eager);
  bucket->graph = std::move(graph);
  return Status::Ok();
}

}  // namespace graphserve
