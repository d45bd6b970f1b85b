// CallbackPool: every posted callback runs exactly once, on the pool's own threads, in parallel;
// Drain and the destructor wait for them.
#include "graphserve/server/batching/callback_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace graphserve {
namespace {

TEST(CallbackPoolTest, EveryCallbackRunsExactlyOnceBeforeDrainReturns) {
  constexpr int kCallbacks = 5000;
  std::vector<std::atomic<int>> runs(kCallbacks);
  CallbackPool pool(3);
  for (int i = 0; i < kCallbacks; ++i) pool.Post([&runs, i] { runs[i].fetch_add(1); });
  pool.Drain();
  for (int i = 0; i < kCallbacks; ++i) ASSERT_EQ(runs[i].load(), 1) << "callback " << i;
}

TEST(CallbackPoolTest, CallbacksRunOnThePoolsThreadsInParallel) {
  CallbackPool pool(2);
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  std::set<std::thread::id> threads;
  // Each callback waits for the other: this finishes only when two run at the same time.
  for (int i = 0; i < 2; ++i) {
    pool.Post([&] {
      std::unique_lock<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
      ++arrived;
      changed.notify_all();
      changed.wait_for(lock, std::chrono::seconds(30), [&] { return arrived == 2; });
    });
  }
  pool.Drain();
  EXPECT_EQ(arrived, 2);
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

TEST(CallbackPoolTest, DestructorRunsWhatIsStillQueued) {
  std::atomic<int> runs{0};
  {
    CallbackPool pool(1);
    pool.Post([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
    for (int i = 0; i < 100; ++i) pool.Post([&runs] { runs.fetch_add(1); });
  }
  EXPECT_EQ(runs.load(), 100);
}

TEST(CallbackPoolTest, DefaultThreadsIsBetweenOneAndFour) {
  EXPECT_GE(CallbackPool::DefaultThreads(), 1);
  EXPECT_LE(CallbackPool::DefaultThreads(), 4);
}

}  // namespace
}  // namespace graphserve
