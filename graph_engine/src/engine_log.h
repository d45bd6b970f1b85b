#pragma once
// The engine's internal logging: everything goes to the sink installed with SetEngineLogSink
// (executor.h), or to stderr until one is installed. Thread-safe.
#include <string>

#include "graphserve/engine/executor.h"

namespace graphserve {

void EngineLog(LogLevel level, const std::string& message);

}  // namespace graphserve
