#pragma once
// Triton's LogSettings RPC over graphserve's logger (logging.h). Triton's switches map onto spdlog's
// one level threshold: log_verbose_level 1 is debug and 2 or more is trace, then log_info,
// log_warning and log_error, each implying those after it. log_format is "ISO8601" (graphserve's
// plain lines, whose time is ISO 8601), "default" (Triton's glog-style lines) or "json" (graphserve's
// JSON lines); log_file is "": graphserve logs to stdout only.
// Thread safety: any function from any thread; updates are serialised. Errors: see
// UpdateLogSettings.
#include <cstdint>

#include <spdlog/common.h>

#include "graphserve/engine/status.h"
#include "grpc_service.pb.h"

namespace graphserve {

// Triton's level switches.
struct TritonLogLevels {
  bool info = true;
  bool warning = true;
  bool error = true;
  uint32_t verbose_level = 0;

  bool operator==(const TritonLogLevels& other) const {
    return info == other.info && warning == other.warning && error == other.error &&
           verbose_level == other.verbose_level;
  }
};

// How SpdlogLevelFor's errors name a switch: as the LogSettings RPC's setting
// (settings['log_info']) or as tritonserver's flag (--log-info).
enum class LogSwitchNames { kSettings, kFlags };

// The switches that describe `level` (critical and off: all false).
TritonLogLevels TritonLevelsOf(spdlog::level::level_enum level);
// The threshold that logs exactly what `levels` asks for. INVALID_ARGUMENT naming the switch when
// no threshold does: a level switched off while a less severe one is on.
Status SpdlogLevelFor(const TritonLogLevels& levels, spdlog::level::level_enum* level,
                      LogSwitchNames names = LogSwitchNames::kSettings);

// Applies the settings `request` names (none: a read) and answers every setting's effective value.
// All or nothing: INVALID_ARGUMENT naming the setting for an unknown key, a value of the wrong type
// or none, an unknown log_format, or levels no threshold expresses; UNIMPLEMENTED for a log_file
// other than "". Nothing changes then and `response` is left empty.
Status UpdateLogSettings(const inference::LogSettingsRequest& request,
                         inference::LogSettingsResponse* response);

}  // namespace graphserve
