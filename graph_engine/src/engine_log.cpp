#include "engine_log.h"

#include <cstdio>
#include <memory>
#include <mutex>
#include <utility>

namespace graphserve {
namespace {

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "info";
}

void LogToStderr(LogLevel level, const std::string& message) {
  // One fprintf per line so that lines from several threads do not interleave.
  std::fprintf(stderr, "[graphserve engine] [%s] %s\n", LevelName(level), message.c_str());
}

std::mutex& SinkMutex() {
  static std::mutex mutex;
  return mutex;
}

// Guarded by SinkMutex(). A shared_ptr so that EngineLog can call the sink outside the lock while
// another thread replaces it.
std::shared_ptr<const LogSink>& CurrentSink() {
  static std::shared_ptr<const LogSink> sink = std::make_shared<const LogSink>(LogToStderr);
  return sink;
}

}  // namespace

void SetEngineLogSink(LogSink sink) {
  auto replacement = std::make_shared<const LogSink>(sink ? std::move(sink) : LogSink(LogToStderr));
  std::lock_guard<std::mutex> lock(SinkMutex());
  CurrentSink() = std::move(replacement);
}

void EngineLog(LogLevel level, const std::string& message) {
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard<std::mutex> lock(SinkMutex());
    sink = CurrentSink();
  }
  (*sink)(level, message);
}

}  // namespace graphserve
