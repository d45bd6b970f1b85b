// JsonLogFormatter and ParseLogFormat: every record is one line of valid JSON whose message reads back
// exactly, whatever characters it holds.
#include <gtest/gtest.h>
#include <spdlog/details/log_msg.h>

#include <nlohmann/json.hpp>

#include "graphserve/server/observability/json_log_formatter.h"
#include "graphserve/server/observability/logging.h"

namespace graphserve {
namespace {

using nlohmann::json;

std::string Format(const std::string& message, spdlog::level::level_enum level = spdlog::level::info,
                   spdlog::log_clock::time_point time = spdlog::log_clock::now()) {
  spdlog::details::log_msg msg(spdlog::source_loc{}, "graphserve", level, message);
  msg.time = time;
  msg.thread_id = 4242;
  spdlog::memory_buf_t out;
  JsonLogFormatter().clone()->format(msg, out);
  return std::string(out.data(), out.size());
}

TEST(JsonLogFormatterTest, OneLineWithTheFieldsCollectorsKeyOn) {
  // 2021-03-04T05:06:07.089123Z
  const auto time = spdlog::log_clock::time_point(std::chrono::microseconds(1614834367089123LL));
  const std::string line = Format("ready: serving 2 model(s)", spdlog::level::warn, time);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const json record = json::parse(line);
  EXPECT_EQ(record["time"], "2021-03-04T05:06:07.089123Z");
  EXPECT_EQ(record["level"], "warning");
  EXPECT_EQ(record["thread"], 4242);
  EXPECT_EQ(record["logger"], "graphserve");
  EXPECT_EQ(record["message"], "ready: serving 2 model(s)");
}

TEST(JsonLogFormatterTest, EscapesQuotesBackslashesAndControlCharacters) {
  const std::string message = "model \"a\\b\"\n\tnext line\r\x01 {\"x\": 1} é";
  const std::string line = Format(message);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  EXPECT_EQ(line.find('\t'), std::string::npos) << line;
  EXPECT_EQ(json::parse(line)["message"], message);
}

TEST(JsonLogFormatterTest, InvalidUtf8BecomesReplacementCharacterNotAnException) {
  const std::string line = Format(std::string("bad \xff\xfe bytes"));
  EXPECT_EQ(json::parse(line)["message"], "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
}

TEST(JsonLogFormatterTest, EveryLevelHasItsName) {
  EXPECT_EQ(json::parse(Format("m", spdlog::level::trace))["level"], "trace");
  EXPECT_EQ(json::parse(Format("m", spdlog::level::debug))["level"], "debug");
  EXPECT_EQ(json::parse(Format("m", spdlog::level::err))["level"], "error");
  EXPECT_EQ(json::parse(Format("m", spdlog::level::critical))["level"], "critical");
}

TEST(ParseLogFormatTest, AcceptsPlainAndJsonOnly) {
  LogFormat format = LogFormat::kPlain;
  EXPECT_TRUE(ParseLogFormat("json", &format).ok());
  EXPECT_EQ(format, LogFormat::kJson);
  EXPECT_TRUE(ParseLogFormat("plain", &format).ok());
  EXPECT_EQ(format, LogFormat::kPlain);
  const Status bad = ParseLogFormat("JSON", &format);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--log-format"), std::string::npos);
}

}  // namespace
}  // namespace graphserve
