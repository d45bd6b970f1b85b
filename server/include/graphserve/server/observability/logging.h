#pragma once
// spdlog set-up for the server process, and the bridges that carry the engine's, gRPC's and
// libprotobuf's log lines (which cannot include spdlog, or would write to stderr) into it; the
// libraries' lines are rate-limited per source line (log_limiter.h), as clients can cause them.
// Call SetupLogging once at start-up, before other threads exist. Every line goes to stdout, where
// container runtimes and log collectors read it. Afterwards the level (spdlog's) and the format may
// change while serving (SetLogFormat, Triton's LogSettings RPC in log_settings.h): both are safe to
// change while other threads log.
#include <string>

#include "graphserve/engine/status.h"
#include "graphserve/server/observability/log_limiter.h"

namespace graphserve {

enum class LogFormat {
  kPlain,  // "2025-01-02T03:04:05.678901+00:00 info [123] message", coloured on a terminal
  kJson,   // one JSON object per line (JsonLogFormatter), for log collectors
  // "I0102 03:04:05.678901 123] message": Triton's "default" format (glog's prefix without the
  // source file), chosen only through the LogSettings RPC.
  kGlog,
};

// "plain" or "json"; INVALID_ARGUMENT for anything else.
Status ParseLogFormat(const std::string& name, LogFormat* format);

// `level`: trace, debug, info, warn, error, critical or off. INVALID_ARGUMENT for anything else.
// `client_log_limit`: the limit of ClientLogLimiter(), on the lines clients can cause.
Status SetupLogging(const std::string& level, LogFormat format = LogFormat::kPlain,
                    LogLimit client_log_limit = LogLimit{});

// Switches the format of the default logger's lines from now on.
void SetLogFormat(LogFormat format);
// The format of the default logger's lines: what SetupLogging or SetLogFormat last chose (kPlain
// before either).
LogFormat CurrentLogFormat();

}  // namespace graphserve
