#pragma once
// Start-up a user can follow: turns one executor's WarmupProgress reports into a log line every few
// seconds ("model 'bert' instance 0 on cpu: warming up 12/40 buckets, ~18 s left") and, where a
// person watches, a progress bar redrawn at every bucket. A warm-up shorter than the interval logs
// no progress line at all.
//
// Not thread-safe: one reporter per warm-up, called on the thread that warms up. Lifetime: the
// clock must outlive the reporter, which clears its bar when destroyed. Errors: none.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "graphserve/engine/warmup_progress.h"
#include "graphserve/server/common/clock.h"

namespace graphserve {

class WarmupReporter {
 public:
  using Sink = std::function<void(const std::string&)>;
  struct Options {
    // At most one progress line in the log per interval.
    std::chrono::microseconds log_interval = std::chrono::seconds(5);
    // Where the bar is drawn: text that returns to the line's start and overwrites it, no newline.
    // Null: no bar.
    Sink bar;
  };

  // `subject` names what warms up ("model 'bert' instance 0 on cpu"); `log` takes each line.
  WarmupReporter(std::string subject, const Clock* clock, Sink log, Options options);
  ~WarmupReporter();

  WarmupReporter(const WarmupReporter&) = delete;
  WarmupReporter& operator=(const WarmupReporter&) = delete;

  void Report(const WarmupProgress& progress);

  // "model 'bert' on cpu: warming up 12/40 buckets, ~18 s left"; the estimate is left out when
  // `remaining_us` is negative (nothing done yet to estimate from).
  static std::string Describe(const std::string& subject, const WarmupProgress& progress,
                              int64_t remaining_us);

 private:
  std::string Bar(const std::string& line, const WarmupProgress& progress) const;
  void ClearBar();

  const std::string subject_;
  const Clock* const clock_;
  const Sink log_;
  const Options options_;
  WarmupStage stage_ = WarmupStage::kWarmingUp;
  int64_t stage_start_us_ = 0;
  int64_t last_line_us_ = 0;
  bool bar_shown_ = false;
};

// The reporter of the server process: lines to spdlog at info, and a bar on stderr only when stderr
// is a terminal and the log is text (not JSON) at info or below: a log collector would store every
// redraw.
std::unique_ptr<WarmupReporter> NewProcessWarmupReporter(std::string subject);

}  // namespace graphserve
