#pragma once
// The executor for CUDA devices: one CUDA graph per bucket of the grid, all of an instance's graphs
// captured into one shared memory pool, replayed over static device buffers.
//
// Warmup (before the server reports ready), on a dedicated non-default stream: for each bucket,
// largest first, a few eager runs (cuBLAS workspaces, lazy module state), then the capture, then a
// verification replay on fresh random valid inputs compared with eager on the same inputs. A bucket
// whose capture throws or whose replay disagrees beyond the tolerance is disabled and runs eagerly.
//
// Launch: the batch is padded into a pinned host staging slot, copied to the static inputs with one
// asynchronous copy per input, the graph is replayed (the graph itself ends by copying its outputs
// into static output buffers in the spec's dtypes), and only each request's own rows and length are
// queued for copying back into the slot (one strided copy per request and output); an event marks
// the end. Complete waits for that event and hands the slices out. With two staging slots the
// scheduler assembles and launches batch N+1 while the GPU still runs batch N (pipeline depth 2).
//
// Why that is safe without more synchronisation: everything runs on one stream, so batch N+1's copy
// into the static inputs starts after batch N's replay has read them, and batch N's copies out of
// the static outputs are queued before batch N+1's replay overwrites them. A slot is reused two
// launches later, after its event (its own copies in and out) has completed.
//
// Static input and output buffers are shared by all buckets (each bucket uses a prefix of them).
// Intermediate tensors freed during a capture are reused by later captures of the same pool; that is
// safe because a graph's results are copied out of its temporaries before the next replay starts.
// Eager batches (oversize, disabled buckets) run synchronously inside Launch.
//
// Thread safety as Executor's.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batch_accounting.h"
#include "graphserve/engine/executor.h"
#include "model.h"

namespace graphserve {

class CudaGraphExecutor : public Executor {
 public:
  CudaGraphExecutor(ModelSpec spec, std::unique_ptr<Model> model, c10::Device device);
  ~CudaGraphExecutor() override;

  Status Warmup() override;
  Status Execute(const Batch& batch, BatchOutputs* outputs) override;
  Status Launch(const Batch& batch, std::unique_ptr<LaunchedBatch>* launched) override;
  Status Complete(std::unique_ptr<LaunchedBatch> launched, BatchOutputs* outputs) override;
  int pipeline_depth() const override { return kStagingSlots; }
  std::vector<BucketInfo> Buckets() const override;
  ExecutionCounters Counters() const override;
  CaptureSummary capture_summary() const override;
  std::string device() const override;

 private:
  // Two: one batch's staging is filled while the other batch runs.
  static constexpr int kStagingSlots = 2;
  struct StagingSlot {
    std::vector<at::Tensor> inputs;   // pinned host, the padded batch
    std::vector<at::Tensor> outputs;  // pinned host, the requests' own slices, packed
    // Timing events around the slot's batch on the stream, for its stage times: before the copy in,
    // after it, after the replay, and after the last copy out (which Complete waits for).
    at::cuda::CUDAEvent started{cudaEventDefault};
    at::cuda::CUDAEvent inputs_copied{cudaEventDefault};
    at::cuda::CUDAEvent replayed{cudaEventDefault};
    at::cuda::CUDAEvent done{cudaEventDefault};
  };
  class CudaLaunchedBatch;

  struct GraphBucket {
    BucketInfo info;
    std::unique_ptr<at::cuda::CUDAGraph> graph;  // null when the bucket runs eagerly
    double eager_time_us = 0.0;                  // same padded batch, eager, for the logs
  };

  Status AllocateStaticBuffers();
  // Eager warm-up, capture and verification of one bucket; a capture or verification failure
  // disables the bucket (returns OK), anything else fails the warm-up.
  Status PrepareBucket(GraphBucket* bucket);
  // PrepareBucket's steps: eager runs on warm-up inputs (timed), the capture with its verification
  // difference, the verdict on that difference, the replay time, and the bucket's record.
  Status WarmUpEagerly(GraphBucket* bucket);
  Status CaptureBucket(GraphBucket* bucket, double* verify_difference);
  std::string VerificationFailure(double difference) const;
  double TimeReplays(const GraphBucket& bucket);
  void RecordPreparedBucket(GraphBucket* bucket, double execute_time_us, uint64_t capture_bytes,
                            const std::string& failure, EagerReason reason);
  // Runs the model eagerly on the current contents of the static inputs for `shape`.
  Status ForwardEager(const BucketShape& shape, std::vector<at::Tensor>* outputs);
  // Queues copy-in, replay and copy-out of `launched`'s batch on the stream, without waiting.
  Status LaunchGraph(GraphBucket* bucket, CudaLaunchedBatch* launched);
  // Runs synchronously inside Launch; fills `stages`.
  Status ExecuteEager(const Batch& batch, BatchOutputs* outputs, BatchStageTimes* stages);
  std::vector<at::Tensor> StaticInputs(const BucketShape& shape) const;
  std::vector<at::Tensor> StaticOutputs(const BucketShape& shape) const;
  GraphBucket* FindBucket(const BucketShape& shape);
  void CountExecution(const Batch& batch, const GraphBucket* graph_bucket, EagerReason reason);

  const ModelSpec spec_;
  const std::unique_ptr<Model> model_;
  const c10::Device device_;
  c10::cuda::CUDAStream stream_;

  // One flat buffer per input/output sized for its largest bucket; each bucket views a prefix.
  std::vector<at::Tensor> static_inputs_;   // device
  std::vector<at::Tensor> static_outputs_;  // device, the spec's output dtypes
  std::array<StagingSlot, kStagingSlots> staging_;
  int next_slot_ = 0;  // the slot the next graph launch fills
  std::vector<GraphBucket> buckets_;        // grid order; info guarded by mutex_ after Warmup
  // Graphs of buckets that failed verification: never replayed, but they keep the pool alive.
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> retired_graphs_;

  mutable std::mutex mutex_;
  CaptureSummary summary_;      // guarded by mutex_
  ExecutionCounter counter_;
  decltype(at::cuda::graph_pool_handle()) pool_{};  // shared by all of this instance's graphs
};

// The caching allocator's view of `device`'s memory.
DeviceMemory CudaDeviceMemory(const c10::Device& device);

}  // namespace graphserve
