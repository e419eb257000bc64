#include "server/cluster/port_allocator.h"

#include <random>

namespace llamafleet {

PortAllocator::PortAllocator(int base)
    : base_(base), next_(static_cast<int>(std::random_device()() % kRange)) {}

int PortAllocator::Allocate() {
  for (int i = 0; i < kRange; ++i) {
    const int p = base_ + (next_ + i) % kRange;
    if (in_use_.insert(p).second) {
      next_ = (next_ + i + 1) % kRange;
      return p;
    }
  }
  return base_;
}

}  // namespace llamafleet
