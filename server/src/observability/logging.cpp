#include "graphserve/server/observability/logging.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>
#include <string>

#include "graphserve/engine/executor.h"
#include "graphserve/server/observability/json_log_formatter.h"
#include "graphserve/server/observability/log_limiter.h"

namespace graphserve {
namespace {

std::string SourceSite(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

spdlog::level::level_enum LevelOf(gpr_log_severity severity) {
  switch (severity) {
    case GPR_LOG_SEVERITY_DEBUG: return spdlog::level::debug;
    case GPR_LOG_SEVERITY_INFO: return spdlog::level::info;
    case GPR_LOG_SEVERITY_ERROR: return spdlog::level::err;
  }
  return spdlog::level::err;
}

// gRPC's core logs to stderr in a format of its own; one stream in one format is what a collector
// can parse, so its records go through spdlog like every other line. Some are a client's doing (a
// failed TLS handshake per connection), so each source line of gRPC's is rate-limited.
void ForwardGrpcLog(gpr_log_func_args* args) {
  const std::string site = SourceSite(args->file, args->line);
  LogLimited(LogKind::kGrpcLibrary, site, LevelOf(args->severity), "grpc: {} ({})", args->message, site);
}

// libprotobuf writes "[libprotobuf ERROR file:line] ..." to stderr, and a request whose string field
// is not UTF-8 makes it write one such line per request: its lines join spdlog too, rate-limited per
// source line.
void ForwardProtobufLog(google::protobuf::LogLevel level, const char* file, int line, const std::string& text) {
  const std::string site = SourceSite(file, line);
  // Some of its messages end in a space or a newline.
  const std::string message = text.substr(0, text.find_last_not_of(" \n") + 1);
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    // The process aborts next: never suppressed, and written out before it does.
    spdlog::critical("protobuf: {} ({})", message, site);
    spdlog::default_logger()->flush();
    return;
  }
  const spdlog::level::level_enum spdlog_level = level == google::protobuf::LOGLEVEL_INFO      ? spdlog::level::info
                                                 : level == google::protobuf::LOGLEVEL_WARNING ? spdlog::level::warn
                                                                                               : spdlog::level::err;
  LogLimited(LogKind::kProtobufLibrary, site, spdlog_level, "protobuf: {} ({})", message, site);
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

Status SetupLogging(const std::string& level, LogFormat format, LogLimit client_log_limit) {
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
  ClientLogLimiter().SetLimit(client_log_limit);
  gpr_set_log_function(ForwardGrpcLog);
  google::protobuf::SetLogHandler(ForwardProtobufLog);
  return Status::Ok();
}

}  // namespace graphserve
