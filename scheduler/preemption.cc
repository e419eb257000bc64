#include "scheduler/preemption.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "scheduler/capacity.h"
#include "scheduler/explanations.h"
#include "scheduler/placement.h"

namespace llamafleet::sched::internal {
namespace {

// One victim set covering one worker's deficit, with its cost. Lower is better: fewer
// GPUs lost, then lower priority, then most recently started.
struct Cover {
  int64_t gpus_lost = 0;
  int max_priority = 0;
  absl::Time oldest_start = absl::InfiniteFuture();
  absl::InlinedVector<int, 8> victims;  // running indices
  absl::InlinedVector<int64_t, 8> ids;  // their job ids, ascending: the last tie-break
  bool operator<(const Cover& o) const {
    if (gpus_lost != o.gpus_lost) return gpus_lost < o.gpus_lost;
    if (max_priority != o.max_priority) return max_priority < o.max_priority;
    if (oldest_start != o.oldest_start) return oldest_start > o.oldest_start;
    return ids < o.ids;
  }
};

// A running job that may be stopped for a job of `priority`.
bool Victim(const RunState& r, int priority) {
  return !r.preempting && !r.claimed && !r.cooling && r.priority < priority;
}

// Cheapest set of eligible victims on one worker freeing `deficit` GPUs there: exact
// over every subset when the worker runs few eligible jobs, greedy otherwise.
// Victims in `taken` are already chosen and do not count.
std::optional<Cover> CoverWorker(PassState& pass, int idx, int deficit, int priority,
                                 const std::set<int>& taken) {
  constexpr size_t kExactUpTo = 8;
  std::vector<std::pair<int, int>>& cand = pass.scratch_cand;  // (running index, GPUs here)
  cand.clear();
  int total = 0;
  for (auto [r, gpus] : pass.state[idx].jobs) {
    if (Victim(pass.run[r], priority) && (taken.empty() || !taken.count(r))) {
      cand.emplace_back(r, gpus);
      total += gpus;
    }
  }
  if (total < deficit) return std::nullopt;
  std::sort(cand.begin(), cand.end(), [&pass](auto a, auto b) {
    return pass.run[a.first].job_id < pass.run[b.first].job_id;
  });
  auto finish = [&pass](Cover c) {
    for (int r : c.victims) c.ids.push_back(pass.run[r].job_id);
    std::sort(c.ids.begin(), c.ids.end());
    return c;
  };
  auto cost_of = [&](auto&& members) {
    Cover c;
    c.max_priority = std::numeric_limits<int>::min();
    for (int r : members) {
      c.gpus_lost += pass.run[r].total_gpus;
      c.max_priority = std::max(c.max_priority, pass.run[r].priority);
      c.oldest_start = std::min(c.oldest_start, pass.run[r].started);
    }
    return c;
  };
  if (cand.size() <= kExactUpTo) {
    std::optional<Cover> best;
    uint32_t best_mask = 0;
    int members[kExactUpTo];
    for (uint32_t m = 1; m < (1u << cand.size()); ++m) {
      int freed = 0;
      int count = 0;
      for (size_t i = 0; i < cand.size(); ++i) {
        if (m & (1u << i)) {
          freed += cand[i].second;
          members[count++] = cand[i].first;
        }
      }
      if (freed < deficit) continue;
      struct {
        const int* b;
        const int* e;
        const int* begin() const { return b; }
        const int* end() const { return e; }
      } span{members, members + count};
      Cover c = cost_of(span);
      bool better =
          !best || c.gpus_lost < best->gpus_lost ||
          (c.gpus_lost == best->gpus_lost &&
           (c.max_priority < best->max_priority ||
            (c.max_priority == best->max_priority && c.oldest_start > best->oldest_start)));
      if (better) {
        best = std::move(c);
        best_mask = m;
      }
    }
    for (size_t i = 0; i < cand.size(); ++i) {
      if (best_mask & (1u << i)) best->victims.push_back(cand[i].first);
    }
    return finish(std::move(*best));
  }
  // Many small jobs on one worker: greedy, most GPUs freed here per GPU lost first.
  std::sort(cand.begin(), cand.end(), [&pass](auto a, auto b) {
    int64_t lhs = static_cast<int64_t>(a.second) * pass.run[b.first].total_gpus;
    int64_t rhs = static_cast<int64_t>(b.second) * pass.run[a.first].total_gpus;
    if (lhs != rhs) return lhs > rhs;
    return pass.run[a.first].job_id < pass.run[b.first].job_id;
  });
  absl::InlinedVector<int, 8> victims;
  int freed = 0;
  for (auto [r, gpus] : cand) {
    if (freed >= deficit) break;
    victims.push_back(r);
    freed += gpus;
  }
  Cover c = cost_of(victims);
  c.victims = std::move(victims);
  return finish(std::move(c));
}

// Workers (candidates of the current job) with at least g GPUs once `victims` stop.
int FitsWith(PassState& pass, const std::vector<int>& victims, int g, int free_ok,
             std::vector<int>* chosen) {
  std::vector<std::pair<int, int>>& freed = pass.scratch_freed;  // (worker, GPUs freed there)
  freed.clear();
  for (int r : victims)
    freed.insert(freed.end(), pass.run_allocs[r].begin(), pass.run_allocs[r].end());
  std::sort(freed.begin(), freed.end());
  size_t out = 0;  // merge entries of the same worker
  for (size_t i = 0; i < freed.size(); ++i) {
    if (out > 0 && freed[out - 1].first == freed[i].first) {
      freed[out - 1].second += freed[i].second;
    } else {
      freed[out++] = freed[i];
    }
  }
  freed.resize(out);
  int n = free_ok;
  for (auto [idx, gpus] : freed) {
    const WorkerState& s = pass.state[idx];
    if (s.stamp != pass.stamp || s.free >= g) continue;
    if (s.free + gpus >= g) {
      ++n;
      if (chosen) chosen->push_back(idx);
    }
  }
  return n;
}

}  // namespace

bool WaitForPreempting(PassState& pass, const PendingJob& job, const Shape& shape) {
  const int n = job.nodes;
  const int g = job.gpus_per_node;
  bool any = false;
  for (int ci : shape.classes) any |= !pass.classes[ci].freeing.empty();
  if (!any) return false;
  // Workers that need freeing GPUs, fewest needed first; then already-free ones.
  std::vector<std::pair<int, int>> helped;  // (GPUs still missing, worker)
  for (int ci : shape.classes) {
    for (int idx : pass.classes[ci].freeing) {
      const WorkerState& s = pass.state[idx];
      if (s.free < g && s.freeing > 0 && s.free + s.freeing >= g && !pass.Excluded(job, idx)) {
        helped.emplace_back(g - s.free, idx);
      }
    }
  }
  if (helped.empty()) return false;
  int free_now = CountFree(pass, job, shape, g);
  if (free_now + static_cast<int>(helped.size()) < n) return false;
  std::sort(helped.begin(), helped.end());
  std::vector<int> chosen;
  const int need_helped = n - std::min(free_now, n - 1);  // at least one
  for (int i = 0; i < need_helped; ++i) chosen.push_back(helped[i].second);
  FillFree(pass, job, shape, n, &chosen);
  for (int idx : chosen) {
    WorkerState& s = pass.state[idx];
    int missing = std::max(0, g - s.free);
    s.freeing -= missing;
    Hold(pass, idx, g, job.job_id, std::nullopt);
  }
  AddPending(pass, job, PendingCode::kWaitingForPreemption,
             WaitingForPreemptedText(pass, job, shape, need_helped));
  return true;
}

namespace {

// A worker missing GPUs that eligible victims could complete. Its cover (victim set) is
// computed lazily; the bounds let the search skip workers no cover of which can win.
struct Candidate {
  int idx = 0;
  int deficit = 0;          // GPUs missing before any victim is taken
  int min_priority = 0;     // of its eligible victims: no cover has a lower max
  absl::Time latest_start;  // of its eligible victims: no cover starts later
  int cover = -1;           // index into the search's covers once computed
  bool done = false;        // enough GPUs freed by victims already taken
};

// The job's workers before any victim is chosen. Candidates' positions are recorded in
// WorkerState::cand (ClearCandidates resets them).
struct CandidateScan {
  std::vector<Candidate> cands;
  int free_ok = 0;      // workers with g GPUs free already
  int cooldown_ok = 0;  // workers that would fit were cool-downs ignored
};

CandidateScan ScanCandidates(PassState& pass, const PendingJob& job, const Shape& shape,
                             bool count_only) {
  const int g = job.gpus_per_node;
  CandidateScan scan;
  for (int ci : shape.classes) {
    for (int idx : pass.classes[ci].members) {
      WorkerState& s = pass.state[idx];
      if (s.gpus < g || pass.Excluded(job, idx)) continue;
      s.stamp = pass.stamp;
      if (s.free >= g) {
        ++scan.free_ok;
        ++scan.cooldown_ok;
        continue;
      }
      int lower = 0;     // every lower-priority GPU here, cool-down ignored
      int eligible = 0;  // of those, the ones outside their cool-down
      int min_priority = std::numeric_limits<int>::max();
      absl::Time latest_start = absl::InfinitePast();
      for (auto [r, gpus] : s.jobs) {
        const RunState& rs = pass.run[r];
        if (!rs.preempting && !rs.claimed && rs.priority < job.priority) {
          lower += gpus;
          if (!rs.cooling) {
            eligible += gpus;
            min_priority = std::min(min_priority, rs.priority);
            latest_start = std::max(latest_start, rs.started);
          }
        }
      }
      if (s.free + lower >= g) ++scan.cooldown_ok;
      if (count_only || s.free + eligible < g) continue;
      s.cand = static_cast<int>(scan.cands.size());
      scan.cands.push_back(Candidate{idx, g - s.free, min_priority, latest_start});
    }
  }
  return scan;
}

void ClearCandidates(PassState& pass, const std::vector<Candidate>& cands) {
  for (const Candidate& c : cands) pass.state[c.idx].cand = -1;
}

// Greedy by marginal cost: repeatedly takes the cheapest cover of a worker still missing
// GPUs, counting victims already taken as free (a multi-node victim frees GPUs on several
// workers at once), until `n` workers (`free_ok` of them free already) can hold the gang.
// Covers are computed lazily, fewest missing GPUs first: a cover loses at least as many
// GPUs as the worker misses, so once the best cover found is cheaper than what the next
// worker misses, no later worker can beat it. Returns the victims (running indices).
std::optional<std::set<int>> TakeVictims(PassState& pass, const PendingJob& job,
                                         std::vector<Candidate>& cands, int free_ok) {
  const int n = job.nodes;
  const int g = job.gpus_per_node;
  std::vector<std::optional<Cover>> covers;
  // A min-heap on the candidates' lower bounds: only the few popped are ordered.
  std::vector<int> heap(cands.size());
  for (size_t i = 0; i < heap.size(); ++i) heap[i] = static_cast<int>(i);
  auto later = [&](int a, int b) {  // heap order: true when a comes after b
    const Candidate& x = cands[a];
    const Candidate& y = cands[b];
    if (x.deficit != y.deficit) return x.deficit > y.deficit;
    if (x.min_priority != y.min_priority) return x.min_priority > y.min_priority;
    if (x.latest_start != y.latest_start) return x.latest_start < y.latest_start;
    return x.idx > y.idx;
  };
  std::make_heap(heap.begin(), heap.end(), later);
  // True when `cover` beats anything candidate `c` could offer (ids aside).
  auto beats_bound = [&](const Cover& cover, const Candidate& c) {
    if (cover.gpus_lost != c.deficit) return cover.gpus_lost < c.deficit;
    if (cover.max_priority != c.min_priority) return cover.max_priority < c.min_priority;
    return cover.oldest_start >= c.latest_start;
  };
  std::set<int> taken;
  std::map<int, int> freed;   // worker -> GPUs freed by taken victims
  std::vector<int> computed;  // candidates with a cover, in computing order
  auto compute = [&](int c) {
    Candidate& cand = cands[c];
    if (cand.cover < 0) {
      cand.cover = static_cast<int>(covers.size());
      covers.emplace_back();
      computed.push_back(c);
    }
    auto f = freed.find(cand.idx);
    int deficit = g - pass.state[cand.idx].free - (f == freed.end() ? 0 : f->second);
    covers[cand.cover] = CoverWorker(pass, cand.idx, deficit, job.priority, taken);
  };
  auto cover_of = [&](int c) -> const std::optional<Cover>& { return covers[cands[c].cover]; };
  auto better = [&](int c, int best) {
    return !cands[c].done && cover_of(c) && (best < 0 || *cover_of(c) < *cover_of(best));
  };
  int satisfied = free_ok;
  while (satisfied < n) {
    int best = -1;
    for (int c : computed) {
      if (better(c, best)) best = c;
    }
    while (!heap.empty()) {
      int c = heap.front();
      if (cands[c].cover < 0) {
        if (best >= 0 && beats_bound(*cover_of(best), cands[c])) break;
        compute(c);
        if (better(c, best)) best = c;
      }
      std::pop_heap(heap.begin(), heap.end(), later);
      heap.pop_back();
    }
    if (best < 0) return std::nullopt;  // not reached: the scan counted enough candidates
    std::set<int> touched;
    for (int r : cover_of(best)->victims) {
      taken.insert(r);
      for (auto [idx, gpus] : pass.run_allocs[r]) {
        freed[idx] += gpus;
        touched.insert(idx);
      }
    }
    for (int idx : touched) {
      const WorkerState& s = pass.state[idx];
      if (s.stamp != pass.stamp || s.cand < 0 || cands[s.cand].done) continue;
      // (s.cand < 0 also covers workers with enough free GPUs: they are not candidates.)
      if (g - s.free - freed[idx] <= 0) {
        cands[s.cand].done = true;
        ++satisfied;
      } else {
        compute(s.cand);  // cheaper now, or computed for the first time
      }
    }
  }
  return taken;
}

// `taken` without the victims the gang does not need, most expensive dropped first, so
// the set is minimal.
std::vector<int> MinimalVictims(PassState& pass, const std::set<int>& taken, int g, int n,
                                int free_ok) {
  std::vector<int> victims(taken.begin(), taken.end());
  std::vector<int> by_cost = victims;
  std::sort(by_cost.begin(), by_cost.end(), [&pass](int a, int b) {
    if (pass.run[a].total_gpus != pass.run[b].total_gpus)
      return pass.run[a].total_gpus > pass.run[b].total_gpus;
    if (pass.run[a].priority != pass.run[b].priority)
      return pass.run[a].priority > pass.run[b].priority;
    if (pass.run[a].started != pass.run[b].started)
      return pass.run[a].started < pass.run[b].started;
    return pass.run[a].job_id < pass.run[b].job_id;
  });
  for (int r : by_cost) {
    std::vector<int> without;
    for (int v : victims) {
      if (v != r) without.push_back(v);
    }
    if (FitsWith(pass, without, g, free_ok, nullptr) >= n) victims = std::move(without);
  }
  return victims;
}

}  // namespace

bool Preempt(PassState& pass, const PendingJob& job, Shape& shape) {
  pass.last_preempt_code.reset();
  const int n = job.nodes;
  const int g = job.gpus_per_node;
  // A failure for a job with the same selectors, no lower priority, no more nodes and
  // no more GPUs per node means this one fails too: capacity only shrinks in a pass.
  bool must_recheck_cooldown = false;
  for (const PreemptFailure& f : shape.preempt_failures) {
    if (f.priority >= job.priority && f.nodes <= n && f.gpus <= g) {
      if (f.code == PendingCode::kInsufficientCapacity) return false;
      must_recheck_cooldown = true;
    }
  }
  ++pass.stamp;
  CandidateScan scan = ScanCandidates(pass, job, shape, must_recheck_cooldown);
  auto fail = [&](PendingCode code) {
    ClearCandidates(pass, scan.cands);
    // Remember the failure for later jobs of this shape, unless an entry already
    // implies it (keeps the list short: it is checked for every such job).
    constexpr size_t kMaxFailures = 64;
    if (job.excluded_workers.empty() && shape.preempt_failures.size() < kMaxFailures &&
        !(must_recheck_cooldown && code == PendingCode::kPreemptionCooldown)) {
      shape.preempt_failures.push_back({job.priority, n, g, code});
    }
    if (code == PendingCode::kPreemptionCooldown) pass.last_preempt_code = code;
    return false;
  };
  if (must_recheck_cooldown || scan.free_ok + static_cast<int>(scan.cands.size()) < n) {
    return fail(scan.cooldown_ok >= n ? PendingCode::kPreemptionCooldown
                                      : PendingCode::kInsufficientCapacity);
  }
  std::optional<std::set<int>> taken = TakeVictims(pass, job, scan.cands, scan.free_ok);
  if (!taken) return fail(PendingCode::kInsufficientCapacity);
  ClearCandidates(pass, scan.cands);
  std::vector<int> victims = MinimalVictims(pass, *taken, g, n, scan.free_ok);
  std::vector<int> helped;
  FitsWith(pass, victims, g, scan.free_ok, &helped);
  // The gang's workers: those the victims free first, then the fullest free ones.
  std::vector<int> chosen(helped.begin(), helped.begin() + std::min<size_t>(helped.size(), n));
  FillFree(pass, job, shape, n, &chosen);
  std::vector<int64_t> ids;
  for (int r : victims) {
    pass.run[r].claimed = true;
    ids.push_back(pass.run[r].job_id);
  }
  std::sort(ids.begin(), ids.end());
  for (int64_t id : ids) pass.out.preemptions.push_back(Preemption{id, job.job_id});
  for (int idx : chosen) Hold(pass, idx, g, job.job_id, std::nullopt);
  AddPending(pass, job, PendingCode::kWaitingForPreemption, PreemptingText(pass, job, shape, ids));
  return true;
}
}  // namespace llamafleet::sched::internal
