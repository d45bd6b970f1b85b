#pragma once
// A bound on the log lines that clients can cause. Every bad request, refused call or malformed
// connection that logs would otherwise let a client fill the disk and bury the server's own lines
// (2,000 bad requests wrote 776 KB of log). Each such line has a kind, and within a kind a site (a
// library's source line, a model): per kind and site, at most LogLimit::lines are written in a
// window of LogLimit::window_us that opens with the first line; the rest are counted, and the first
// line written after the window says how many were dropped ("... (37 similar lines suppressed in
// the last 10 s)"). The totals per kind are exported as graphserve_log_lines_suppressed_total.
// Errors of the server's own (start-up, model loads) never go through here.
//
// Thread safety: any method from any thread (one short critical section per line). Errors: none.
// Bound: at most kMaxSites sites are told apart; lines of further sites share their kind's window.
#include <spdlog/spdlog.h>

#include <array>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "graphserve/server/common/clock.h"
#include "graphserve/server/common/thread_annotations.h"

namespace graphserve {

// What kind of client-caused event a line reports: the `kind` label of the suppressed-lines metric.
enum class LogKind {
  kAuthFailure,        // a call refused for a missing or wrong token
  kRefusedConnection,  // a gRPC connection closed on arrival for want of descriptors
  kBatchFailure,       // a batch or request the model failed to run (clients choose its inputs)
  kHttpLibrary,        // libmicrohttpd's lines: malformed requests, failed TLS handshakes, the connection limit
  kGrpcLibrary,        // gRPC's own lines, e.g. failed TLS handshakes
  kProtobufLibrary,    // libprotobuf's lines, e.g. a request string that is not UTF-8
};
inline constexpr LogKind kLogKinds[] = {LogKind::kAuthFailure,  LogKind::kRefusedConnection,
                                        LogKind::kBatchFailure, LogKind::kHttpLibrary,
                                        LogKind::kGrpcLibrary,  LogKind::kProtobufLibrary};
inline constexpr size_t kLogKindCount = std::size(kLogKinds);

// "auth_failure", "refused_connection", "batch_failure", "libmicrohttpd", "grpc", "protobuf".
const char* LogKindLabel(LogKind kind);

struct LogLimit {
  int64_t lines = 10;  // per kind and site in each window; 0: no limit
  int64_t window_us = 10'000'000;
};

class LogLimiter {
 public:
  struct Verdict {
    bool write = false;
    // When `write`: the lines of this kind and site dropped since the last one written, and how long
    // ago the first of them came.
    int64_t suppressed = 0;
    int64_t suppressed_over_us = 0;

    // What the written line ends with: " (37 similar lines suppressed in the last 12 s)" (seconds
    // rounded up), or "" when none were dropped.
    std::string Note() const;
  };

  static constexpr size_t kMaxSites = 1024;

  // `clock` must outlive the limiter.
  LogLimiter(const Clock* clock, LogLimit limit);
  LogLimiter(const LogLimiter&) = delete;
  LogLimiter& operator=(const LogLimiter&) = delete;

  // Applies from now on: every kind and site starts a new window (what was dropped in the old ones
  // stays in the totals, but no line will tell its count).
  void SetLimit(LogLimit limit) EXCLUDES(mutex_);
  LogLimit limit() const EXCLUDES(mutex_);

  // Whether a line of `kind` from `site` (a stable name: a source location, a model; "" for the kind
  // as a whole) may be written now; a line refused is counted as suppressed.
  Verdict Admit(LogKind kind, std::string_view site = {}) EXCLUDES(mutex_);

  // Lines of `kind` suppressed since the limiter was made.
  int64_t SuppressedTotal(LogKind kind) const EXCLUDES(mutex_);

 private:
  struct Window {
    bool opened = false;
    int64_t start_us = 0;
    int64_t written = 0;
    int64_t suppressed = 0;
    int64_t first_suppressed_us = 0;
  };

  const Clock* const clock_;
  mutable Mutex mutex_;
  LogLimit limit_ GUARDED_BY(mutex_);
  // Keyed by the kind's index followed by the site.
  std::unordered_map<std::string, Window> windows_ GUARDED_BY(mutex_);
  std::array<int64_t, kLogKindCount> suppressed_totals_ GUARDED_BY(mutex_){};
};

// The process's limiter (on the steady clock), which LogLimited and the libraries' log bridges of
// logging.h consult; SetupLogging sets its limit.
LogLimiter& ClientLogLimiter();

// Logs like spdlog::log at `level`, unless ClientLogLimiter() suppresses the line; the line after a
// suppression carries its count. Returns whether the line was written. The arguments are not
// formatted for a line below the logger's level or suppressed.
// One line of libmicrohttpd's (its MHD_OPTION_EXTERNAL_LOGGER's printf format and arguments), logged
// at warn as "`port`: text", rate-limited per format as kHttpLibrary: clients cause most of them
// (malformed requests, failed TLS handshakes, the connection limit).
void LogHttpLibraryLine(const char* port, const char* format, va_list arguments);

template <typename... Args>
bool LogLimited(LogKind kind, std::string_view site, spdlog::level::level_enum level,
                spdlog::format_string_t<Args...> format, Args&&... args) {
  // Below the level a line is neither written nor suppressed: it must not use up the window.
  if (!spdlog::should_log(level)) return false;
  const LogLimiter::Verdict verdict = ClientLogLimiter().Admit(kind, site);
  if (!verdict.write) return false;
  spdlog::log(level, "{}{}", fmt::format(format, std::forward<Args>(args)...), verdict.Note());
  return true;
}

}  // namespace graphserve
