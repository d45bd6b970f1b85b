#pragma once
// Time as the scheduler sees it, injected so that batching decisions are tested exactly, without
// sleeps: the scheduler both reads the time and waits for it through a Clock, so that a test clock
// (tests/server/fake_clock.h) decides when a waiting worker's time has come. Thread safety:
// implementations must be safe to call from any thread. Errors: none.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace graphserve {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds on a monotonic clock.
  virtual int64_t NowMicros() const = 0;
  // Waits on `condition` with `lock` (which must be locked, and is again on return) until it is
  // notified or NowMicros() reaches `deadline_us`. May return early, like any condition variable
  // wait, so callers look again at what they wait for.
  virtual void WaitUntil(std::condition_variable& condition, std::unique_lock<std::mutex>& lock,
                         int64_t deadline_us) const = 0;
};

// std::chrono::steady_clock.
class SteadyClock : public Clock {
 public:
  int64_t NowMicros() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void WaitUntil(std::condition_variable& condition, std::unique_lock<std::mutex>& lock,
                 int64_t deadline_us) const override {
    const int64_t remaining_us = std::max<int64_t>(deadline_us - NowMicros(), 0);
    condition.wait_for(lock, std::chrono::microseconds(remaining_us));
  }
};

}  // namespace graphserve
