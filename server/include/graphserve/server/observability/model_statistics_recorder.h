#pragma once
// What Triton's ModelStatistics RPC reports of one loaded model, accumulated since it was loaded:
// request outcomes with their durations (recorded at the RPC edge, the only place that knows a
// request's final outcome) and executed batches with their stage times (recorded by the scheduler
// that ran them). model_statistics.h turns a Snapshot into the RPC's answer.
//
// Ownership: one per ModelScheduler, created and destroyed with it, so that a reloaded model starts
// from zero. Thread safety: every method may be called from any thread; each takes one short lock.
// Errors: none.
#include <cstdint>
#include <map>

#include "graphserve/engine/executor.h"
#include "graphserve/server/batching/pending_request.h"
#include "graphserve/server/common/thread_annotations.h"

namespace graphserve {

// How many times something happened and how long it took in all (Triton's StatisticDuration).
struct DurationTotal {
  uint64_t count = 0;
  uint64_t ns = 0;

  void Add(int64_t duration_ns) {
    ++count;
    ns += static_cast<uint64_t>(duration_ns > 0 ? duration_ns : 0);
  }
};

// The stage times of every executed batch of one size (Triton's InferBatchStatistics).
struct BatchSizeTotals {
  DurationTotal compute_input;
  DurationTotal compute_infer;
  DurationTotal compute_output;
};

struct ModelStatisticsSnapshot {
  // When the last batch finished executing, in ms since the Unix epoch; 0 before the first.
  uint64_t last_inference_ms = 0;
  uint64_t inference_count = 0;  // rows of the requests answered OK
  uint64_t execution_count = 0;  // batches executed successfully
  // Per request, as Triton counts them: success and fail run from the call's arrival to its answer;
  // queue and the compute stages are those of the successful requests (each request is charged its
  // whole batch's stage times).
  DurationTotal success;
  DurationTotal fail;
  DurationTotal queue;
  DurationTotal compute_input;
  DurationTotal compute_infer;
  DurationTotal compute_output;
  // By batch size: the real rows of the batch, padding excluded, as Triton's batch sizes are.
  std::map<int64_t, BatchSizeTotals> batches_by_size;
};

class ModelStatisticsRecorder {
 public:
  // A request answered OK: its rows, its time from arrival to answer, and its queue wait and batch
  // stage times.
  void RecordSuccess(int64_t rows, int64_t request_ns, const RequestTiming& timing) EXCLUDES(mutex_);
  // A request that reached the model's scheduler and was not answered OK: refused by a full queue,
  // expired, cancelled or failed in execution.
  void RecordFailure(int64_t request_ns) EXCLUDES(mutex_);
  // A batch that executed successfully, with `batch_rows` real rows, finished at
  // `finished_ms_since_epoch` (wall-clock time).
  void RecordExecution(int64_t batch_rows, const BatchStageTimes& stages,
                       uint64_t finished_ms_since_epoch) EXCLUDES(mutex_);

  ModelStatisticsSnapshot Snapshot() const EXCLUDES(mutex_);

 private:
  mutable Mutex mutex_;
  ModelStatisticsSnapshot totals_ GUARDED_BY(mutex_);
};

}  // namespace graphserve
