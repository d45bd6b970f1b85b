#include "graphserve/server/observability/json_log_formatter.h"

#include <spdlog/details/log_msg.h>

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

namespace graphserve {
namespace {

// RFC 3339 in UTC with microseconds: collectors parse it without knowing the host's zone.
std::string Rfc3339Utc(spdlog::log_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(since_epoch - seconds);
  const std::time_t whole = static_cast<std::time_t>(seconds.count());
  std::tm utc{};
  gmtime_r(&whole, &utc);
  char text[40];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long long>(micros.count()));
  return text;
}

}  // namespace

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
  nlohmann::json record = {
      {"time", Rfc3339Utc(msg.time)},
      {"level", std::string(level.data(), level.size())},
      {"thread", msg.thread_id},
      {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
      {"message", std::string(msg.payload.data(), msg.payload.size())},
  };
  // `replace`: a message with invalid UTF-8 still yields a valid line instead of an exception.
  const std::string line =
      record.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace) + "\n";
  dest.append(line.data(), line.data() + line.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

}  // namespace graphserve
