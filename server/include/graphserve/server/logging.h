#pragma once
// spdlog set-up for the server process, and the bridges that carry the engine's and gRPC's log lines
// (which cannot include spdlog) into it. Call SetupLogging once at start-up, before other threads
// exist. Every line goes to stdout, where container runtimes and log collectors read it.
#include <string>

#include "graphserve/engine/status.h"

namespace graphserve {

enum class LogFormat {
  kPlain,  // "2025-01-02T03:04:05.678901+00:00 info [123] message", coloured on a terminal
  kJson,   // one JSON object per line (JsonLogFormatter), for log collectors
};

// "plain" or "json"; INVALID_ARGUMENT for anything else.
Status ParseLogFormat(const std::string& name, LogFormat* format);

// `level`: trace, debug, info, warn, error, critical or off. INVALID_ARGUMENT for anything else.
Status SetupLogging(const std::string& level, LogFormat format = LogFormat::kPlain);

}  // namespace graphserve
