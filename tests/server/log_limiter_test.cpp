// LogLimiter on a fake clock: how many lines each kind and site may write per window, what the line
// after a suppression says, that kinds and sites do not share windows, the bound on sites, and exact
// counts under concurrent callers. LogLimited against a captured logger: lines below the level use
// no quota.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <thread>
#include <vector>

#include "fake_clock.h"
#include "graphserve/server/observability/log_limiter.h"

namespace graphserve {
namespace {

constexpr int64_t kSecond = 1'000'000;

// Admits `count` lines of `kind` and `site`; returns how many may be written.
int Written(LogLimiter& limiter, int count, LogKind kind = LogKind::kAuthFailure, std::string_view site = {}) {
  int written = 0;
  for (int i = 0; i < count; ++i) written += limiter.Admit(kind, site).write ? 1 : 0;
  return written;
}

TEST(LogLimiterTest, WritesTheLimitPerWindowAndCountsTheRest) {
  FakeClock clock;
  LogLimiter limiter(&clock, LogLimit{3, 10 * kSecond});
  EXPECT_EQ(Written(limiter, 3), 3);
  clock.Advance(2 * kSecond);
  EXPECT_EQ(Written(limiter, 37), 0);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kAuthFailure), 37);

  // The window opened with the first line: 10 s after it, not after the last suppressed one.
  clock.Advance(8 * kSecond - 1);
  EXPECT_FALSE(limiter.Admit(LogKind::kAuthFailure).write);
  clock.Advance(1);
  const LogLimiter::Verdict next = limiter.Admit(LogKind::kAuthFailure);
  ASSERT_TRUE(next.write);
  EXPECT_EQ(next.suppressed, 38);
  EXPECT_EQ(next.suppressed_over_us, 8 * kSecond);
  EXPECT_EQ(next.Note(), " (38 similar lines suppressed in the last 8 s)");
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kAuthFailure), 38);

  // The count was told once: the new window's other lines carry none.
  const LogLimiter::Verdict after = limiter.Admit(LogKind::kAuthFailure);
  ASSERT_TRUE(after.write);
  EXPECT_EQ(after.suppressed, 0);
  EXPECT_EQ(after.Note(), "");
}

TEST(LogLimiterTest, NoteRoundsSecondsUpAndSaysLineForOne) {
  LogLimiter::Verdict verdict;
  verdict.write = true;
  verdict.suppressed = 1;
  verdict.suppressed_over_us = 0;
  EXPECT_EQ(verdict.Note(), " (1 similar line suppressed in the last 1 s)");
  verdict.suppressed = 2;
  verdict.suppressed_over_us = 10 * kSecond + 1;
  EXPECT_EQ(verdict.Note(), " (2 similar lines suppressed in the last 11 s)");
}

TEST(LogLimiterTest, KindsAndSitesHaveWindowsOfTheirOwn) {
  FakeClock clock;
  LogLimiter limiter(&clock, LogLimit{2, 10 * kSecond});
  EXPECT_EQ(Written(limiter, 5, LogKind::kAuthFailure), 2);
  EXPECT_EQ(Written(limiter, 5, LogKind::kBatchFailure, "model_a"), 2);
  EXPECT_EQ(Written(limiter, 5, LogKind::kBatchFailure, "model_b"), 2);
  EXPECT_EQ(Written(limiter, 5, LogKind::kProtobufLibrary, "parse_context.cc:1"), 2);
  EXPECT_EQ(Written(limiter, 5, LogKind::kGrpcLibrary, "parse_context.cc:1"), 2);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kAuthFailure), 3);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kBatchFailure), 6);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kProtobufLibrary), 3);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kGrpcLibrary), 3);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kHttpLibrary), 0);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kRefusedConnection), 0);

  clock.Advance(10 * kSecond);
  // Each site reports its own count.
  EXPECT_EQ(limiter.Admit(LogKind::kBatchFailure, "model_a").suppressed, 3);
  EXPECT_EQ(limiter.Admit(LogKind::kBatchFailure, "model_b").suppressed, 3);
}

TEST(LogLimiterTest, ANewLimitStartsNewWindows) {
  FakeClock clock;
  LogLimiter limiter(&clock, LogLimit{1, 10 * kSecond});
  EXPECT_EQ(Written(limiter, 3), 1);
  limiter.SetLimit(LogLimit{2, 10 * kSecond});
  EXPECT_EQ(Written(limiter, 3), 2);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kAuthFailure), 3);
}

