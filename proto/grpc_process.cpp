#include "graphserve/grpc_process.h"

#include <absl/synchronization/mutex.h>

namespace graphserve {

void TurnOffAbseilDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace graphserve
