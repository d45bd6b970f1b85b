#pragma once
// A few threads that run posted callbacks. The scheduler answers requests here (encoding a
// response, handing it to gRPC) instead of on an executor's worker thread, so that the worker goes
// back to launching batches while the last batch's answers are being written: with large outputs
// (BERT's last_hidden_state, ~200 KB per request on the default mix) writing the answers takes longer than the replay.
//
// Thread safety: Post and Drain may be called from any thread. Ownership: a posted callback is
// owned by the pool until it has run; every posted callback runs exactly once, the last ones at the
// latest in the destructor.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "graphserve/server/common/thread_annotations.h"

namespace graphserve {

class CallbackPool {
 public:
  // `threads` >= 1.
  explicit CallbackPool(int threads);
  ~CallbackPool();  // runs what is posted, then joins

  CallbackPool(const CallbackPool&) = delete;
  CallbackPool& operator=(const CallbackPool&) = delete;

  void Post(std::function<void()> callback) EXCLUDES(mutex_);
  // Returns once every callback posted before the call has run.
  void Drain() EXCLUDES(mutex_);

  // A quarter of the usable cores (UsableCores), 1 to 4: enough to keep up with a GPU's batches while leaving the
  // cores to gRPC's own threads.
  static int DefaultThreads();

 private:
  void Run() EXCLUDES(mutex_);

  Mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mutex_);
  int64_t unfinished_ GUARDED_BY(mutex_) = 0;  // posted and not yet run
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace graphserve
