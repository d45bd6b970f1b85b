#pragma once
// Process-wide set-up of a graphserve program that runs gRPC (the server, the load generator).

namespace graphserve {

// Debian's Abseil is built without NDEBUG, so its debug deadlock detection runs on every
// absl::Mutex lock: each one records lock order in a graph guarded by a single process-wide
// spinlock. gRPC 1.51 takes many such locks per call on every thread, so under load the threads
// queue on that spinlock. graphserve's own locks are std::mutex; this turns the detection off.
// Not thread-safe: call first in main(), before gRPC starts its threads.
void TurnOffAbseilDeadlockDetection();

// gRPC 1.51 (iomgr) hands a connection's transport work to its "default executor" whenever the
// polling thread running it has a completion waiting, which under load is nearly always; once
// there, the connection stays until its work runs dry, which under a backlog it never does: the
// intake moves onto the executor's few threads while the polling threads wait for calls. This
// keeps the work on the polling thread that picked it up (gRPC's own executor-off mode, in which
// an offload runs in place). It calls an internal gRPC function found at run time, and returns
// false, changing nothing, where that is missing (another gRPC build). It initialises gRPC, which
// starts gRPC's threads, and keeps it initialised for the process's life (a re-initialisation
// would turn the executor back on). Not thread-safe: call in main() before any gRPC object exists
// and after blocking the signals the process takes with sigwait (threads inherit the mask).
bool KeepGrpcTransportWorkOnPollingThreads();

// Whether gRPC's default executor runs threads of its own (false after the call above).
bool GrpcDefaultExecutorIsThreaded();

}  // namespace graphserve
