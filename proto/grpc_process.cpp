#include "graphserve/grpc_process.h"

#include <absl/synchronization/mutex.h>
#include <dlfcn.h>
#include <grpc/grpc.h>

namespace graphserve {
namespace {

// grpc_core::Executor's static members in libgrpc (gRPC 1.51): not in the installed headers, so
// looked up by their mangled names.
constexpr char kSetThreadingDefault[] = "_ZN9grpc_core8Executor19SetThreadingDefaultEb";
constexpr char kIsThreadedDefault[] = "_ZN9grpc_core8Executor17IsThreadedDefaultEv";

}  // namespace

void TurnOffAbseilDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

bool KeepGrpcTransportWorkOnPollingThreads() {
  using SetThreading = void (*)(bool);
  auto* set_threading = reinterpret_cast<SetThreading>(dlsym(RTLD_DEFAULT, kSetThreadingDefault));
  if (set_threading == nullptr) return false;
  grpc_init();  // never shut down: see the header
  set_threading(false);
  return !GrpcDefaultExecutorIsThreaded();
}

bool GrpcDefaultExecutorIsThreaded() {
  using IsThreaded = bool (*)();
  auto* is_threaded = reinterpret_cast<IsThreaded>(dlsym(RTLD_DEFAULT, kIsThreadedDefault));
  return is_threaded != nullptr && is_threaded();
}

}  // namespace graphserve
