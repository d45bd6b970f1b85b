// SpinSlots: no more threads hold a slot at once than it has, and a slot given back can be taken.
#include "graphserve/server/grpc/spin_slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace graphserve {
namespace {

TEST(SpinSlotsTest, TakesUpToItsSlotsAndAGivenSlotAgain) {
  SpinSlots slots(2);
  EXPECT_TRUE(slots.TryTake());
  EXPECT_TRUE(slots.TryTake());
  EXPECT_FALSE(slots.TryTake());
  slots.Give();
  EXPECT_TRUE(slots.TryTake());
  EXPECT_FALSE(slots.TryTake());
}

TEST(SpinSlotsTest, ConcurrentHoldersNeverExceedTheSlots) {
  constexpr int kSlots = 2;
  SpinSlots slots(kSlots);
  std::atomic<int> holding{0};
  std::atomic<int> most_holding{0};
  std::atomic<int> taken{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (!slots.TryTake()) continue;
        taken.fetch_add(1);
        const int now = holding.fetch_add(1) + 1;
        int most = most_holding.load();
        while (now > most && !most_holding.compare_exchange_weak(most, now)) {
        }
        holding.fetch_sub(1);
        slots.Give();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_GT(taken.load(), 0);
  EXPECT_LE(most_holding.load(), kSlots);
  // Every slot came back: all of them can be taken again, and no more.
  for (int i = 0; i < kSlots; ++i) EXPECT_TRUE(slots.TryTake());
  EXPECT_FALSE(slots.TryTake());
}

}  // namespace
}  // namespace graphserve
