#include "worker/task_starts.h"

#include <utility>

namespace llamafleet::worker {

TaskStarts::TaskStarts(size_t max_in_flight) : max_in_flight_(max_in_flight) {}

TaskStarts::~TaskStarts() { JoinAll(); }

TaskStarts::Begun TaskStarts::Begin(const std::string& task_id, std::function<void()> start) {
  ReapFinished();
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_.count(task_id)) return Begun::kAlreadyStarting;
  if (closed_ || in_flight_.size() >= max_in_flight_) return Begun::kFull;
  // The thread's last step takes mu_, which is held until its handle is stored.
  in_flight_[task_id].thread = std::thread([this, task_id, start = std::move(start)] {
    start();
    std::lock_guard<std::mutex> done(mu_);
    auto it = in_flight_.find(task_id);
    finished_.push_back(std::move(it->second.thread));
    in_flight_.erase(it);
    cv_.notify_all();
  });
  return Begun::kStarted;
}

bool TaskStarts::Cancel(const std::string& task_id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(task_id);
  if (it == in_flight_.end()) return false;
  if (!it->second.cancelled.has_value()) it->second.cancelled = why;
  return true;
}

std::optional<std::string> TaskStarts::Cancelled(const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(task_id);
  return it == in_flight_.end() ? std::nullopt : it->second.cancelled;
}

std::vector<std::string> TaskStarts::InFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [id, start] : in_flight_) out.push_back(id);
  return out;
}

void TaskStarts::JoinAll() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    closed_ = true;
    cv_.wait(lock, [&] { return in_flight_.empty(); });
  }
  ReapFinished();
}

void TaskStarts::ReapFinished() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(finished_);
  }
  for (std::thread& t : done) t.join();
}

}  // namespace llamafleet::worker
