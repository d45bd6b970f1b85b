#pragma once
// Process-wide set-up of a graphserve program that runs gRPC (the server, the load generator).

namespace graphserve {

// Debian's Abseil is built without NDEBUG, so its debug deadlock detection runs on every
// absl::Mutex lock: each one records lock order in a graph guarded by a single process-wide
// spinlock. gRPC 1.51 takes many such locks per call on every thread, so under load the threads
// queue on that spinlock. graphserve's own locks are std::mutex; this turns the detection off.
// Not thread-safe: call first in main(), before gRPC starts its threads.
void TurnOffAbseilDeadlockDetection();

}  // namespace graphserve
