// Triton's LogSettings and TraceSetting RPCs: Triton's level switches map onto spdlog's threshold and
// back, updates apply all or nothing, formats really change the lines written, and tracing can only
// stay off.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "graphserve/server/observability/log_settings.h"
#include "graphserve/server/observability/logging.h"
#include "graphserve/server/observability/trace_settings.h"

namespace graphserve {
namespace {

using Levels = TritonLogLevels;
using spdlog::level::level_enum;

// Every test starts from a default logger at info, in the plain format, writing into `lines_`.
class LogSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_);
    auto logger = std::make_shared<spdlog::logger>("log_settings_test", sink);
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
    SetLogFormat(LogFormat::kPlain);
  }

  Status Update(const std::map<std::string, inference::LogSettingsRequest::SettingValue>& settings,
                inference::LogSettingsResponse* response) {
    inference::LogSettingsRequest request;
    for (const auto& [key, value] : settings) (*request.mutable_settings())[key] = value;
    return UpdateLogSettings(request, response);
  }

  std::ostringstream lines_;
};

inference::LogSettingsRequest::SettingValue Bool(bool value) {
  inference::LogSettingsRequest::SettingValue setting;
  setting.set_bool_param(value);
  return setting;
}
inference::LogSettingsRequest::SettingValue Uint(uint32_t value) {
  inference::LogSettingsRequest::SettingValue setting;
  setting.set_uint32_param(value);
  return setting;
}
inference::LogSettingsRequest::SettingValue Text(const std::string& value) {
  inference::LogSettingsRequest::SettingValue setting;
  setting.set_string_param(value);
  return setting;
}

TEST(TritonLogLevelsTest, EachThresholdReadsAsTritonsSwitchesAndBack) {
  const std::pair<level_enum, Levels> table[] = {
      {spdlog::level::trace, {true, true, true, 2}}, {spdlog::level::debug, {true, true, true, 1}},
      {spdlog::level::info, {true, true, true, 0}},  {spdlog::level::warn, {false, true, true, 0}},
      {spdlog::level::err, {false, false, true, 0}}, {spdlog::level::off, {false, false, false, 0}},
  };
  for (const auto& [level, levels] : table) {
    EXPECT_TRUE(TritonLevelsOf(level) == levels) << spdlog::level::to_string_view(level).data();
    level_enum back = spdlog::level::critical;
    ASSERT_TRUE(SpdlogLevelFor(levels, &back).ok());
    EXPECT_EQ(back, level);
  }
  level_enum level = spdlog::level::info;
  ASSERT_TRUE(SpdlogLevelFor(Levels{true, true, true, 7}, &level).ok());
  EXPECT_EQ(level, spdlog::level::trace);
}

TEST(TritonLogLevelsTest, ASeverityOffBelowALesserOneOnIsRefusedNamingTheSetting) {
  level_enum level = spdlog::level::info;
  const std::pair<Levels, const char*> refused[] = {
      {{true, false, true, 0}, "settings['log_warning']"},
      {{false, true, false, 0}, "settings['log_error']"},
      {{false, false, true, 1}, "settings['log_info']"},
  };
  for (const auto& [levels, field] : refused) {
    const Status status = SpdlogLevelFor(levels, &level);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_EQ(status.message().rfind(field, 0), 0u) << status.message();
  }
  EXPECT_EQ(level, spdlog::level::info);
}

TEST_F(LogSettingsTest, AReadAnswersEveryTritonKeyWithItsEffectiveValue) {
  inference::LogSettingsResponse response;
  ASSERT_TRUE(Update({}, &response).ok());
  const auto& settings = response.settings();
  ASSERT_EQ(settings.size(), 6u);
  EXPECT_TRUE(settings.at("log_info").bool_param());
  EXPECT_TRUE(settings.at("log_warning").bool_param());
  EXPECT_TRUE(settings.at("log_error").bool_param());
  EXPECT_EQ(settings.at("log_verbose_level").uint32_param(), 0u);
  EXPECT_EQ(settings.at("log_format").string_param(), "ISO8601");
  EXPECT_EQ(settings.at("log_file").string_param(), "");
}

TEST_F(LogSettingsTest, LevelUpdatesMoveTheThreshold) {
  inference::LogSettingsResponse response;
  ASSERT_TRUE(Update({{"log_verbose_level", Uint(1)}}, &response).ok());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::debug);
  EXPECT_EQ(response.settings().at("log_verbose_level").uint32_param(), 1u);
  spdlog::debug("a verbose line");
  EXPECT_NE(lines_.str().find("a verbose line"), std::string::npos);

  response.Clear();
  ASSERT_TRUE(Update({{"log_verbose_level", Uint(0)}, {"log_info", Bool(false)}}, &response).ok());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::warn);
  EXPECT_FALSE(response.settings().at("log_info").bool_param());
  EXPECT_TRUE(response.settings().at("log_warning").bool_param());
  spdlog::info("an info line");
  EXPECT_EQ(lines_.str().find("an info line"), std::string::npos);

  // The file that is already the log's (stdout's "") is accepted as it is.
  ASSERT_TRUE(Update({{"log_file", Text("")}}, &response).ok());
}

