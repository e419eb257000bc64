#include "server/http/connection_limits.h"

namespace llamafleet::http {

ConnectionLimits::ConnectionLimits(ConnectionLimitOptions options)
    : options_(options),
      unauthenticated_(options.max_unauthenticated, options.max_unauthenticated_per_peer) {}

ConnectionLimits::Admission ConnectionLimits::Admit(uint64_t id, const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(peers_.size()) >= options_.max_total) return {Verdict::kTooManyInAll, {}};
  auto from_peer = per_peer_.find(peer);
  if (options_.max_per_peer > 0 && from_peer != per_peer_.end() &&
      from_peer->second >= options_.max_per_peer) {
    return {Verdict::kTooManyFromPeer, {}};
  }
  const PeerPool::Admission pooled = unauthenticated_.Admit(id, peer);
  switch (pooled.verdict) {
    case PeerPool::Verdict::kPeerFull:
      return {Verdict::kTooManyFromPeer, {}};
    case PeerPool::Verdict::kPoolFull:
      return {Verdict::kTooManyInAll, {}};
    case PeerPool::Verdict::kAdmitted:
      break;
  }
  if (pooled.evicted.has_value()) ForgetLocked(*pooled.evicted);
  peers_[id] = peer;
  ++per_peer_[peer];
  return {Verdict::kAdmitted, pooled.evicted};
}

void ConnectionLimits::SetIdle(uint64_t id, bool idle) {
  std::lock_guard<std::mutex> lock(mu_);
  unauthenticated_.SetEvictable(id, idle);
}

void ConnectionLimits::Authenticated(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  unauthenticated_.Remove(id);
}

void ConnectionLimits::Release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (peers_.count(id) == 0) return;
  unauthenticated_.Remove(id);
  ForgetLocked(id);
}

void ConnectionLimits::ForgetLocked(uint64_t id) {
  auto it = peers_.find(id);
  auto from_peer = per_peer_.find(it->second);
  if (--from_peer->second <= 0) per_peer_.erase(from_peer);
  peers_.erase(it);
}

int ConnectionLimits::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(peers_.size());
}

int ConnectionLimits::unauthenticated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unauthenticated_.size();
}

}  // namespace llamafleet::http
