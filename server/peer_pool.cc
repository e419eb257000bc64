#include "server/peer_pool.h"

namespace llamafleet {

PeerPool::Admission PeerPool::Admit(uint64_t id, const std::string& peer) {
  auto it = peers_.find(peer);
  const int holds = it == peers_.end() ? 0 : it->second.held;
  if (max_per_peer_ > 0 && holds >= max_per_peer_) return {Verdict::kPeerFull, std::nullopt};
  Admission admission;
  if (max_total_ > 0 && size() >= max_total_) {
    admission.evicted = Victim(holds);
    if (!admission.evicted.has_value()) return {Verdict::kPoolFull, std::nullopt};
    Remove(*admission.evicted);
  }
  members_[id] = Member{peer, true};
  Peer& p = peers_[peer];
  ++p.held;
  p.evictable.insert(id);
  return admission;
}

std::optional<uint64_t> PeerPool::Victim(int newcomer_holds) const {
  const Peer* heaviest = nullptr;
  for (const auto& [address, p] : peers_) {
    if (p.evictable.empty() || p.held <= newcomer_holds) continue;
    // The peer holding the most; between equals, the one with the oldest member.
    if (heaviest == nullptr || p.held > heaviest->held ||
        (p.held == heaviest->held && *p.evictable.begin() < *heaviest->evictable.begin())) {
      heaviest = &p;
    }
  }
  if (heaviest == nullptr) return std::nullopt;
  return *heaviest->evictable.begin();
}

void PeerPool::SetEvictable(uint64_t id, bool evictable) {
  auto it = members_.find(id);
  if (it == members_.end() || it->second.evictable == evictable) return;
  it->second.evictable = evictable;
  Peer& p = peers_[it->second.peer];
  if (evictable) {
    p.evictable.insert(id);
  } else {
    p.evictable.erase(id);
  }
}

bool PeerPool::Remove(uint64_t id) {
  auto it = members_.find(id);
  if (it == members_.end()) return false;
  auto peer = peers_.find(it->second.peer);
  peer->second.evictable.erase(id);
  if (--peer->second.held <= 0) peers_.erase(peer);
  members_.erase(it);
  return true;
}

int PeerPool::held_by(const std::string& peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.held;
}

}  // namespace llamafleet
