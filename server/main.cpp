// graphserve: the server executable. Parses flags, starts a GraphServer, and waits for SIGINT or
// SIGTERM to drain and exit 0; SIGHUP reloads the token file and the TLS certificates.
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <optional>
#include <pthread.h>
#include <thread>

#include "graphserve/grpc_process.h"
#include "graphserve/server/observability/logging.h"
#include "graphserve/server/process/command_line.h"
#include "graphserve/server/process/exit_status.h"
#include "graphserve/server/process/server.h"

namespace {

// How long a running batch may take after the drain timeout before the process exits regardless.
constexpr std::chrono::milliseconds kDrainGrace{10000};

// Reads the command line and sets up the log. nullopt: go on; otherwise the status to exit with now.
std::optional<int> ReadCommandLine(int argc, char** argv, graphserve::CommandLine* line) {
  if (const std::optional<int> exit_status = graphserve::ParseCommandLine(argc, argv, line, std::cout, std::cerr)) {
    return exit_status;
  }
  const graphserve::Status status = graphserve::SetupLogging(line->log_level, line->log_format, line->client_log_limit);
  if (!status.ok()) {
    std::cerr << status.message() << "\n";
    return graphserve::kExitBadUsage;
  }
  for (const std::string& note : line->notes) spdlog::info("{}", note);
  return std::nullopt;
}

// Each connection is a descriptor: with the common soft limit of 1024 (or a container's lower one),
// idle connections could exhaust them while the hard limit allows far more.
void RaiseOpenFileLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= files.rlim_max) return;
  const rlim_t soft = files.rlim_cur;
  files.rlim_cur = files.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &files) == 0) spdlog::info("open-file limit raised from {} to {}", soft, files.rlim_max);
}

// Blocks the stop and reload signals in every thread (threads inherit the mask, so this comes before
// any thread starts) and returns them, for main to take synchronously: shutdown and reload then run
// in ordinary code rather than in a handler.
sigset_t BlockStopAndReloadSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Without --grpc-executor-offload, each connection's transport work stays on the polling thread that
// picked it up. Initialising gRPC starts its threads: call after the signal mask.
void ConfigureGrpcExecutor(bool offload) {
  if (offload) return;
  if (graphserve::KeepGrpcTransportWorkOnPollingThreads()) {
    spdlog::info("gRPC's executor is off: each connection's transport work stays on the polling threads");
  } else {
    spdlog::warn("this gRPC build has no switch for its executor: a busy connection's transport work may "
                 "move to gRPC's executor thread");
  }
}

// Serves until SIGINT or SIGTERM, reloading at each SIGHUP; returns the stop signal.
int ServeUntilStopped(graphserve::GraphServer* server, const sigset_t& signals) {
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) server->Reload();
  return signal_number;
}

// Shutdown cancels what is left at the drain timeout, then waits for the batches already running. A
// batch that hangs (a stuck device) must not hold an orchestrator's restart forever: past the timeout
// plus a grace for one batch, the process leaves without waiting.
void ExitIfShutdownOutlasts(std::chrono::milliseconds drain_timeout) {
  std::thread([deadline = drain_timeout + kDrainGrace] {
    std::this_thread::sleep_for(deadline);
    spdlog::critical("shutdown still waiting {} ms after the signal: exiting without it", deadline.count());
    spdlog::shutdown();
    _exit(graphserve::kExitRuntimeFailure);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  graphserve::TurnOffAbseilDeadlockDetection();
  graphserve::CommandLine line;
  if (const std::optional<int> exit_status = ReadCommandLine(argc, argv, &line)) return *exit_status;
  const graphserve::ServerOptions& options = line.server;
  RaiseOpenFileLimit();
  const sigset_t signals = BlockStopAndReloadSignals();
  ConfigureGrpcExecutor(line.grpc_executor_offload);

  graphserve::GraphServer server;
  const graphserve::Status status = server.Start(options);
  if (!status.ok()) {
    const int exit_status = graphserve::ExitStatusFor(server.start_failure());
    spdlog::critical("cannot start: {} (exit status {}: docs/running.md, \"Exit status\")", status.ToString(),
                     exit_status);
    server.Shutdown();
    return exit_status;
  }
  const int stop_signal = ServeUntilStopped(&server, signals);
  spdlog::info("received {}", stop_signal == SIGTERM ? "SIGTERM" : "SIGINT");
  ExitIfShutdownOutlasts(options.drain_timeout);
  server.Shutdown();
  spdlog::info("stopped");
  return graphserve::kExitStopped;
}
