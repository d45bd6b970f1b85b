#pragma once
// An spdlog formatter that writes each record as one line of JSON:
//   {"time":"2025-01-02T03:04:05.678901Z","level":"info","thread":123,"logger":"graphserve",
//    "message":"..."}
// spdlog's pattern flags copy the message verbatim, so a quote, a backslash, a newline or a control
// character in a message (a model name, an exception text) would break the line; this formatter
// escapes them with nlohmann-json, and replaces invalid UTF-8 with U+FFFD rather than throwing.
// Thread-safe as spdlog uses it: a sink holds its own clone.
#include <spdlog/formatter.h>

namespace graphserve {

class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace graphserve
