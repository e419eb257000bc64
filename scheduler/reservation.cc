#include "scheduler/reservation.h"

#include <algorithm>
#include <tuple>

#include "scheduler/capacity.h"

namespace llamafleet::sched::internal {

std::optional<absl::Time> EarliestStart(PassState& pass, const PendingJob& job, const Shape& shape,
                                        std::vector<int>* chosen) {
  const int g = job.gpus_per_node;
  std::vector<std::tuple<absl::Time, int, int>> when;  // (time, missing, worker)
  for (int ci : shape.classes) {
    for (int idx : pass.classes[ci].members) {
      WorkerState& s = pass.state[idx];
      if (s.gpus < g || pass.Excluded(job, idx)) continue;
      int missing = g - s.free;
      if (missing <= 0) {
        when.emplace_back(pass.now, 0, idx);
        continue;
      }
      if (!s.releases_sorted) {
        std::sort(s.releases.begin(), s.releases.end());
        s.releases_sorted = true;
      }
      absl::Time t = absl::InfiniteFuture();
      int freed = 0;
      for (auto [end, gpus] : s.releases) {
        freed += gpus;
        if (freed >= missing) {
          t = std::max(end, pass.now);
          break;
        }
      }
      when.emplace_back(t, missing, idx);
    }
  }
  if (static_cast<int>(when.size()) < job.nodes) return std::nullopt;
  std::partial_sort(when.begin(), when.begin() + job.nodes, when.end());
  absl::Time start = std::get<0>(when[job.nodes - 1]);
  if (chosen) {
    for (int i = 0; i < job.nodes; ++i) chosen->push_back(std::get<2>(when[i]));
  }
  if (start == absl::InfiniteFuture()) return std::nullopt;
  return start;
}

std::optional<absl::Time> CachedEarliestStart(PassState& pass, const PendingJob& job,
                                              const Shape& shape) {
  if (!job.excluded_workers.empty()) {  // rare: not cached
    if (pass.estimates >= pass.config.max_estimates) return std::nullopt;
    ++pass.estimates;
    return EarliestStart(pass, job, shape, nullptr);
  }
  auto [it, inserted] = shape.estimates.try_emplace(SizeKey(job));
  Shape::Estimate& e = it->second;
  if (!inserted && e.version == pass.state_version) return e.start;
  if (pass.estimates >= pass.config.max_estimates) return std::nullopt;
  ++pass.estimates;
  e.version = pass.state_version;
  e.start = EarliestStart(pass, job, shape, nullptr);
  return e.start;
}

void Reserve(PassState& pass, const PendingJob& job, const std::vector<int>& workers,
             std::optional<absl::Time> start) {
  const int g = job.gpus_per_node;
  pass.any_reservation = true;
  for (int idx : workers) {
    WorkerState& s = pass.state[idx];
    int hold = std::min(s.free, g);
    if (start) {
      int at_start = s.free;
      for (auto [end, gpus] : s.releases) {
        if (end <= *start) at_start += gpus;
      }
      int spare = std::max(0, std::min(s.free, at_start - g));
      hold = s.free - spare;
    }
    Hold(pass, idx, hold, job.job_id, start.value_or(absl::InfinitePast()));
  }
}

}  // namespace llamafleet::sched::internal
