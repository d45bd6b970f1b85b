#include "graphserve/server/observability/trace_settings.h"

#include "grpc_service.pb.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

namespace graphserve {
namespace {

constexpr const char* kKnownSettings =
    "trace_file, trace_level, trace_rate, trace_count, log_frequency, trace_mode";
constexpr const char* kSettingNames[] = {"trace_file",  "trace_level",   "trace_rate",
                                         "trace_count", "log_frequency", "trace_mode"};

bool IsSetting(const std::string& key) {
  return std::find(std::begin(kSettingNames), std::end(kSettingNames), key) != std::end(kSettingNames);
}
constexpr const char* kNoOpenTelemetry =
    "trace_mode 'opentelemetry' is not supported: no maintained OpenTelemetry C++ SDK is packaged for "
    "graphserve's build (Debian 12 has none); use trace_mode 'triton'";
constexpr const char* kNoTensors =
    "trace_level 'TENSORS' is not supported: graphserve's traces hold timestamps only (use TIMESTAMPS)";

bool ParseInteger(const std::string& text, int64_t min, int64_t* value) {
  int64_t parsed = 0;
  const char* end = text.data() + text.size();
  const auto [last, error] = std::from_chars(text.data(), end, parsed);
  if (error != std::errc() || last != end || parsed < min) return false;
  *value = parsed;
  return true;
}

// Sets the setting `key` (the API's name) of `config` from `values`, non-empty. The error's message
// says what is wrong with the value, without naming where it came from.
Status SetValue(const std::string& key, const std::vector<std::string>& values, TraceConfig* config) {
  if (key == "trace_level") {
    bool timestamps = false, off = false;
    for (const std::string& value : values) {
      if (value == "TIMESTAMPS") {
        timestamps = true;
      } else if (value == "OFF") {
        off = true;
      } else if (value == "TENSORS") {
        return Status(StatusCode::kUnimplemented, kNoTensors);
      } else {
        return InvalidArgument("'" + value + "' is not a trace level (OFF, TIMESTAMPS)");
      }
    }
    if (off && timestamps) return InvalidArgument("OFF cannot be given with another level");
    config->timestamps = timestamps;
    return Status::Ok();
  }
  if (values.size() != 1) return InvalidArgument("expected one value, got " + std::to_string(values.size()));
  const std::string& value = values[0];
  if (key == "trace_mode") {
    if (value == "triton") return Status::Ok();
    if (value == "opentelemetry") return Status(StatusCode::kUnimplemented, kNoOpenTelemetry);
    return InvalidArgument("'" + value + "' is not a trace mode (triton)");
  }
  if (key == "trace_file") {
    if (value.empty()) return InvalidArgument("expected a file path");
    config->file = value;
    return Status::Ok();
  }
  // Triton's bounds: a rate of 1 traces every request; a count of -1 has no limit.
  struct IntegerSetting {
    const char* key;
    int64_t min;
    int64_t TraceConfig::*field;
    const char* expected;
  };
  constexpr IntegerSetting kIntegers[] = {
      {"trace_rate", 1, &TraceConfig::rate, "a whole number from 1"},
      {"trace_count", -1, &TraceConfig::count, "a whole number from -1 (no limit)"},
      {"log_frequency", 0, &TraceConfig::log_frequency, "a whole number from 0 (one file)"},
  };
  for (const IntegerSetting& setting : kIntegers) {
    if (key != setting.key) continue;
    if (!ParseInteger(value, setting.min, &(config->*setting.field))) {
      return InvalidArgument("'" + value + "' is not " + setting.expected);
    }
    return Status::Ok();
  }
  // Callers pass known keys only (IsSetting, the flags' table).
  return InvalidArgument("unknown trace setting (" + std::string(kKnownSettings) + ")");
}

void CopySetting(const std::string& key, const TraceConfig& from, TraceConfig* to) {
  if (key == "trace_level") to->timestamps = from.timestamps;
  if (key == "trace_rate") to->rate = from.rate;
  if (key == "trace_count") to->count = from.count;
  if (key == "log_frequency") to->log_frequency = from.log_frequency;
  if (key == "trace_file") to->file = from.file;
}

bool Traces(const TraceConfig& config) { return config.timestamps && config.count != 0; }

void Answer(const TraceConfig& config, bool with_file, inference::TraceSettingResponse* response) {
  response->clear_settings();
  auto& settings = *response->mutable_settings();
  settings["trace_level"].add_value(config.timestamps ? "TIMESTAMPS" : "OFF");
  settings["trace_rate"].add_value(std::to_string(config.rate));
  settings["trace_count"].add_value(std::to_string(config.count));
  settings["log_frequency"].add_value(std::to_string(config.log_frequency));
  settings["trace_mode"].add_value("triton");
  if (with_file) settings["trace_file"].add_value(config.file);
}

}  // namespace

Status ApplyTraceConfigFlag(const std::string& text, TraceConfig* config) {
  const auto refuse = [&text](const std::string& why) {
    return InvalidArgument("--trace-config " + text + ": " + why);
  };
  const size_t equals = text.find('=');
  if (equals == std::string::npos) return refuse("expected [triton,]SETTING=VALUE");
  std::string key = text.substr(0, equals);
  const std::string value = text.substr(equals + 1);
  const size_t comma = key.find(',');
  std::string mode;
  if (comma != std::string::npos) {
    mode = key.substr(0, comma);
    key = key.substr(comma + 1);
    if (mode == "opentelemetry") return refuse(kNoOpenTelemetry);
    if (mode != "triton") return refuse("'" + mode + "' is not a trace mode (triton)");
  }
  // Triton's names on the command line: its mode's settings after "triton,", the global ones bare.
  struct FlagKey {
    const char* flag;
    const char* setting;
    bool triton_mode;
  };
  constexpr FlagKey kKeys[] = {
      {"file", "trace_file", true},    {"log-frequency", "log_frequency", true},
      {"level", "trace_level", false}, {"rate", "trace_rate", false},
      {"count", "trace_count", false}, {"mode", "trace_mode", false},
  };
  for (const FlagKey& known : kKeys) {
    if (key != known.flag) continue;
    if (known.triton_mode != !mode.empty()) {
      return refuse(known.triton_mode ? "write it triton," + key + "=VALUE" : "'" + key + "' takes no mode");
    }
    // The command line takes levels in any case, as Triton's does.
    std::string given = value;
    if (key == "level") std::transform(given.begin(), given.end(), given.begin(), ::toupper);
    const Status status = SetValue(known.setting, {given}, config);
    return status.ok() ? status : refuse(status.message());
  }
  return refuse("unknown setting (triton,file, triton,log-frequency, level, rate, count, mode)");
}

TraceSettings::TraceSettings(TraceConfig global, bool clients_may_set_file)
    : clients_may_set_file_(clients_may_set_file), initial_(global), global_(std::move(global)) {
  MutexLock lock(&mutex_);
  RefreshAnyTracing();
}

Status TraceSettings::Update(const inference::TraceSettingRequest& request,
                             inference::TraceSettingResponse* response) {
  std::vector<std::string> keys;
  for (const auto& entry : request.settings()) keys.push_back(entry.first);
  std::sort(keys.begin(), keys.end());  // the same bad setting named every time
  const std::string& model = request.model_name();

  MutexLock lock(&mutex_);
  const auto existing = models_.find(model);
  const bool has_own = !model.empty() && existing != models_.end();
  TraceConfig updated = has_own ? existing->second.config : global_;
  std::set<std::string> own = has_own ? existing->second.own : std::set<std::string>{};
  for (const std::string& key : keys) {
    const auto& asked = request.settings().at(key).value();
    if (key == "trace_file" && !clients_may_set_file_) {
      return Status(
          StatusCode::kFailedPrecondition,
          "settings['trace_file']: clients may not choose the file the server writes traces to: "
          "the operator sets it (--trace-config triton,file=PATH); --trace-file-from-clients allows it");
    }
    if (!IsSetting(key)) {
      return InvalidArgument("settings['" + key + "']: unknown trace setting (" + kKnownSettings + ")");
    }
    Status status;
    if (asked.empty()) {
      // A reset: a model's key follows the global one again; a global key goes back to the value
      // the server started with.
      CopySetting(key, model.empty() ? initial_ : global_, &updated);
      own.erase(key);
    } else {
      status = SetValue(key, std::vector<std::string>(asked.begin(), asked.end()), &updated);
      if (!model.empty()) own.insert(key);
    }
    if (!status.ok()) return Status(status.code(), "settings['" + key + "']: " + status.message());
  }
  if (updated.timestamps && updated.file.empty()) {
    return Status(StatusCode::kFailedPrecondition,
                  "settings['trace_level']: no trace file to write to: start graphserve with --trace-config "
                  "triton,file=PATH");
  }

  // A new rate or level samples from the next request on: its rate-th request is the first traced.
  const auto restarts_sampling = [](const std::string& key) {
    return key == "trace_rate" || key == "trace_level";
  };
  if (model.empty()) {
    global_ = updated;
    if (std::any_of(keys.begin(), keys.end(), restarts_sampling)) global_seen_ = 0;
    // Each model follows the global keys it does not set itself.
    for (auto& [name, settings] : models_) {
      for (const std::string& key : keys) {
        if (settings.own.count(key) != 0) continue;
        CopySetting(key, global_, &settings.config);
        if (restarts_sampling(key)) settings.seen = 0;
      }
    }
  } else if (own.empty()) {
    models_.erase(model);
  } else {
    ModelSettings& settings = models_[model];
    settings.own = std::move(own);
    settings.config = updated;
    if (std::any_of(keys.begin(), keys.end(), restarts_sampling)) settings.seen = 0;
  }
  RefreshAnyTracing();
  const auto in_force = models_.find(model);
  Answer(model.empty() || in_force == models_.end() ? global_ : in_force->second.config,
         clients_may_set_file_, response);
  return Status::Ok();
}

std::optional<TraceTicket> TraceSettings::Sample(const std::string& model) {
  if (!any_tracing_.load(std::memory_order_relaxed)) return std::nullopt;
  MutexLock lock(&mutex_);
  const auto own = models_.find(model);
  TraceConfig& config = own == models_.end() ? global_ : own->second.config;
  uint64_t& seen = own == models_.end() ? global_seen_ : own->second.seen;
  if (!Traces(config)) return std::nullopt;
  if (++seen % static_cast<uint64_t>(config.rate) != 0) return std::nullopt;
  if (config.count > 0 && --config.count == 0) RefreshAnyTracing();
  return TraceTicket{++next_id_, config.file, config.log_frequency};
}

void TraceSettings::RefreshAnyTracing() {
  bool any = Traces(global_);
  for (const auto& entry : models_) any = any || Traces(entry.second.config);
  any_tracing_.store(any);
}

}  // namespace graphserve