TEST(LogLimiterTest, ZeroLinesMeansNoLimit) {
  FakeClock clock;
  LogLimiter limiter(&clock, LogLimit{10, 10 * kSecond});
  limiter.SetLimit(LogLimit{0, 10 * kSecond});
  EXPECT_EQ(limiter.limit().lines, 0);
  EXPECT_EQ(Written(limiter, 1000), 1000);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kAuthFailure), 0);
}

TEST(LogLimiterTest, SitesPastTheBoundShareTheirKindsWindow) {
  FakeClock clock;
  LogLimiter limiter(&clock, LogLimit{1, 10 * kSecond});
  for (size_t i = 0; i < LogLimiter::kMaxSites; ++i) {
    ASSERT_TRUE(limiter.Admit(LogKind::kGrpcLibrary, "site" + std::to_string(i)).write) << i;
  }
  // Past the bound every new site lands in one window of the kind: one line, then suppression.
  EXPECT_EQ(Written(limiter, 1, LogKind::kGrpcLibrary, "new0"), 1);
  EXPECT_EQ(Written(limiter, 1, LogKind::kGrpcLibrary, "new1"), 0);
  EXPECT_EQ(Written(limiter, 1, LogKind::kGrpcLibrary, "new2"), 0);
  // Sites known before the bound keep their own windows.
  EXPECT_FALSE(limiter.Admit(LogKind::kGrpcLibrary, "site0").write);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kGrpcLibrary), 3);
}

TEST(LogLimiterTest, ConcurrentCallersGetExactCounts) {
  FakeClock clock;
  constexpr int kThreads = 4;
  constexpr int kLinesEach = 5000;
  LogLimiter limiter(&clock, LogLimit{10, 10 * kSecond});
  std::vector<int> written(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&limiter, &written, t] {
      written[t] = Written(limiter, kLinesEach, LogKind::kHttpLibrary, "format");
      // A second kind on the same threads must not disturb the first.
      Written(limiter, 10, LogKind::kProtobufLibrary);
    });
  }
  for (std::thread& thread : threads) thread.join();
  int total_written = 0;
  for (int count : written) total_written += count;
  EXPECT_EQ(total_written, 10);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kHttpLibrary), kThreads * kLinesEach - 10);
  EXPECT_EQ(limiter.SuppressedTotal(LogKind::kProtobufLibrary), kThreads * 10 - 10);
  clock.Advance(10 * kSecond);
  EXPECT_EQ(limiter.Admit(LogKind::kHttpLibrary, "format").suppressed, kThreads * kLinesEach - 10);
}

TEST(LogKindTest, EveryKindHasADistinctLabel) {
  std::vector<std::string> labels;
  for (LogKind kind : kLogKinds) labels.emplace_back(LogKindLabel(kind));
  EXPECT_EQ(labels, (std::vector<std::string>{"auth_failure", "refused_connection", "batch_failure",
                                              "libmicrohttpd", "grpc", "protobuf"}));
}

// The process's limiter behind LogLimited, on a logger that writes to a string.
class LogLimitedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>(
        "captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured_));
    logger->set_pattern("%l %v");
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
    // A window no test outlasts, so that only the counts decide.
    ClientLogLimiter().SetLimit(LogLimit{2, 3600 * kSecond});
  }
  void TearDown() override {
    spdlog::set_default_logger(previous_);
    ClientLogLimiter().SetLimit(LogLimit{});
  }

  std::ostringstream captured_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(LogLimitedTest, WritesTheLimitAndLinesBelowTheLevelUseNoQuota) {
  const int64_t before = ClientLogLimiter().SuppressedTotal(LogKind::kBatchFailure);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(LogLimited(LogKind::kBatchFailure, "level_test", spdlog::level::debug, "debug {}", i));
  }
  EXPECT_EQ(ClientLogLimiter().SuppressedTotal(LogKind::kBatchFailure), before);
  EXPECT_TRUE(LogLimited(LogKind::kBatchFailure, "level_test", spdlog::level::err, "failure {}", 1));
  EXPECT_TRUE(LogLimited(LogKind::kBatchFailure, "level_test", spdlog::level::err, "failure {}", 2));
  EXPECT_FALSE(LogLimited(LogKind::kBatchFailure, "level_test", spdlog::level::err, "failure {}", 3));
  EXPECT_EQ(captured_.str(), "error failure 1\nerror failure 2\n");
  EXPECT_EQ(ClientLogLimiter().SuppressedTotal(LogKind::kBatchFailure), before + 1);
}

}  // namespace
}  // namespace graphserve
