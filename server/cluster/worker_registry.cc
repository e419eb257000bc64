#include "server/cluster/worker_registry.h"

#include <openssl/crypto.h>

#include "spdlog/spdlog.h"

namespace llamafleet {

bool JoinTokenMatches(const std::string& expected, const std::string& given) {
  if (expected.empty() || expected.size() != given.size()) return false;
  return CRYPTO_memcmp(expected.data(), given.data(), expected.size()) == 0;
}

v1::WorkerState StateOf(const LiveWorker& w, bool drained) {
  if (w.lost) return v1::WORKER_LOST;
  if (w.link == nullptr) return v1::WORKER_DISCONNECTED;
  return drained ? v1::WORKER_DRAINING : v1::WORKER_READY;
}

WorkerRegistry::Registration WorkerRegistry::Register(const std::string& name,
                                                      const v1::Inventory& inventory,
                                                      const std::string& instance,
                                                      std::shared_ptr<WorkerLink> link,
                                                      absl::Time now) {
  LiveWorker& w = workers_[name];
  Registration r;
  r.worker = &w;
  r.replaced = w.link != nullptr && w.link != link;
  if (r.replaced) {
    spdlog::warn("worker {} re-registered while its previous session looked alive", name);
    w.link->Close(absl::AbortedError("replaced by a newer session of the same worker process"));
  }
  r.was_lost = w.lost;
  w.name = name;
  w.inventory = inventory;
  w.shared_inventory = std::make_shared<const v1::Inventory>(w.inventory);
  w.link = std::move(link);
  w.instance = instance;
  w.instance_known = true;
  w.last_heartbeat = now;
  w.lost = false;
  ++version_;
  return r;
}

void WorkerRegistry::AddRecovered(const std::string& name, absl::Time heard) {
  if (workers_.count(name)) return;
  LiveWorker w;
  w.name = name;
  w.last_heartbeat = heard;
  workers_[name] = std::move(w);
}

bool WorkerRegistry::Disconnect(const std::string& name, const WorkerLink* link) {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.link.get() != link) return false;
  it->second.link.reset();
  ++version_;
  return true;
}

LiveWorker* WorkerRegistry::Heard(const std::string& name, absl::Time now) {
  auto it = workers_.find(name);
  if (it == workers_.end()) return nullptr;
  it->second.last_heartbeat = now;
  return &it->second;
}

LiveWorker* WorkerRegistry::Find(const std::string& name) {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

std::vector<std::string> WorkerRegistry::CollectLost(absl::Time now, absl::Duration timeout) {
  std::vector<std::string> lost;
  for (auto& [name, w] : workers_) {
    if (w.lost || now - w.last_heartbeat < timeout) continue;
    w.lost = true;
    ++version_;
    spdlog::warn("worker {} lost: no heartbeat for {}", name,
                 absl::FormatDuration(now - w.last_heartbeat));
    if (w.link != nullptr) w.link->Close(absl::UnavailableError("heartbeat timeout"));
    w.link.reset();
    lost.push_back(name);
  }
  return lost;
}

bool WorkerRegistry::Send(const std::string& name, v1::CoordinatorMessage message) {
  auto it = workers_.find(name);
  if (it == workers_.end() || it->second.link == nullptr) return false;
  it->second.link->Send(std::move(message));
  return true;
}

bool WorkerRegistry::AnyConnected() const {
  for (const auto& [name, w] : workers_) {
    if (!w.lost && w.link != nullptr) return true;
  }
  return false;
}

bool WorkerRegistry::IsLost(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() || it->second.lost;
}

bool WorkerRegistry::IsGone(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() || it->second.lost || it->second.link == nullptr;
}

std::set<std::string> WorkerRegistry::Unavailable() const {
  std::set<std::string> out;
  for (const auto& [name, w] : workers_) {
    if (w.lost || w.link == nullptr) out.insert(name);
  }
  return out;
}

std::string WorkerRegistry::Address(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? "" : it->second.inventory.address();
}

void WorkerRegistry::SetDrain(const WorkerDrainRecord& drain) {
  drains_[drain.name] = drain;
  ++version_;
}

bool WorkerRegistry::ClearDrain(const std::string& name) {
  if (drains_.erase(name) == 0) return false;
  ++version_;
  return true;
}

const WorkerDrainRecord* WorkerRegistry::DrainOf(const std::string& name) const {
  auto it = drains_.find(name);
  return it == drains_.end() ? nullptr : &it->second;
}

const std::vector<WorkerView>& WorkerRegistry::Views() {
  if (views_version_ != version_) {
    views_.clear();
    for (const auto& [name, w] : workers_) {
      views_.push_back({name, w.inventory, !w.lost && w.link != nullptr && !drains_.count(name)});
    }
    views_version_ = version_;
  }
  return views_;
}

}  // namespace llamafleet
