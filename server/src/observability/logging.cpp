#include "graphserve/server/observability/logging.h"

#include <grpc/support/log.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>

#include "graphserve/engine/executor.h"
#include "graphserve/server/observability/json_log_formatter.h"

namespace graphserve {
namespace {

// gRPC's core logs to stderr in a format of its own; one stream in one format is what a collector
// can parse, so its records go through spdlog like every other line.
void ForwardGrpcLog(gpr_log_func_args* args) {
  switch (args->severity) {
    case GPR_LOG_SEVERITY_DEBUG: spdlog::debug("grpc: {} ({}:{})", args->message, args->file, args->line); break;
    case GPR_LOG_SEVERITY_INFO: spdlog::info("grpc: {} ({}:{})", args->message, args->file, args->line); break;
    case GPR_LOG_SEVERITY_ERROR: spdlog::error("grpc: {} ({}:{})", args->message, args->file, args->line); break;
  }
}

constexpr const char* kPlainPattern = "%Y-%m-%dT%H:%M:%S.%f%z %^%l%$ [%t] %v";
constexpr const char* kGlogPattern = "%L%m%d %H:%M:%S.%f %t] %v";

std::atomic<LogFormat> current_format{LogFormat::kPlain};

}  // namespace

void SetLogFormat(LogFormat format) {
  std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
  switch (format) {
    case LogFormat::kPlain: logger->set_pattern(kPlainPattern); break;
    case LogFormat::kGlog: logger->set_pattern(kGlogPattern); break;
    // A colour sink adds escape codes only around a pattern's %^...%$, which JSON lines have not.
    case LogFormat::kJson: logger->set_formatter(std::make_unique<JsonLogFormatter>()); break;
  }
  current_format.store(format);
}

LogFormat CurrentLogFormat() { return current_format.load(); }

Status ParseLogFormat(const std::string& name, LogFormat* format) {
  if (name == "plain") {
    *format = LogFormat::kPlain;
  } else if (name == "json") {
    *format = LogFormat::kJson;
  } else {
    return InvalidArgument("--log-format: unknown format '" + name + "' (plain, json)");
  }
  return Status::Ok();
}

Status SetupLogging(const std::string& level, LogFormat format) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  // from_str answers "off" for any unknown name; only accept that when it was asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgument("--log-level: unknown level '" + level +
                           "' (trace, debug, info, warn, error, critical, off)");
  }
  // No colour sink for JSON: escape codes have no place inside JSON strings.
  std::shared_ptr<spdlog::logger> logger = format == LogFormat::kJson
                                               ? spdlog::stdout_logger_mt("graphserve")
                                               : spdlog::stdout_color_mt("graphserve");
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  SetLogFormat(format);

  SetEngineLogSink([](LogLevel engine_level, const std::string& message) {
    switch (engine_level) {
      case LogLevel::kDebug: spdlog::debug("engine: {}", message); break;
      case LogLevel::kInfo: spdlog::info("engine: {}", message); break;
      case LogLevel::kWarning: spdlog::warn("engine: {}", message); break;
      case LogLevel::kError: spdlog::error("engine: {}", message); break;
    }
  });
  gpr_set_log_function(ForwardGrpcLog);
  return Status::Ok();
}

}  // namespace graphserve
