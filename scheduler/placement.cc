#include "scheduler/placement.h"

#include <algorithm>
#include <utility>

#include "scheduler/capacity.h"

namespace llamafleet::sched::internal {
namespace {

// EASY backfill: a job known to end before a reservation starts may use its GPUs. Scans
// the matching workers, so only used for jobs with an expected duration that did not
// fit otherwise.
std::vector<int> PlaceBeforeReservations(const PassState& pass, const PendingJob& job,
                                         const Shape& shape) {
  const absl::Time end = pass.now + *job.expected_duration;
  const int g = job.gpus_per_node;
  std::vector<std::pair<int, int>> fits;  // (usable GPUs, worker)
  for (int ci : shape.classes) {
    for (int idx : pass.classes[ci].members) {
      const WorkerState& s = pass.state[idx];
      int usable = s.free + (end <= s.res_until ? s.res_held : 0);
      if (usable >= g && !pass.Excluded(job, idx)) fits.emplace_back(usable, idx);
    }
  }
  if (static_cast<int>(fits.size()) < job.nodes) return {};
  std::sort(fits.begin(), fits.end());
  std::vector<int> chosen;
  for (int i = 0; i < job.nodes; ++i) chosen.push_back(fits[i].second);
  return chosen;
}

}  // namespace

bool Place(PassState& pass, const PendingJob& job, const Shape& shape) {
  const int n = job.nodes;
  const int g = job.gpus_per_node;
  std::vector<int> chosen;
  if (CountFree(pass, job, shape, g) >= n) {
    chosen.reserve(n);
    FillFree(pass, job, shape, n, &chosen);
  } else if (job.expected_duration && pass.any_reservation) {
    chosen = PlaceBeforeReservations(pass, job, shape);
  }
  if (static_cast<int>(chosen.size()) < n) return false;
  Placement p;
  p.job_id = job.job_id;
  p.allocations.reserve(n);
  for (int idx : chosen) {
    Take(pass, idx, g, job);
    p.allocations.push_back(Allocation{pass.order[idx]->id, g});
  }
  pass.out.placements.push_back(std::move(p));
  return true;
}

int PlaceElastic(PassState& pass, const PendingJob& job, const Shape& shape, int at_most,
                 int at_least) {
  const int g = job.gpus_per_node;
  const int k = std::min(at_most, CountFree(pass, job, shape, g));
  if (k < at_least || k < 1) return 0;
  std::vector<int> chosen;
  chosen.reserve(k);
  FillFree(pass, job, shape, k, &chosen);
  if (static_cast<int>(chosen.size()) < k) return 0;
  Placement p;
  p.job_id = job.job_id;
  for (int idx : chosen) {
    Take(pass, idx, g, job);
    p.allocations.push_back(Allocation{pass.order[idx]->id, g});
  }
  pass.out.placements.push_back(std::move(p));
  return k;
}

void FillFree(const PassState& pass, const PendingJob& job, const Shape& shape, int n,
              std::vector<int>* chosen) {
  const int g = job.gpus_per_node;
  int max_free = 0;
  for (int ci : shape.classes) max_free = std::max(max_free, pass.classes[ci].max_gpus);
  for (int f = g; f <= max_free && static_cast<int>(chosen->size()) < n; ++f) {
    for (int ci : shape.classes) {
      if (f > pass.classes[ci].max_gpus) continue;
      for (int idx : pass.classes[ci].by_free[f]) {
        if (static_cast<int>(chosen->size()) == n) return;
        if (!pass.Excluded(job, idx)) chosen->push_back(idx);
      }
    }
  }
}

}  // namespace llamafleet::sched::internal
