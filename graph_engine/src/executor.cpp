// The default, unpipelined Launch/Complete: for executors whose Execute cannot overlap with the
// assembly of the next batch (the CPU, test fakes), Launch does all the work and Complete hands the
// result over.
#include "graphserve/engine/executor.h"

#include <utility>

namespace graphserve {
namespace {

class FinishedBatch : public LaunchedBatch {
 public:
  BatchOutputs outputs;
};

}  // namespace

Status Executor::Launch(const Batch& batch, std::unique_ptr<LaunchedBatch>* launched) {
  auto finished = std::make_unique<FinishedBatch>();
  Status status = Execute(batch, &finished->outputs);
  if (!status.ok()) return status;
  *launched = std::move(finished);
  return Status::Ok();
}

Status Executor::Complete(std::unique_ptr<LaunchedBatch> launched, BatchOutputs* outputs) {
  auto* finished = dynamic_cast<FinishedBatch*>(launched.get());
  if (finished == nullptr) return Internal("Complete: the batch was not launched by this executor");
  *outputs = std::move(finished->outputs);
  return Status::Ok();
}

void Executor::ReportWarmupProgress(WarmupStage stage, int done, int total) const {
  if (warmup_progress_) warmup_progress_(WarmupProgress{stage, done, total});
}

const char* EagerReasonName(EagerReason reason) {
  switch (reason) {
    case EagerReason::kOversize: return "oversize";
    case EagerReason::kCaptureFailed: return "capture_failed";
    case EagerReason::kVerifyFailed: return "verify_failed";
    case EagerReason::kDisabled: return "disabled";
    case EagerReason::kNoCuda: return "no_cuda";
    case EagerReason::kExactLength: return "exact_length";
  }
  return "disabled";
}

}  // namespace graphserve
