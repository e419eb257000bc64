#ifndef LLAMAFLEET_SERVER_CLUSTER_PORT_ALLOCATOR_H_
#define LLAMAFLEET_SERVER_CLUSTER_PORT_ALLOCATOR_H_

// The TCP ports handed out as MASTER_PORT, one per active attempt, from a range of 1000
// starting at a base. Used only on the cluster loop's strand (not thread-safe).

#include <set>

namespace llamafleet {

class PortAllocator {
 public:
  static constexpr int kRange = 1000;

  // The search starts at a random offset: coordinators sharing hosts (tests, several
  // clusters on one box) would otherwise all hand out `base` first and collide in their
  // ranks' rendezvous.
  explicit PortAllocator(int base);

  // A port no active attempt holds, round robin from after the last one handed out: a
  // port an attempt just released may still be in TIME_WAIT on node 0, and a restart that
  // reused it at once would fail its rendezvous with "address already in use". `base`
  // when every port of the range is held.
  int Allocate();
  // A port a recovered attempt holds.
  void Hold(int port) { in_use_.insert(port); }
  void Release(int port) { in_use_.erase(port); }

 private:
  const int base_;
  int next_ = 0;  // offset from base_ where the next search starts
  std::set<int> in_use_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_PORT_ALLOCATOR_H_
