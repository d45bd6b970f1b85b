// Triton's LogSettings and TraceSetting RPCs: Triton's level switches map onto spdlog's threshold and
// back, updates apply all or nothing, and formats really change the lines written; trace settings
// sample by rate and count, per model over the global ones, and refuse what graphserve does not trace.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "graphserve/server/observability/log_settings.h"
#include "graphserve/server/observability/logging.h"
#include "graphserve/server/observability/trace_settings.h"
#include "grpc_service.pb.h"

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

using Settings = std::map<std::string, std::vector<std::string>>;

TraceConfig WithFile() {
  TraceConfig config;
  config.file = "/operator/trace.json";
  return config;
}

Status UpdateTrace(TraceSettings& traces, const Settings& settings, inference::TraceSettingResponse* response,
                   const std::string& model = "") {
  inference::TraceSettingRequest request;
  request.set_model_name(model);
  for (const auto& [key, values] : settings) {
    auto& value = (*request.mutable_settings())[key];
    for (const std::string& v : values) value.add_value(v);
  }
  return traces.Update(request, response);
}

// The settings in force, one value per key (trace_level's first).
std::map<std::string, std::string> Read(TraceSettings& traces, const std::string& model = "") {
  inference::TraceSettingResponse response;
  EXPECT_TRUE(UpdateTrace(traces, {}, &response, model).ok());
  std::map<std::string, std::string> read;
  for (const auto& [key, value] : response.settings()) {
    EXPECT_EQ(value.value_size(), 1) << key;
    read[key] = value.value(0);
  }
  return read;
}

// Which of `requests` requests to `model` are sampled (1-based).
std::vector<int> Sampled(TraceSettings& traces, const std::string& model, int requests) {
  std::vector<int> sampled;
  for (int i = 1; i <= requests; ++i) {
    if (traces.Sample(model)) sampled.push_back(i);
  }
  return sampled;
}

TEST(TraceSettingsTest, AReadAnswersTritonsDefaultsWithoutTheOperatorsFile) {
  TraceSettings traces(WithFile(), false);
  EXPECT_EQ(Read(traces), (std::map<std::string, std::string>{{"trace_level", "OFF"},
                                                              {"trace_rate", "1000"},
                                                              {"trace_count", "-1"},
                                                              {"log_frequency", "0"},
                                                              {"trace_mode", "triton"}}));
  EXPECT_FALSE(traces.Sample("m"));
  TraceSettings with_file(WithFile(), true);
  EXPECT_EQ(Read(with_file).at("trace_file"), "/operator/trace.json");
}

TEST(TraceSettingsTest, RateSamplesEveryNthRequestAndCountStopsTracing) {
  TraceSettings traces(WithFile(), false);
  inference::TraceSettingResponse response;
  ASSERT_TRUE(UpdateTrace(traces,
                          {{"trace_level", {"TIMESTAMPS"}},
                           {"trace_rate", {"3"}},
                           {"trace_count", {"2"}},
                           {"log_frequency", {"5"}}},
                          &response)
                  .ok());
  EXPECT_EQ(response.settings().at("trace_level").value(0), "TIMESTAMPS");
  EXPECT_EQ(Sampled(traces, "m", 3), std::vector<int>{3});
  EXPECT_FALSE(traces.Sample("m"));
  EXPECT_FALSE(traces.Sample("m"));
  const std::optional<TraceTicket> second = traces.Sample("m");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->id, 2u);
  EXPECT_EQ(second->file, "/operator/trace.json");
  EXPECT_EQ(second->log_frequency, 5);
  EXPECT_EQ(Read(traces).at("trace_count"), "0");
  EXPECT_TRUE(Sampled(traces, "m", 9).empty());  // the count is spent
  ASSERT_TRUE(UpdateTrace(traces, {{"trace_count", {"-1"}}, {"trace_rate", {"1"}}}, &response).ok());
  EXPECT_EQ(Sampled(traces, "m", 2), (std::vector<int>{1, 2}));
  ASSERT_TRUE(UpdateTrace(traces, {{"trace_level", {"OFF"}}}, &response).ok());
  EXPECT_TRUE(Sampled(traces, "m", 3).empty());
}

TEST(TraceSettingsTest, ModelSettingsOverrideTheGlobalOnesKeyByKey) {
  TraceSettings traces(WithFile(), false);
  inference::TraceSettingResponse response;
  ASSERT_TRUE(UpdateTrace(traces, {{"trace_level", {"TIMESTAMPS"}}, {"trace_rate", {"1"}}}, &response).ok());
  ASSERT_TRUE(UpdateTrace(traces, {{"trace_rate", {"2"}}}, &response, "a").ok());
  EXPECT_EQ(response.settings().at("trace_rate").value(0), "2");
  EXPECT_EQ(response.settings().at("trace_level").value(0), "TIMESTAMPS");  // the global level
  EXPECT_EQ(Read(traces).at("trace_rate"), "1");
  EXPECT_EQ(Read(traces, "b").at("trace_rate"), "1");  // a model without settings reads the global ones
  EXPECT_EQ(Sampled(traces, "a", 4), (std::vector<int>{2, 4}));
  EXPECT_EQ(Sampled(traces, "b", 2), (std::vector<int>{1, 2}));

  // A key the model does not set follows the global one; the one it sets does not.
  ASSERT_TRUE(UpdateTrace(traces, {{"trace_level", {"OFF"}}, {"trace_rate", {"5"}}}, &response).ok());
  EXPECT_EQ(Read(traces, "a").at("trace_level"), "OFF");
  EXPECT_EQ(Read(traces, "a").at("trace_rate"), "2");
  EXPECT_TRUE(Sampled(traces, "a", 4).empty());
  ASSERT_TRUE(UpdateTrace(traces, {{"trace_level", {"TIMESTAMPS"}}}, &response, "a").ok());
  EXPECT_EQ(Sampled(traces, "a", 2), std::vector<int>{2});
  EXPECT_TRUE(Sampled(traces, "b", 4).empty());  // globally off

  // Reset, every key the model set follows the global settings again.
  ASSERT_TRUE(UpdateTrace(traces, {{"trace_level", {}}, {"trace_rate", {}}}, &response, "a").ok());
  EXPECT_EQ(Read(traces, "a"), Read(traces));
  // A global reset goes back to what the server started with.
  ASSERT_TRUE(UpdateTrace(traces, {{"trace_rate", {}}}, &response).ok());
  EXPECT_EQ(Read(traces).at("trace_rate"), "1000");
}

