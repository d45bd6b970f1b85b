// WarmupReporter: a progress line per interval with a time-left estimate, none for a short warm-up,
// and a bar that never sits in front of a log line and is gone once warm-up ends.
#include "graphserve/server/repository/warmup_reporter.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_clock.h"

namespace graphserve {
namespace {

constexpr int64_t kSecondUs = 1'000'000;

struct Recorded {
  std::vector<std::string> lines;
  std::vector<std::string> bar_draws;
  // Log lines and bar draws in the order they came, "log:" or "bar:" before each.
  std::vector<std::string> sequence;
};

std::unique_ptr<WarmupReporter> MakeReporter(const FakeClock* clock, Recorded* recorded, bool with_bar) {
  WarmupReporter::Options options;
  options.log_interval = std::chrono::seconds(5);
  if (with_bar) {
    options.bar = [recorded](const std::string& text) {
      recorded->bar_draws.push_back(text);
      recorded->sequence.push_back("bar:" + text);
    };
  }
  return std::make_unique<WarmupReporter>(
      "model 'bert' instance 0 on cpu", clock,
      [recorded](const std::string& line) {
        recorded->lines.push_back(line);
        recorded->sequence.push_back("log:" + line);
      },
      options);
}

TEST(WarmupReporterTest, LogsAtMostOneLinePerIntervalWithTheTimeLeft) {
  FakeClock clock;
  Recorded recorded;
  auto reporter = MakeReporter(&clock, &recorded, /*with_bar=*/false);
  clock.Set(2 * kSecondUs);
  reporter->Report({WarmupStage::kWarmingUp, 1, 40});
  EXPECT_TRUE(recorded.lines.empty());  // under the interval: a short warm-up says nothing
  clock.Set(6 * kSecondUs);
  reporter->Report({WarmupStage::kWarmingUp, 12, 40});
  // 6 s for 12 buckets: 28 more take ~14 s.
  ASSERT_EQ(recorded.lines.size(), 1u);
  EXPECT_EQ(recorded.lines[0], "model 'bert' instance 0 on cpu: warming up 12/40 buckets, ~14 s left");
  clock.Set(10 * kSecondUs);
  reporter->Report({WarmupStage::kWarmingUp, 20, 40});
  EXPECT_EQ(recorded.lines.size(), 1u);  // 4 s after the last line
  clock.Set(11 * kSecondUs);
  reporter->Report({WarmupStage::kWarmingUp, 22, 40});
  ASSERT_EQ(recorded.lines.size(), 2u);
  EXPECT_EQ(recorded.lines[1], "model 'bert' instance 0 on cpu: warming up 22/40 buckets, ~9 s left");
}

TEST(WarmupReporterTest, LongWaitsReadInMinutesAndTheLastBucketLogsNothing) {
  FakeClock clock;
  Recorded recorded;
  auto reporter = MakeReporter(&clock, &recorded, /*with_bar=*/false);
  clock.Set(30 * kSecondUs);
  reporter->Report({WarmupStage::kCapturing, 1, 284});  // a new stage starts its own clock
  clock.Set(60 * kSecondUs);
  reporter->Report({WarmupStage::kCapturing, 10, 284});
  // 30 s for 10 graphs: 274 more take 822 s, ~14 min.
  ASSERT_EQ(recorded.lines.size(), 1u);
  EXPECT_EQ(recorded.lines[0], "model 'bert' instance 0 on cpu: capturing 10/284 buckets, ~14 min left");
  clock.Set(900 * kSecondUs);
  reporter->Report({WarmupStage::kCapturing, 284, 284});
  EXPECT_EQ(recorded.lines.size(), 1u);  // the executor's own summary says it is done
}

TEST(WarmupReporterTest, TheBarIsClearedBeforeEachLogLineAndAtTheEnd) {
  FakeClock clock;
  Recorded recorded;
  {
    auto reporter = MakeReporter(&clock, &recorded, /*with_bar=*/true);
    clock.Set(1 * kSecondUs);
    reporter->Report({WarmupStage::kWarmingUp, 1, 4});
    ASSERT_EQ(recorded.bar_draws.size(), 1u);
    EXPECT_EQ(recorded.bar_draws[0],
              "\r\x1b[K[######..................] model 'bert' instance 0 on cpu: warming up 1/4 buckets, ~3 "
              "s left");
    clock.Set(6 * kSecondUs);
    reporter->Report({WarmupStage::kWarmingUp, 2, 4});
    ASSERT_EQ(recorded.sequence.size(), 4u);
    EXPECT_EQ(recorded.sequence[1], "bar:\r\x1b[K");  // cleared first
    EXPECT_EQ(recorded.sequence[2], "log:model 'bert' instance 0 on cpu: warming up 2/4 buckets, ~6 s left");
    EXPECT_EQ(
        recorded.sequence[3],  // then drawn again, half full
        "bar:\r\x1b[K[############............] model 'bert' instance 0 on cpu: warming up 2/4 buckets, "
        "~6 s left");
    clock.Set(7 * kSecondUs);
    reporter->Report({WarmupStage::kWarmingUp, 3, 4});
  }
  // Destroyed mid-way (a failed warm-up): the bar does not stay on the terminal.
  EXPECT_EQ(recorded.sequence.back(), "bar:\r\x1b[K");
  EXPECT_EQ(recorded.lines.size(), 1u);
}

TEST(WarmupReporterTest, TheLastBucketClearsTheBarOnce) {
  FakeClock clock;
  Recorded recorded;
  {
    auto reporter = MakeReporter(&clock, &recorded, /*with_bar=*/true);
    reporter->Report({WarmupStage::kWarmingUp, 1, 2});
    reporter->Report({WarmupStage::kWarmingUp, 2, 2});
    EXPECT_EQ(recorded.sequence.back(), "bar:\r\x1b[K");
  }
  EXPECT_EQ(recorded.bar_draws.size(), 2u);  // one draw, one clear: nothing more at destruction
}

}  // namespace
}  // namespace graphserve
