#pragma once
// A Clock that moves only when a test moves it, so that batching decisions and the scheduler's
// waits for them are tested exactly, without sleeps. Thread safety: every method may be called from
// any thread. Lifetime: the condition variable and mutex of a thread waiting in WaitUntil must
// outlive any Set or Advance that may run while it waits (a test moves the clock only while the
// scheduler it drives exists).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <mutex>
#include <vector>

#include "graphserve/server/common/clock.h"

namespace graphserve {

class FakeClock : public Clock {
 public:
  int64_t NowMicros() const override {
    std::lock_guard<std::mutex> guard(mutex_);
    return now_us_;
  }

  // Moves the clock to `now_us` and wakes the waiters whose deadline it reaches.
  void Set(int64_t now_us) {
    std::vector<Waiter> due;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      now_us_ = now_us;
      for (const Waiter& waiter : waiters_) {
        if (waiter.deadline_us <= now_us_) due.push_back(waiter);
      }
    }
    // Notified under the waiter's own mutex: a waiter that registered before the clock moved holds
    // it until it is inside its wait, so the notification cannot fall before the wait.
    for (const Waiter& waiter : due) {
      std::lock_guard<std::mutex> guard(*waiter.mutex);
      waiter.condition->notify_all();
    }
  }
  void Advance(int64_t micros) {
    int64_t now_us;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      now_us = now_us_ + micros;
    }
    Set(now_us);
  }

  void WaitUntil(std::condition_variable& condition, std::unique_lock<std::mutex>& lock,
                 int64_t deadline_us) const override {
    std::list<Waiter>::iterator registered;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (now_us_ >= deadline_us) return;
      registered = waiters_.insert(waiters_.end(), Waiter{&condition, lock.mutex(), deadline_us});
      waiters_changed_.notify_all();
    }
    condition.wait(lock);
    std::lock_guard<std::mutex> guard(mutex_);
    waiters_.erase(registered);
  }

  // Waits (on the real clock, generously) until `count` threads wait in WaitUntil: a test's way to
  // know that a worker has gone to sleep until some time. False on timeout.
  bool WaitForWaiters(size_t count) const {
    std::unique_lock<std::mutex> lock(mutex_);
    return waiters_changed_.wait_for(lock, std::chrono::seconds(30),
                                     [&] { return waiters_.size() >= count; });
  }
  // The earliest deadline a thread waits for; -1 when none waits.
  int64_t EarliestWaiterDeadline() const {
    std::lock_guard<std::mutex> guard(mutex_);
    int64_t earliest = -1;
    for (const Waiter& waiter : waiters_) {
      if (earliest < 0 || waiter.deadline_us < earliest) earliest = waiter.deadline_us;
    }
    return earliest;
  }

 private:
  struct Waiter {
    std::condition_variable* condition;
    std::mutex* mutex;
    int64_t deadline_us;
  };

  mutable std::mutex mutex_;
  mutable std::condition_variable waiters_changed_;
  int64_t now_us_ = 0;
  mutable std::list<Waiter> waiters_;
};

}  // namespace graphserve
