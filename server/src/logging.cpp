#include "graphserve/server/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "graphserve/engine/executor.h"

namespace graphserve {

Status SetupLogging(const std::string& level) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  // from_str answers "off" for any unknown name; only accept that when it was asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return InvalidArgument("--log-level: unknown level '" + level +
                           "' (trace, debug, info, warn, error, critical, off)");
  }
  auto logger = spdlog::stdout_color_mt("graphserve");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%f%z %^%l%$ [%t] %v");
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);

  SetEngineLogSink([](LogLevel engine_level, const std::string& message) {
    switch (engine_level) {
      case LogLevel::kDebug: spdlog::debug("engine: {}", message); break;
      case LogLevel::kInfo: spdlog::info("engine: {}", message); break;
      case LogLevel::kWarning: spdlog::warn("engine: {}", message); break;
      case LogLevel::kError: spdlog::error("engine: {}", message); break;
    }
  });
  return Status::Ok();
}

}  // namespace graphserve
