#pragma once
// A Clock that moves only when a test sets it, so that batching decisions are tested exactly.
#include <atomic>
#include <cstdint>

#include "graphserve/server/clock.h"

namespace graphserve {

class FakeClock : public Clock {
 public:
  int64_t NowMicros() const override { return now_us_.load(); }
  void Set(int64_t now_us) { now_us_.store(now_us); }

 private:
  std::atomic<int64_t> now_us_{0};
};

}  // namespace graphserve