TEST_F(LogSettingsTest, WhatCannotBeAppliedIsRefusedByNameAndNothingChanges) {
  struct Case {
    const char* key;
    inference::LogSettingsRequest::SettingValue value;
    StatusCode code;
    const char* expected;
  };
  const Case cases[] = {
      {"log_file", Text("/var/log/graphserve.log"), StatusCode::kUnimplemented,
       "settings['log_file']: graphserve logs to stdout only"},
      {"log_colour", Bool(true), StatusCode::kInvalidArgument,
       "settings['log_colour']: unknown log setting"},
      {"log_info", Uint(1), StatusCode::kInvalidArgument, "settings['log_info']: expected a bool_param"},
      {"log_verbose_level", Bool(true), StatusCode::kInvalidArgument,
       "settings['log_verbose_level']: expected a uint32_param"},
      {"log_error", inference::LogSettingsRequest::SettingValue(), StatusCode::kInvalidArgument,
       "settings['log_error']: no value given"},
      {"log_format", Text("XML"), StatusCode::kInvalidArgument,
       "settings['log_format']: unknown format 'XML'"},
      {"log_warning", Bool(false), StatusCode::kInvalidArgument, "settings['log_warning']"},
  };
  for (const Case& c : cases) {
    inference::LogSettingsResponse response;
    // Each bad setting comes with good ones that must not take effect either.
    const Status status = Update(
        {{c.key, c.value}, {"log_verbose_level", Uint(2)}, {"log_format", Text("default")}}, &response);
    EXPECT_EQ(status.code(), c.code) << c.key;
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status.message();
    EXPECT_EQ(response.settings_size(), 0);
    EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::info) << c.key;
    EXPECT_EQ(CurrentLogFormat(), LogFormat::kPlain) << c.key;
  }
}

TEST_F(LogSettingsTest, FormatsChangeTheLinesWritten) {
  inference::LogSettingsResponse response;
  ASSERT_TRUE(Update({{"log_format", Text("default")}}, &response).ok());
  EXPECT_EQ(response.settings().at("log_format").string_param(), "default");
  spdlog::warn("glog style");
  // Triton's default format: severity letter, month and day, time, thread, "] ".
  EXPECT_TRUE(std::regex_search(lines_.str(), std::regex(R"(^W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+\] glog style\n$)")))
      << lines_.str();

  lines_.str("");
  ASSERT_TRUE(Update({{"log_format", Text("json")}}, &response).ok());
  spdlog::warn("as json");
  const nlohmann::json record = nlohmann::json::parse(lines_.str());
  EXPECT_EQ(record["message"], "as json");
  EXPECT_EQ(record["level"], "warning");

  lines_.str("");
  ASSERT_TRUE(Update({{"log_format", Text("ISO8601")}}, &response).ok());
  EXPECT_EQ(CurrentLogFormat(), LogFormat::kPlain);
  spdlog::warn("plain again");
  EXPECT_TRUE(std::regex_search(lines_.str(),
                                std::regex(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\S* warning \[\d+\] plain again)")))
      << lines_.str();
}

// TraceSetting

Status UpdateTrace(const std::map<std::string, std::vector<std::string>>& settings,
                   inference::TraceSettingResponse* response) {
  inference::TraceSettingRequest request;
  for (const auto& [key, values] : settings) {
    auto& value = (*request.mutable_settings())[key];
    for (const std::string& v : values) value.add_value(v);
  }
  return UpdateTraceSettings(request, response);
}

TEST(TraceSettingsTest, AReadAnswersTritonsKeysWithTracingOff) {
  inference::TraceSettingResponse response;
  ASSERT_TRUE(UpdateTrace({}, &response).ok());
  const auto& settings = response.settings();
  auto only = [&](const std::string& key) {
    EXPECT_EQ(settings.at(key).value_size(), 1) << key;
    return settings.at(key).value(0);
  };
  EXPECT_EQ(only("trace_level"), "OFF");
  EXPECT_EQ(only("trace_rate"), "1000");
  EXPECT_EQ(only("trace_count"), "-1");
  EXPECT_EQ(only("log_frequency"), "0");
  EXPECT_EQ(only("trace_mode"), "triton");
}

TEST(TraceSettingsTest, TracingOffAndResetsSucceedAnythingThatWouldTraceIsUnimplemented) {
  inference::TraceSettingResponse response;
  EXPECT_TRUE(UpdateTrace({{"trace_level", {"OFF"}}, {"trace_rate", {}}}, &response).ok());
  EXPECT_EQ(response.settings().at("trace_level").value(0), "OFF");

  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"trace_level", "TIMESTAMPS"}, {"trace_rate", "1"}, {"trace_mode", "opentelemetry"}}) {
    inference::TraceSettingResponse refused;
    const Status status = UpdateTrace({{key, {value}}}, &refused);
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << key;
    EXPECT_NE(status.message().find("settings['" + key + "']"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("does not trace requests"), std::string::npos);
    EXPECT_NE(status.message().find("ModelStatistics and on /metrics"), std::string::npos);
    EXPECT_EQ(refused.settings_size(), 0);
  }
  const Status unknown = UpdateTrace({{"trace_file", {"/tmp/trace.json"}}}, &response);
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("settings['trace_file']: unknown trace setting"), std::string::npos);
}

}  // namespace
}  // namespace graphserve
