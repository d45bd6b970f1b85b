#include "graphserve/server/observability/log_limiter.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace graphserve {

const char* LogKindLabel(LogKind kind) {
  switch (kind) {
    case LogKind::kAuthFailure: return "auth_failure";
    case LogKind::kRefusedConnection: return "refused_connection";
    case LogKind::kBatchFailure: return "batch_failure";
    case LogKind::kHttpLibrary: return "libmicrohttpd";
    case LogKind::kGrpcLibrary: return "grpc";
    case LogKind::kProtobufLibrary: return "protobuf";
  }
  return "unknown";
}

std::string LogLimiter::Verdict::Note() const {
  if (suppressed == 0) return "";
  const int64_t seconds = std::max<int64_t>((suppressed_over_us + 999'999) / 1'000'000, 1);
  return " (" + std::to_string(suppressed) + (suppressed == 1 ? " similar line" : " similar lines") +
         " suppressed in the last " + std::to_string(seconds) + " s)";
}

LogLimiter::LogLimiter(const Clock* clock, LogLimit limit) : clock_(clock), limit_(limit) {}

void LogLimiter::SetLimit(LogLimit limit) {
  MutexLock lock(&mutex_);
  limit_ = limit;
  windows_.clear();
}

LogLimit LogLimiter::limit() const {
  MutexLock lock(&mutex_);
  return limit_;
}

LogLimiter::Verdict LogLimiter::Admit(LogKind kind, std::string_view site) {
  const int64_t now_us = clock_->NowMicros();
  std::string key(1, static_cast<char>('a' + static_cast<int>(kind)));
  key.append(site);
  Verdict verdict;
  MutexLock lock(&mutex_);
  auto found = windows_.find(key);
  if (found == windows_.end()) {
    // Past the bound a site shares its kind's window: sites are libraries' source lines and model
    // names, few in practice, but nothing a client sends may grow this map without end.
    if (windows_.size() >= kMaxSites) key.resize(1);
    found = windows_.try_emplace(std::move(key)).first;
  }
  Window& window = found->second;
  if (!window.opened || now_us - window.start_us >= limit_.window_us) {
    verdict.suppressed = window.suppressed;
    verdict.suppressed_over_us = window.suppressed > 0 ? now_us - window.first_suppressed_us : 0;
    window = Window{true, now_us, 1, 0, 0};
    verdict.write = true;
    return verdict;
  }
  if (limit_.lines <= 0 || window.written < limit_.lines) {
    ++window.written;
    verdict.write = true;
    return verdict;
  }
  if (window.suppressed++ == 0) window.first_suppressed_us = now_us;
  ++suppressed_totals_[static_cast<size_t>(kind)];
  return verdict;
}

int64_t LogLimiter::SuppressedTotal(LogKind kind) const {
  MutexLock lock(&mutex_);
  return suppressed_totals_[static_cast<size_t>(kind)];
}

LogLimiter& ClientLogLimiter() {
  // Never destroyed: gRPC's and libprotobuf's threads may still log while static objects are torn
  // down at exit.
  static const SteadyClock* const clock = new SteadyClock();
  static LogLimiter* const limiter = new LogLimiter(clock, LogLimit{});
  return *limiter;
}

void LogHttpLibraryLine(const char* port, const char* format, va_list arguments) {
  char message[512];
  std::vsnprintf(message, sizeof(message), format, arguments);
  std::string text(message);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  LogLimited(LogKind::kHttpLibrary, format, spdlog::level::warn, "{}: {}", port, text);
}

}  // namespace graphserve
