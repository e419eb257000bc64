#ifndef LLAMAFLEET_SERVER_PEER_POOL_H_
#define LLAMAFLEET_SERVER_PEER_POOL_H_

// A bounded pool of things a caller holds before it has proved who it is (HTTP connections
// without a good token, worker session streams before their hello), shared among peer
// addresses so that a few addresses cannot fill it and lock every other caller out. The
// contract:
//   - a peer holds at most max_per_peer members; its next is refused (kPeerFull);
//   - the pool holds at most max_total; a newcomer to a full pool takes the place of the
//     oldest evictable member of the peer holding the most, provided that peer holds more
//     than the newcomer's peer does (the caller closes the evicted member); otherwise it
//     is refused (kPoolFull).
// So a caller from an address of its own gets in however the pool was filled, and filling
// it from many addresses only makes them push each other out. Members are named by ids
// that grow with age. Not thread-safe: its owner locks.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace llamafleet {

class PeerPool {
 public:
  // <= 0: no cap.
  PeerPool(int max_total, int max_per_peer) : max_total_(max_total), max_per_peer_(max_per_peer) {}

  enum class Verdict { kAdmitted, kPeerFull, kPoolFull };
  struct Admission {
    Verdict verdict = Verdict::kAdmitted;
    // Admitted in its place: the member that left the pool (no longer counted; close it).
    std::optional<uint64_t> evicted;
  };
  // Adds member `id` (new, and greater than every id before) from `peer`, evictable, when
  // admitted; changes nothing otherwise.
  Admission Admit(uint64_t id, const std::string& peer);
  // Only evictable members make room for a newcomer (e.g. those idle, not mid-request).
  void SetEvictable(uint64_t id, bool evictable);
  // Removes `id`; false when it is no member (never admitted, evicted, removed before).
  bool Remove(uint64_t id);

  int size() const { return static_cast<int>(members_.size()); }
  int held_by(const std::string& peer) const;
  int max_total() const { return max_total_; }
  int max_per_peer() const { return max_per_peer_; }

 private:
  struct Peer {
    int held = 0;
    std::set<uint64_t> evictable;  // oldest first
  };
  struct Member {
    std::string peer;
    bool evictable = true;
  };
  // The member to evict for a newcomer from a peer holding `newcomer_holds`, if any.
  std::optional<uint64_t> Victim(int newcomer_holds) const;

  const int max_total_;
  const int max_per_peer_;
  std::map<uint64_t, Member> members_;
  std::map<std::string, Peer> peers_;  // only peers with members
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_PEER_POOL_H_
