#include "graphserve/server/grpc/spin_slots.h"

namespace graphserve {

bool SpinSlots::TryTake() {
  int free = free_.load(std::memory_order_relaxed);
  while (free > 0) {
    if (free_.compare_exchange_weak(free, free - 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void SpinSlots::Give() { free_.fetch_add(1, std::memory_order_release); }

}  // namespace graphserve
