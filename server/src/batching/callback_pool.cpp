#include "graphserve/server/batching/callback_pool.h"

#include <algorithm>
#include <utility>

#include "graphserve/server/common/usable_cores.h"
#include "common/thread_name.h"

namespace graphserve {

CallbackPool::CallbackPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] {
    NameThisThread("gs-answer");
    Run();
  });
}

CallbackPool::~CallbackPool() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

int CallbackPool::DefaultThreads() {
  return std::clamp(UsableCores() / 4, 1, 4);
}

void CallbackPool::Post(std::function<void()> callback) {
  {
    MutexLock lock(&mutex_);
    queue_.push_back(std::move(callback));
    ++unfinished_;
  }
  work_available_.notify_one();
}

void CallbackPool::Drain() {
  MutexLock lock(&mutex_);
  while (unfinished_ != 0) lock.Wait(idle_);
}

void CallbackPool::Run() {
  MutexLock lock(&mutex_);
  while (true) {
    // Stopping still runs what is queued: every posted callback runs exactly once.
    while (!stopping_ && queue_.empty()) lock.Wait(work_available_);
    if (queue_.empty()) return;
    std::function<void()> callback = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    callback();
    lock.Lock();
    if (--unfinished_ == 0) idle_.notify_all();
  }
}

}  // namespace graphserve
