#include "worker/rank_progress.h"

namespace llamafleet::worker {

void RankProgressTable::Record(const std::string& task_id, int rank, const trainer_events::Progress& p,
                               absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, Entry>& ranks = tasks_[task_id];
  if (ranks.size() >= kMaxRanksPerTask && ranks.count(rank) == 0) return;
  ranks[rank] = Entry{p, now};
}

void RankProgressTable::Forget(const std::string& task_id) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.erase(task_id);
}

std::vector<v1::RankProgress> RankProgressTable::Snapshot(absl::Time now) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::RankProgress> out;
  for (const auto& [task_id, ranks] : tasks_) {
    for (const auto& [rank, e] : ranks) {
      v1::RankProgress r;
      r.set_task_id(task_id);
      r.set_rank(rank);
      r.set_step(e.progress.step);
      r.set_collectives(e.progress.collectives);
      r.set_in_collective(e.progress.in_collective);
      r.set_busy_seconds(e.progress.busy_s);
      r.set_wait_seconds(e.progress.wait_s);
      r.set_age_seconds(std::max(0.0, absl::ToDoubleSeconds(now - e.read)));
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace llamafleet::worker
