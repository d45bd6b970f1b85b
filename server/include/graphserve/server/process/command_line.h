#pragma once
// graphserve's command line: its own flags and tritonserver's, read into what the process needs to
// start. A tritonserver flag means what it means to Triton where graphserve can honour it: one with
// the meaning of a graphserve flag is an alias (both given with different values is an error), and
// one graphserve cannot honour is refused naming it, never ignored. docs/running.md has the table
// ("tritonserver flags").
// Stateless functions; thread-compatible. Reads the environment (GRAPHSERVE_AUTH_TOKEN) and the
// token file, nothing else.
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/server/observability/logging.h"
#include "graphserve/server/process/exit_status.h"
#include "graphserve/server/process/server.h"
#include "graphserve/server/repository/model_repository.h"

namespace graphserve {

// What the command line asks of the process.
struct CommandLine {
  ServerOptions server;
  // For SetupLogging.
  std::string log_level = "info";
  LogFormat log_format = LogFormat::kPlain;
  LogLimit client_log_limit;
  // gRPC's own default. Off, gRPC 1.51 left closures of a large message's transfer for the next
  // timer: requests of 6 to 16 MiB took 10 to 20 s on a 2-core host (docs/running.md).
  bool grpc_executor_offload = true;
  // Lines for the log once it is set up: what an accepted tritonserver flag amounts to in graphserve.
  std::vector<std::string> notes;
};

// Reads `argv` into `line`. nullopt: go on and serve. Otherwise the process should exit now with the
// status returned: 0 after --help or --version (written to `out`), else kExitBadUsage (exit_status.h)
// with its message written to `err`: a command line CLI11 cannot read (an unknown flag, a value of
// the wrong type or outside its range), a flag graphserve refuses, a value it cannot use, or flags
// that contradict each other.
std::optional<int> ParseCommandLine(int argc, const char* const* argv, CommandLine* line, std::ostream& out,
                                    std::ostream& err);

// "none", "explicit" or "poll" (Triton's names). INVALID_ARGUMENT naming the flag otherwise.
Status ParseModelControlMode(const std::string& text, ModelControlMode* mode);

}  // namespace graphserve
