#include "graphserve/server/repository/warmup_reporter.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "graphserve/server/observability/logging.h"

namespace graphserve {
namespace {

constexpr int kBarWidth = 24;
// From here on the time left reads in minutes: seconds would be false precision.
constexpr int64_t kMinutesFromUs = 120'000'000;
// Returns to the start of the line and clears it (the previous draw may have been longer).
constexpr const char* kClearLine = "\r\x1b[K";

std::string TimeLeft(int64_t remaining_us) {
  if (remaining_us >= kMinutesFromUs)
    return "~" + std::to_string((remaining_us + 30'000'000) / 60'000'000) + " min left";
  return "~" + std::to_string((remaining_us + 999'999) / 1'000'000) + " s left";
}

}  // namespace

WarmupReporter::WarmupReporter(std::string subject, const Clock* clock, Sink log, Options options)
    : subject_(std::move(subject)), clock_(clock), log_(std::move(log)), options_(std::move(options)) {
  stage_start_us_ = clock_->NowMicros();
  last_line_us_ = stage_start_us_;
}

WarmupReporter::~WarmupReporter() { ClearBar(); }

std::string WarmupReporter::Describe(const std::string& subject, const WarmupProgress& progress,
                                     int64_t remaining_us) {
  std::string line = subject + ": " + WarmupStageName(progress.stage) + " " + std::to_string(progress.done) +
                     "/" + std::to_string(progress.total) + " buckets";
  if (remaining_us >= 0) line += ", " + TimeLeft(remaining_us);
  return line;
}

void WarmupReporter::Report(const WarmupProgress& progress) {
  const int64_t now_us = clock_->NowMicros();
  if (progress.stage != stage_) {
    // The previous stage ended with its last report: this one started then.
    stage_ = progress.stage;
    stage_start_us_ = last_line_us_ = now_us;
  }
  if (progress.done <= 0 || progress.total <= 0) return;
  // Buckets differ in cost (largest first on CUDA, smallest first on a CPU): the mean so far is a
  // rough guide, which the "~" says.
  const int64_t remaining_us = (now_us - stage_start_us_) * (progress.total - progress.done) / progress.done;
  const std::string line = Describe(subject_, progress, remaining_us);
  const bool finished = progress.done >= progress.total;
  if (!finished && now_us - last_line_us_ >= options_.log_interval.count()) {
    ClearBar();  // the line would otherwise start after the bar
    log_(line);
    last_line_us_ = now_us;
  }
  if (!options_.bar) return;
  if (finished) {
    ClearBar();
    return;
  }
  options_.bar(Bar(line, progress));
  bar_shown_ = true;
}

std::string WarmupReporter::Bar(const std::string& line, const WarmupProgress& progress) const {
  const int filled = static_cast<int>(static_cast<int64_t>(kBarWidth) * progress.done / progress.total);
  return std::string(kClearLine) + "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '.') +
         "] " + line;
}

void WarmupReporter::ClearBar() {
  if (!bar_shown_) return;
  options_.bar(kClearLine);
  bar_shown_ = false;
}

std::unique_ptr<WarmupReporter> NewProcessWarmupReporter(std::string subject) {
  static const SteadyClock clock;
  WarmupReporter::Options options;
  if (isatty(STDERR_FILENO) == 1 && CurrentLogFormat() != LogFormat::kJson &&
      spdlog::default_logger()->should_log(spdlog::level::info)) {
    options.bar = [](const std::string& text) {
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    };
  }
  return std::make_unique<WarmupReporter>(
      std::move(subject), &clock, [](const std::string& line) { spdlog::info("{}", line); },
      std::move(options));
}

}  // namespace graphserve
