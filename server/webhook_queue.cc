#include "server/webhook_queue.h"

#include <utility>

namespace llamafleet {

std::optional<WebhookQueue::Dropped> WebhookQueue::Push(WebhookDelivery d, absl::Time due) {
  std::optional<Dropped> dropped;
  auto own = owners_.find(d.owner);
  if (own != owners_.end() && own->second.size() >= bounds_.max_pending_per_owner) {
    dropped = Dropped{DropFirst(own), true};
  } else if (size_ >= bounds_.max_pending) {
    // The owner with the most waiting pays for the space (the first of equals).
    auto most = owners_.begin();
    for (auto it = owners_.begin(); it != owners_.end(); ++it) {
      if (it->second.size() > most->second.size()) most = it;
    }
    dropped = Dropped{DropFirst(most), false};
  }
  std::string owner = d.owner;
  owners_[owner].emplace(due, std::move(d));
  ++size_;
  return dropped;
}

WebhookDelivery WebhookQueue::DropFirst(std::map<std::string, Waiting>::iterator owner) {
  WebhookDelivery d = std::move(owner->second.begin()->second);
  owner->second.erase(owner->second.begin());
  if (owner->second.empty()) owners_.erase(owner);
  --size_;
  return d;
}

std::optional<WebhookDelivery> WebhookQueue::PopDue(absl::Time now) {
  if (owners_.empty()) return std::nullopt;
  // Owners after the last one served, then from the first: each gets one turn per round.
  auto start = owners_.upper_bound(last_served_);
  for (size_t n = 0; n < owners_.size(); ++n, ++start) {
    if (start == owners_.end()) start = owners_.begin();
    if (start->second.begin()->first > now) continue;
    last_served_ = start->first;
    return DropFirst(start);
  }
  return std::nullopt;
}

absl::Time WebhookQueue::NextDue() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [owner, waiting] : owners_) next = std::min(next, waiting.begin()->first);
  return next;
}

size_t WebhookQueue::waiting(const std::string& owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second.size();
}

}  // namespace llamafleet
