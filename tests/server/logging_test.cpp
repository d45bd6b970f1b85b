// JsonLogFormatter and ParseLogFormat: every record is one line of valid JSON whose message reads back
// exactly, whatever characters it holds. SetupLogging's bridges: libprotobuf's and gRPC's lines reach
// spdlog (none on stderr), rate-limited per source line.
#include <grpc/support/log.h>
#include <gtest/gtest.h>
#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "graphserve/server/observability/json_log_formatter.h"
#include "graphserve/server/observability/log_limiter.h"
#include "graphserve/server/observability/logging.h"
#include "grpc_service.pb.h"

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

// SetupLogging's bridges, with the default logger swapped for one that writes JSON lines to a string.
class LibraryLogTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(SetupLogging("info", LogFormat::kJson, LogLimit{2, int64_t{3600} * 1'000'000}).ok());
    // What grpc_init does first: until then gRPC writes no line at all.
    gpr_log_verbosity_init();
  }
  void SetUp() override {
    auto logger = std::make_shared<spdlog::logger>(
        "graphserve", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured_));
    logger->set_formatter(std::make_unique<JsonLogFormatter>());
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }

  // The captured lines, each parsed; a line that is not JSON fails the test.
  std::vector<json> Records() const {
    std::vector<json> records;
    std::istringstream lines(captured_.str());
    std::string line;
    while (std::getline(lines, line)) {
      try {
        records.push_back(json::parse(line));
      } catch (const json::exception& error) {
        ADD_FAILURE() << "not JSON (" << error.what() << "): " << line;
      }
    }
    return records;
  }

  std::ostringstream captured_;
};

TEST_F(LibraryLogTest, ProtobufLinesBecomeJsonRecordsRateLimitedPerSourceLine) {
  // A string field that is not UTF-8: what a client can send in every request.
  const std::string not_utf8("\x0a\x02\xff\xfe", 4);  // field 1 (model_name), 2 bytes
  const int64_t suppressed_before = ClientLogLimiter().SuppressedTotal(LogKind::kProtobufLibrary);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    inference::ModelInferRequest request;
    EXPECT_FALSE(request.ParseFromString(not_utf8));
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");

  const std::vector<json> records = Records();
  ASSERT_EQ(records.size(), 2u) << captured_.str();
  for (const json& record : records) {
    EXPECT_EQ(record["level"], "error");
    const std::string message = record["message"];
    EXPECT_EQ(message.rfind("protobuf: String field 'inference.ModelInferRequest.model_name' contains invalid "
                            "UTF-8 data when parsing",
                            0),
              0u)
        << message;
    // libprotobuf's trailing space is gone, and its source line follows.
    EXPECT_NE(message.find("raw bytes. (google/protobuf/"), std::string::npos) << message;
  }
  EXPECT_EQ(ClientLogLimiter().SuppressedTotal(LogKind::kProtobufLibrary), suppressed_before + 3);
}

TEST_F(LibraryLogTest, GrpcLinesAreRateLimitedPerSourceLine) {
  const int64_t suppressed_before = ClientLogLimiter().SuppressedTotal(LogKind::kGrpcLibrary);
  for (int i = 0; i < 4; ++i) gpr_log("fake_grpc_file.cc", 7, GPR_LOG_SEVERITY_ERROR, "handshake %d failed", i);
  gpr_log("fake_grpc_file.cc", 8, GPR_LOG_SEVERITY_ERROR, "another line");
  const std::vector<json> records = Records();
  ASSERT_EQ(records.size(), 3u) << captured_.str();
  EXPECT_EQ(records[0]["message"], "grpc: handshake 0 failed (fake_grpc_file.cc:7)");
  EXPECT_EQ(records[1]["message"], "grpc: handshake 1 failed (fake_grpc_file.cc:7)");
  EXPECT_EQ(records[2]["message"], "grpc: another line (fake_grpc_file.cc:8)");
  EXPECT_EQ(ClientLogLimiter().SuppressedTotal(LogKind::kGrpcLibrary), suppressed_before + 2);
}

}  // namespace
}  // namespace graphserve
