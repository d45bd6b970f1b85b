#include "graphserve/server/observability/trace_settings.h"

#include <algorithm>
#include <string>
#include <vector>

namespace graphserve {
namespace {

// Triton's settings with its defaults; the only values graphserve can honour, since it traces
// nothing.
struct TraceSetting {
  const char* key;
  const char* value;
};
constexpr TraceSetting kTraceSettings[] = {
    {"trace_level", "OFF"},  {"trace_rate", "1000"}, {"trace_count", "-1"},
    {"log_frequency", "0"},  {"trace_mode", "triton"},
};

const TraceSetting* FindSetting(const std::string& key) {
  for (const TraceSetting& setting : kTraceSettings) {
    if (key == setting.key) return &setting;
  }
  return nullptr;
}

Status CheckSetting(const std::string& key,
                    const inference::TraceSettingRequest::SettingValue& value) {
  const TraceSetting* setting = FindSetting(key);
  if (setting == nullptr) {
    return InvalidArgument("settings['" + key +
                           "']: unknown trace setting (trace_level, trace_rate, trace_count, "
                           "log_frequency, trace_mode)");
  }
  for (const std::string& asked : value.value()) {
    if (asked != setting->value) {
      return Status(StatusCode::kUnimplemented,
                    "settings['" + key + "']: '" + asked +
                        "' is not supported: graphserve does not trace requests (only " + key +
                        " '" + setting->value +
                        "'); per-stage durations are in ModelStatistics and on /metrics");
    }
  }
  return Status::Ok();
}

}  // namespace

Status UpdateTraceSettings(const inference::TraceSettingRequest& request,
                           inference::TraceSettingResponse* response) {
  std::vector<std::string> keys;
  for (const auto& entry : request.settings()) keys.push_back(entry.first);
  std::sort(keys.begin(), keys.end());  // the same bad setting named every time
  for (const std::string& key : keys) {
    Status status = CheckSetting(key, request.settings().at(key));
    if (!status.ok()) return status;
  }
  for (const TraceSetting& setting : kTraceSettings) {
    (*response->mutable_settings())[setting.key].add_value(setting.value);
  }
  return Status::Ok();
}

}  // namespace graphserve
