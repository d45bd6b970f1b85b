#include "graphserve/server/observability/model_statistics_recorder.h"

#include <algorithm>

namespace graphserve {

void ModelStatisticsRecorder::RecordSuccess(int64_t rows, int64_t request_ns,
                                            const RequestTiming& timing) {
  MutexLock lock(&mutex_);
  totals_.inference_count += static_cast<uint64_t>(std::max<int64_t>(rows, 0));
  totals_.success.Add(request_ns);
  totals_.queue.Add(timing.queue_us * 1000);
  totals_.compute_input.Add(timing.stages.input_ns);
  totals_.compute_infer.Add(timing.stages.infer_ns);
  totals_.compute_output.Add(timing.stages.output_ns);
}

void ModelStatisticsRecorder::RecordFailure(int64_t request_ns) {
  MutexLock lock(&mutex_);
  totals_.fail.Add(request_ns);
}

void ModelStatisticsRecorder::RecordExecution(int64_t batch_rows, const BatchStageTimes& stages,
                                              uint64_t finished_ms_since_epoch) {
  MutexLock lock(&mutex_);
  // Batches of different instances finish out of order: the latest stays.
  totals_.last_inference_ms = std::max(totals_.last_inference_ms, finished_ms_since_epoch);
  ++totals_.execution_count;
  BatchSizeTotals& size = totals_.batches_by_size[batch_rows];
  size.compute_input.Add(stages.input_ns);
  size.compute_infer.Add(stages.infer_ns);
  size.compute_output.Add(stages.output_ns);
}

ModelStatisticsSnapshot ModelStatisticsRecorder::Snapshot() const {
  MutexLock lock(&mutex_);
  return totals_;
}

}  // namespace graphserve
