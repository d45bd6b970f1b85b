#pragma once
// graphserve's exit statuses: one for each way a start can fail, so that a script or an
// orchestrator can tell a mistake in the command line from a broken model or a taken port without
// reading the log. docs/running.md ("Exit status") has the table; keep the two in step.
namespace graphserve {

// Stopped by SIGINT or SIGTERM after draining, or after --help or --version.
inline constexpr int kExitStopped = 0;
// Anything else that ends the process: a start failure of none of the kinds below, a CUDA fault
// at shutdown, a drain that outlasted its timeout.
inline constexpr int kExitRuntimeFailure = 1;
// The command line: an unknown or malformed flag, a value graphserve cannot use, flags that
// contradict each other, TLS or token files that cannot be read, a --device this host lacks.
inline constexpr int kExitBadUsage = 2;
// The model repository: its folder cannot be read or holds no model, a --load-model names no folder
// of it, or a start-up model failed to load (with --exit-on-error, the default).
inline constexpr int kExitBadRepository = 3;
// An endpoint cannot listen on its address: the port is in use, or the host has no such address.
inline constexpr int kExitCannotListen = 4;

// Why GraphServer::Start failed.
enum class StartFailure { kNone, kBadUsage, kBadRepository, kCannotListen, kRuntime };

inline int ExitStatusFor(StartFailure failure) {
  switch (failure) {
    case StartFailure::kNone:
      return kExitStopped;
    case StartFailure::kBadUsage:
      return kExitBadUsage;
    case StartFailure::kBadRepository:
      return kExitBadRepository;
    case StartFailure::kCannotListen:
      return kExitCannotListen;
    case StartFailure::kRuntime:
      break;
  }
  return kExitRuntimeFailure;
}

}  // namespace graphserve
