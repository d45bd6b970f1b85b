#pragma once
// Time as the scheduler sees it, injected so that batching decisions are tested exactly, without
// sleeps. Thread safety: implementations must be safe to call from any thread.
#include <chrono>
#include <cstdint>

namespace graphserve {

class Clock {
 public:
  virtual ~Clock() = default;
  // Microseconds on a monotonic clock.
  virtual int64_t NowMicros() const = 0;
};

// std::chrono::steady_clock.
class SteadyClock : public Clock {
 public:
  int64_t NowMicros() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace graphserve
