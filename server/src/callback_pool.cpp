#include "graphserve/server/callback_pool.h"

#include <algorithm>
#include <utility>

namespace graphserve {

CallbackPool::CallbackPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { Run(); });
}

CallbackPool::~CallbackPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

int CallbackPool::DefaultThreads() {
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4);
}

void CallbackPool::Post(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(callback));
    ++unfinished_;
  }
  work_available_.notify_one();
}

void CallbackPool::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return unfinished_ == 0; });
}

void CallbackPool::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    // Stopping still runs what is queued: every posted callback runs exactly once.
    work_available_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    std::function<void()> callback = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    callback();
    lock.lock();
    if (--unfinished_ == 0) idle_.notify_all();
  }
}

}  // namespace graphserve
