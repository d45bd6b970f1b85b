#pragma once
// An Executor that runs every batch as one eager forward of its Model: the executor for CPU
// devices, and on CUDA until the CUDA-graph executor takes over (its batches are then counted as
// eager runs with reason "disabled", or "oversize" beyond the grid).
// Thread safety as Executor's: Warmup and Execute from one thread at a time; Buckets, Counters
// and device from any thread.
#include <c10/core/Device.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "batch_accounting.h"
#include "graphserve/engine/executor.h"
#include "model.h"

namespace graphserve {

class EagerExecutor : public Executor {
 public:
  // Runs `model` on `device`; `spec` supplies the tensors' layout and the bucket grid.
  EagerExecutor(ModelSpec spec, std::unique_ptr<Model> model, c10::Device device);

  Status Warmup() override;
  Status Execute(const Batch& batch, BatchOutputs* outputs) override;
  std::vector<BucketInfo> Buckets() const override;
  ExecutionCounters Counters() const override;
  std::string device() const override;

 private:
  // Moves `inputs` to the device, runs the model and checks its outputs against the spec. Throws
  // what libtorch throws.
  Status Forward(const BucketShape& shape, const std::vector<at::Tensor>& inputs,
                 std::vector<at::Tensor>* outputs);
  // Runs one bucket on warm-up inputs, timed kTimedRuns times (after one untimed run when asked),
  // and returns its fastest run's wall time.
  Status WarmupBucket(const BucketShape& shape, bool untimed_first_run, double* execute_time_us);
  // The buckets Warmup runs: every one on CUDA, a sample on a CPU (eager_executor.cpp says which).
  std::set<BucketShape> WarmupSample() const;
  // Fills the execution time of the buckets Warmup skipped: from measured ones of the same length
  // (TimeAtMeasuredLength), or interpolated between the nearest measured lengths.
  void EstimateUnmeasuredBuckets();
  // `batch` rows at a length with measured buckets: measured, or interpolated between the nearest
  // measured batch sizes, or scaled in rows from the largest; 0 when none is measured. Needs mutex_.
  double TimeAtMeasuredLength(int64_t batch, int64_t length) const;
  EagerReason ReasonFor(const BucketShape& shape) const;

  const ModelSpec spec_;
  const std::unique_ptr<Model> model_;
  const c10::Device device_;

  mutable std::mutex mutex_;
  std::vector<BucketInfo> buckets_;  // guarded by mutex_
  ExecutionCounter counter_;
};

}  // namespace graphserve
