#pragma once
// spdlog set-up for the server process, and the bridge that carries the engine's log lines (which
// cannot include spdlog) into it. Call SetupLogging once at start-up, before other threads exist.
#include <string>

#include "graphserve/engine/status.h"

namespace graphserve {

// `level`: trace, debug, info, warn, error, critical or off. INVALID_ARGUMENT for anything else.
Status SetupLogging(const std::string& level);

}  // namespace graphserve
