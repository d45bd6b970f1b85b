#include "graphserve/server/observability/log_settings.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <vector>

#include "graphserve/server/common/thread_annotations.h"
#include "graphserve/server/observability/logging.h"

namespace graphserve {
namespace {

using SettingValue = inference::LogSettingsRequest::SettingValue;

// The log_format names, Triton's two and graphserve's JSON lines.
struct FormatName {
  LogFormat format;
  const char* name;
};
constexpr FormatName kFormatNames[] = {
    {LogFormat::kPlain, "ISO8601"},
    {LogFormat::kGlog, "default"},
    {LogFormat::kJson, "json"},
};

const char* FormatNameOf(LogFormat format) {
  for (const FormatName& entry : kFormatNames) {
    if (entry.format == format) return entry.name;
  }
  return "ISO8601";
}

// What the settings are, or are to be.
struct LogState {
  TritonLogLevels levels;
  LogFormat format = LogFormat::kPlain;
};

Status ExpectType(const std::string& key, const SettingValue& value, SettingValue::ParameterChoiceCase type,
                  const char* type_name) {
  if (value.parameter_choice_case() == type) return Status::Ok();
  if (value.parameter_choice_case() == SettingValue::PARAMETER_CHOICE_NOT_SET) {
    return InvalidArgument("settings['" + key + "']: no value given");
  }
  return InvalidArgument("settings['" + key + "']: expected a " + type_name);
}

// Writes one requested setting into `state`; the error names it.
Status ApplySetting(const std::string& key, const SettingValue& value, LogState* state) {
  const auto bool_setting = [&](bool* target) {
    Status status = ExpectType(key, value, SettingValue::kBoolParam, "bool_param");
    if (status.ok()) *target = value.bool_param();
    return status;
  };
  if (key == "log_info") return bool_setting(&state->levels.info);
  if (key == "log_warning") return bool_setting(&state->levels.warning);
  if (key == "log_error") return bool_setting(&state->levels.error);
  if (key == "log_verbose_level") {
    Status status = ExpectType(key, value, SettingValue::kUint32Param, "uint32_param");
    if (status.ok()) state->levels.verbose_level = value.uint32_param();
    return status;
  }
  if (key == "log_format") {
    Status status = ExpectType(key, value, SettingValue::kStringParam, "string_param");
    if (!status.ok()) return status;
    for (const FormatName& entry : kFormatNames) {
      if (value.string_param() == entry.name) {
        state->format = entry.format;
        return Status::Ok();
      }
    }
    return InvalidArgument("settings['log_format']: unknown format '" + value.string_param() +
                           "' (default, ISO8601, json)");
  }
  if (key == "log_file") {
    Status status = ExpectType(key, value, SettingValue::kStringParam, "string_param");
    if (!status.ok() || value.string_param().empty()) return status;
    return Status(StatusCode::kUnimplemented,
                  "settings['log_file']: graphserve logs to stdout only, where container runtimes "
                  "collect it; it cannot write its log to a file");
  }
  return InvalidArgument("settings['" + key +
                         "']: unknown log setting (log_info, log_warning, log_error, "
                         "log_verbose_level, log_format, log_file)");
}

void FillResponse(const LogState& state, inference::LogSettingsResponse* response) {
  auto& settings = *response->mutable_settings();
  settings["log_info"].set_bool_param(state.levels.info);
  settings["log_warning"].set_bool_param(state.levels.warning);
  settings["log_error"].set_bool_param(state.levels.error);
  settings["log_verbose_level"].set_uint32_param(state.levels.verbose_level);
  settings["log_format"].set_string_param(FormatNameOf(state.format));
  settings["log_file"].set_string_param("");
}

Mutex update_mutex;  // one update at a time, so that each applies all or nothing

}  // namespace

TritonLogLevels TritonLevelsOf(spdlog::level::level_enum level) {
  TritonLogLevels levels;
  levels.verbose_level = level == spdlog::level::trace ? 2 : level == spdlog::level::debug ? 1 : 0;
  levels.info = level <= spdlog::level::info;
  levels.warning = level <= spdlog::level::warn;
  levels.error = level <= spdlog::level::err;
  return levels;
}

Status SpdlogLevelFor(const TritonLogLevels& levels, spdlog::level::level_enum* level, LogSwitchNames names) {
  const char* threshold = ": graphserve's log level is one threshold, so a level cannot be off "
                          "while a less severe one is on";
  const bool flags = names == LogSwitchNames::kFlags;
  // `key` as the subject of a message, and as its object.
  auto subject = [flags](const char* key, const char* flag) {
    return flags ? std::string(flag) : "settings['" + std::string(key) + "']";
  };
  auto object = [flags](const char* key, const char* flag) { return std::string(flags ? flag : key); };
  if (levels.verbose_level > 0 && !levels.info) {
    return InvalidArgument(subject("log_info", "--log-info") + ": false while " +
                           object("log_verbose_level", "--log-verbose") + " is " +
                           std::to_string(levels.verbose_level) + threshold);
  }
  if (levels.info && !levels.warning) {
    return InvalidArgument(subject("log_warning", "--log-warning") + ": false while " +
                           object("log_info", "--log-info") + " is true" + threshold);
  }
  if (levels.warning && !levels.error) {
    return InvalidArgument(subject("log_error", "--log-error") + ": false while " +
                           object("log_warning", "--log-warning") + " is true" + threshold);
  }
  *level = levels.verbose_level >= 2 ? spdlog::level::trace
           : levels.verbose_level == 1 ? spdlog::level::debug
           : levels.info              ? spdlog::level::info
           : levels.warning           ? spdlog::level::warn
           : levels.error             ? spdlog::level::err
                                      : spdlog::level::off;
  return Status::Ok();
}

Status UpdateLogSettings(const inference::LogSettingsRequest& request,
                         inference::LogSettingsResponse* response) {
  MutexLock lock(&update_mutex);
  std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
  const LogState current{TritonLevelsOf(logger->level()), CurrentLogFormat()};

  // Sorted, so that of several bad settings the same one is named every time.
  std::vector<std::string> keys;
  for (const auto& entry : request.settings()) keys.push_back(entry.first);
  std::sort(keys.begin(), keys.end());
  LogState wanted = current;
  for (const std::string& key : keys) {
    Status status = ApplySetting(key, request.settings().at(key), &wanted);
    if (!status.ok()) return status;
  }
  spdlog::level::level_enum level = logger->level();
  // Levels asked as they are keep the threshold they came from (critical and off read the same).
  if (!(wanted.levels == current.levels)) {
    Status status = SpdlogLevelFor(wanted.levels, &level);
    if (!status.ok()) return status;
  }

  // The format first, so that the line announcing a new level is written in it.
  if (wanted.format != current.format) SetLogFormat(wanted.format);
  if (level != logger->level()) {
    spdlog::info("LogSettings: log level {} -> {}", spdlog::level::to_string_view(logger->level()),
                 spdlog::level::to_string_view(level));
    logger->set_level(level);
  }
  FillResponse(LogState{TritonLevelsOf(level), wanted.format}, response);
  return Status::Ok();
}

}  // namespace graphserve
