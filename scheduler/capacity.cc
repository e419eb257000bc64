#include "scheduler/capacity.h"

#include <algorithm>
#include <limits>
#include <map>

namespace llamafleet::sched::internal {

void IndexWorkers(PassState& pass) {
  const std::vector<Worker>& workers = pass.workers;
  std::vector<int> by_id(workers.size());
  for (size_t i = 0; i < by_id.size(); ++i) by_id[i] = static_cast<int>(i);
  std::sort(by_id.begin(), by_id.end(),
            [&workers](int a, int b) { return workers[a].id < workers[b].id; });
  // Worker indices below are positions in id order, so "ascending index" is by id.
  pass.order.reserve(workers.size());
  pass.state.reserve(workers.size());
  std::map<ShapeKey, int> class_of;
  for (int wi : by_id) {
    const Worker& w = workers[wi];
    if (pass.index.count(w.id)) continue;  // duplicate id: the first one wins
    int idx = static_cast<int>(pass.order.size());
    pass.index.emplace(w.id, idx);
    pass.order.push_back(&w);
    WorkerState s;
    s.gpus = std::max(0, w.gpus);
    s.free = s.raw = s.gpus;
    if (w.schedulable) {
      const int64_t memory = std::max<int64_t>(0, w.gpu_memory_bytes);
      auto [it, inserted] = class_of.emplace(ShapeKey{&w.instance_type, w.efa, &w.labels, memory},
                                             static_cast<int>(pass.classes.size()));
      if (inserted) {
        pass.classes.emplace_back();
        pass.classes.back().instance_type = &w.instance_type;
        pass.classes.back().efa = w.efa;
        pass.classes.back().gpu_memory = memory;
        pass.classes.back().labels = &w.labels;
      }
      s.cls = it->second;
      WorkerClass& c = pass.classes[s.cls];
      c.members.push_back(idx);
      c.max_gpus = std::max(c.max_gpus, s.gpus);
    }
    pass.state.push_back(std::move(s));
  }
}

void IndexRunning(PassState& pass) {
  const std::vector<RunningJob>& running = pass.running;
  pass.run.resize(running.size());
  pass.run_allocs.resize(running.size());
  pass.min_victim_priority = std::numeric_limits<int>::max();
  for (size_t r = 0; r < running.size(); ++r) {
    const RunningJob& job = running[r];
    int total = 0;
    for (const Allocation& a : job.allocations) {
      total += std::max(0, a.gpus);
      auto it = pass.index.find(a.worker_id);
      if (it == pass.index.end() || a.gpus <= 0) continue;
      pass.run_allocs[r].emplace_back(it->second, a.gpus);
      WorkerState& s = pass.state[it->second];
      s.free -= a.gpus;
      s.jobs.emplace_back(static_cast<int>(r), a.gpus);
      s.releases.emplace_back(job.expected_end.value_or(absl::InfiniteFuture()), a.gpus);
      if (job.preempting) s.freeing += a.gpus;
    }
    RunState& rs = pass.run[r];
    rs.job_id = job.job_id;
    rs.started = job.started;
    rs.priority = job.priority;
    rs.total_gpus = total;
    rs.preempting = job.preempting;
    rs.cooling = pass.now - job.last_preempted < pass.config.preemption_cooldown;
    QueueFor(pass, job.queue).used += total;
    if (!job.preempting) {
      pass.min_victim_priority = std::min(pass.min_victim_priority, job.priority);
    }
  }
  for (WorkerClass& c : pass.classes) {
    c.by_free.resize(c.max_gpus + 1);
    c.raw_count.assign(c.max_gpus + 1, 0);
    c.cap_count.assign(c.max_gpus + 1, 0);
    for (int idx : c.members) {
      WorkerState& s = pass.state[idx];
      s.free = s.raw = std::max(0, s.free);
      c.by_free[s.free].insert(c.by_free[s.free].end(), idx);
      ++c.raw_count[s.raw];
      ++c.cap_count[s.gpus];
      if (s.freeing > 0) c.freeing.push_back(idx);
    }
  }
}

QueueState& QueueFor(PassState& pass, const std::string& name) {
  auto [it, inserted] = pass.queue_state.try_emplace(name);
  if (inserted) {
    auto q = pass.queues.find(name);
    if (q != pass.queues.end()) it->second.quota = q->second.gpu_quota;
  }
  return it->second;
}

Shape& ShapeFor(PassState& pass, const PendingJob& job) {
  ShapeKey key{&job.instance_type, job.efa_per_node, &job.node_labels, job.memory_per_gpu_bytes};
  auto it = pass.shapes.find(key);
  if (it != pass.shapes.end()) return it->second;
  Shape& shape = pass.shapes[key];
  for (size_t ci = 0; ci < pass.classes.size(); ++ci) {
    const WorkerClass& c = pass.classes[ci];
    if (!job.instance_type.empty() && *c.instance_type != job.instance_type) continue;
    if (c.efa < job.efa_per_node) continue;
    bool labels_match = true;
    for (const auto& [k, v] : job.node_labels) {
      auto l = c.labels->find(k);
      if (l == c.labels->end() || l->second != v) {
        labels_match = false;
        break;
      }
    }
    if (!labels_match) continue;
    if (c.gpu_memory > 0 && c.gpu_memory < job.memory_per_gpu_bytes) {
      shape.largest_too_small = std::max(shape.largest_too_small, c.gpu_memory);
      continue;
    }
    shape.classes.push_back(static_cast<int>(ci));
  }
  return shape;
}

void SetFree(PassState& pass, int idx, int free, int raw) {
  ++pass.state_version;
  WorkerState& s = pass.state[idx];
  WorkerClass& c = pass.classes[s.cls];
  if (free != s.free) {
    c.by_free[s.free].erase(idx);
    c.by_free[free].insert(idx);
    s.free = free;
  }
  if (raw != s.raw) {
    --c.raw_count[s.raw];
    ++c.raw_count[raw];
    s.raw = raw;
  }
}

void Hold(PassState& pass, int idx, int gpus, int64_t job_id, std::optional<absl::Time> until) {
  WorkerState& s = pass.state[idx];
  gpus = std::min(gpus, s.free);
  if (gpus <= 0) return;
  if (until) {
    s.res_held += gpus;
    s.res_until = std::min(s.res_until, *until);
  }
  SetFree(pass, idx, s.free - gpus, s.raw);
  WorkerClass& c = pass.classes[s.cls];
  if (c.holders.empty() || c.holders.back() != job_id) {
    c.holders.push_back(job_id);
    ++pass.holds_version;
  }
}

void Take(PassState& pass, int idx, int gpus, const PendingJob& job) {
  WorkerState& s = pass.state[idx];
  int from_free = std::min(gpus, s.free);
  int from_held = gpus - from_free;  // only a job ending before the reservation
  s.res_held -= from_held;
  SetFree(pass, idx, s.free - from_free, s.raw - gpus);
  s.releases.emplace_back(
      job.expected_duration ? pass.now + *job.expected_duration : absl::InfiniteFuture(), gpus);
  s.releases_sorted = false;
}

namespace {

bool InShape(const Shape& shape, int cls) {
  return cls >= 0 && std::binary_search(shape.classes.begin(), shape.classes.end(), cls);
}

// Matching, non-excluded workers with at least g in the per-class counts `count(c, f)`
// and per-worker value `value(state)` (used to discount excluded workers).
template <typename CountFn, typename ValueFn>
int CountAtLeast(const PassState& pass, const PendingJob& job, const Shape& shape, int g,
                 CountFn count, ValueFn value) {
  int n = 0;
  for (int ci : shape.classes) {
    const WorkerClass& c = pass.classes[ci];
    for (int f = g; f <= c.max_gpus; ++f) n += count(c, f);
  }
  for (const std::string& id : job.excluded_workers) {
    auto it = pass.index.find(id);
    if (it == pass.index.end()) continue;
    const WorkerState& s = pass.state[it->second];
    if (InShape(shape, s.cls) && value(s) >= g) --n;
  }
  return n;
}

}  // namespace

int CountFree(const PassState& pass, const PendingJob& job, const Shape& shape, int g) {
  return CountAtLeast(
      pass, job, shape, g,
      [](const WorkerClass& c, int f) { return static_cast<int>(c.by_free[f].size()); },
      [](const WorkerState& s) { return s.free; });
}

int CountRaw(const PassState& pass, const PendingJob& job, const Shape& shape, int g) {
  return CountAtLeast(
      pass, job, shape, g, [](const WorkerClass& c, int f) { return c.raw_count[f]; },
      [](const WorkerState& s) { return s.raw; });
}

int CountCapacity(const PassState& pass, const PendingJob& job, const Shape& shape, int g) {
  return CountAtLeast(
      pass, job, shape, g, [](const WorkerClass& c, int f) { return c.cap_count[f]; },
      [](const WorkerState& s) { return s.gpus; });
}

}  // namespace llamafleet::sched::internal