TEST(TraceSettingsTest, RefusalsNameTheSettingAndChangeNothing) {
  TraceSettings traces(TraceConfig{}, false);
  const std::map<std::string, std::string> before = Read(traces);
  struct Refusal {
    Settings settings;
    StatusCode code;
    std::string says;
  };
  const Refusal refusals[] = {
      {{{"trace_level", {"TIMESTAMPS"}}},
       StatusCode::kFailedPrecondition,
       "settings['trace_level']: no trace file"},
      {{{"trace_level", {"TENSORS"}}}, StatusCode::kUnimplemented, "'TENSORS' is not supported"},
      {{{"trace_level", {"OFF", "TIMESTAMPS"}}}, StatusCode::kInvalidArgument, "OFF cannot be given"},
      {{{"trace_level", {"LOUD"}}}, StatusCode::kInvalidArgument, "'LOUD' is not a trace level"},
      {{{"trace_mode", {"opentelemetry"}}},
       StatusCode::kUnimplemented,
       "no maintained OpenTelemetry C++ SDK"},
      {{{"trace_file", {"/etc/passwd"}}},
       StatusCode::kFailedPrecondition,
       "settings['trace_file']: clients may not"},
      {{{"trace_rate", {"0"}}, {"trace_count", {"3"}}},
       StatusCode::kInvalidArgument,
       "settings['trace_rate']: '0' is not a whole number from 1"},
      {{{"trace_count", {"-2"}}}, StatusCode::kInvalidArgument, "settings['trace_count']"},
      {{{"log_frequency", {"1", "2"}}}, StatusCode::kInvalidArgument, "expected one value, got 2"},
      {{{"trace_rate", {"12x"}}}, StatusCode::kInvalidArgument, "'12x'"},
      {{{"trace_colour", {"red"}}},
       StatusCode::kInvalidArgument,
       "settings['trace_colour']: unknown trace setting"},
  };
  for (const Refusal& refusal : refusals) {
    inference::TraceSettingResponse response;
    const Status status = UpdateTrace(traces, refusal.settings, &response);
    EXPECT_EQ(status.code(), refusal.code) << status.message();
    EXPECT_NE(status.message().find(refusal.says), std::string::npos) << status.message();
    EXPECT_EQ(response.settings_size(), 0);
  }
  EXPECT_EQ(Read(traces), before);

  TraceSettings allowed(TraceConfig{}, true);
  inference::TraceSettingResponse response;
  ASSERT_TRUE(
      UpdateTrace(allowed, {{"trace_file", {"/client/t.json"}}, {"trace_level", {"TIMESTAMPS"}}}, &response)
          .ok());
  EXPECT_EQ(response.settings().at("trace_file").value(0), "/client/t.json");
}

TEST(TraceSettingsTest, TraceConfigFlagsTakeTritonsSpelling) {
  TraceConfig config;
  for (const char* flag : {"triton,file=/tmp/t.json", "triton,log-frequency=50", "rate=100",
                           "level=timestamps", "count=7", "mode=triton"}) {
    ASSERT_TRUE(ApplyTraceConfigFlag(flag, &config).ok()) << flag;
  }
  EXPECT_EQ(config.file, "/tmp/t.json");
  EXPECT_EQ(config.log_frequency, 50);
  EXPECT_EQ(config.rate, 100);
  EXPECT_TRUE(config.timestamps);
  EXPECT_EQ(config.count, 7);
  const std::pair<const char*, const char*> refused[] = {
      {"opentelemetry,url=localhost:4318", "no maintained OpenTelemetry C++ SDK"},
      {"mode=opentelemetry", "no maintained OpenTelemetry C++ SDK"},
      {"level=TENSORS", "'TENSORS' is not supported"},
      {"file=/tmp/t.json", "write it triton,file=VALUE"},
      {"triton,rate=3", "'rate' takes no mode"},
      {"rate=0", "'0' is not a whole number from 1"},
      {"rate", "expected [triton,]SETTING=VALUE"},
      {"jaeger,file=x", "'jaeger' is not a trace mode"},
      {"colour=red", "unknown setting"},
  };
  for (const auto& [flag, says] : refused) {
    const Status status = ApplyTraceConfigFlag(flag, &config);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(status.message().find(std::string("--trace-config ") + flag + ": "), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find(says), std::string::npos) << status.message();
  }
}

}  // namespace
}  // namespace graphserve
