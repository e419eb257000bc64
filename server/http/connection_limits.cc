#include "server/http/connection_limits.h"

namespace llamafleet::http {

ConnectionLimits::Admission ConnectionLimits::Admit(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (total_ >= max_total_) return Admission::kTooManyInAll;
  int& from_peer = per_peer_[peer];
  if (max_per_peer_ > 0 && from_peer >= max_per_peer_) return Admission::kTooManyFromPeer;
  ++from_peer;
  ++total_;
  return Admission::kAdmitted;
}

void ConnectionLimits::Release(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_peer_.find(peer);
  if (it == per_peer_.end()) return;
  --total_;
  if (--it->second <= 0) per_peer_.erase(it);
}

int ConnectionLimits::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

}  // namespace llamafleet::http
