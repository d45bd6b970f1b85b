#pragma once
// How many threads may busy-poll at once. Each spinning thread holds a core: with all of
// ModelInfer's eight completion-queue threads spinning, the H200's host (its clients on it too)
// left gRPC's transport threads fewer cores: in one run, goodput at 4x overload was 92% of
// capacity against 110% with one spinning thread (the seventh overload pass, in BENCHMARKS.md's
// history: git show 27e176d:BENCHMARKS.md). A lone client's next call needs only one.
// Thread safety: any thread.
#include <atomic>

namespace graphserve {

class SpinSlots {
 public:
  explicit SpinSlots(int slots) : free_(slots) {}
  SpinSlots(const SpinSlots&) = delete;
  SpinSlots& operator=(const SpinSlots&) = delete;

  // True when the caller now holds a slot, which it gives back once it stops spinning.
  bool TryTake();
  void Give();

 private:
  std::atomic<int> free_;
};

}  // namespace graphserve
