#include "server/cluster/elastic_grow.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llamafleet {

std::string GrowBlocked(const GrowCheck& c, absl::Time now) {
  const sched::PendingJob& job = c.job;
  if (job.min_nodes <= 0 || job.min_nodes >= job.nodes) return "not elastic";
  if (c.nodes_now >= job.nodes) {
    return absl::StrCat("already on ", c.nodes_now, " of ", job.nodes, " nodes");
  }
  if (!c.running) return "not running";
  if (!c.checkpoint_recorded) return "no new checkpoint";
  if (c.total_steps > 0 && c.checkpoint_step >= c.total_steps) return "the checkpoint is the last step's";
  if (now - c.attempt_started < c.cooldown) {
    return absl::StrCat("cooldown: the attempt started ", absl::FormatDuration(now - c.attempt_started),
                        " ago (elastic_cooldown_seconds ", absl::ToInt64Seconds(c.cooldown), ")");
  }
  return "";
}

GrowDecision DecideGrow(const GrowCheck& c, const std::vector<sched::PendingJob>& pending,
                        const std::vector<sched::Worker>& workers,
                        const std::vector<sched::RunningJob>& running,
                        const std::map<std::string, sched::QueueConfig>& queues,
                        const sched::Scheduler& scheduler, absl::Time now) {
  GrowDecision d;
  const sched::PendingJob& job = c.job;
  d.why = GrowBlocked(c, now);
  if (!d.why.empty()) return d;
  // Cheap first: a worker that could take a node besides the gang's own.
  const std::set<std::string> mine(c.workers_now.begin(), c.workers_now.end());
  std::map<std::string, int> used;
  for (const sched::RunningJob& r : running) {
    for (const sched::Allocation& a : r.allocations) used[a.worker_id] += a.gpus;
  }
  bool candidate = false;
  for (const sched::Worker& w : workers) {
    if (w.schedulable && !mine.count(w.id) && w.gpus - used[w.id] >= job.gpus_per_node) {
      candidate = true;
      break;
    }
  }
  if (!candidate) {
    d.why = "no free worker";
    return d;
  }

  // The pass after the attempt's end.
  std::vector<sched::RunningJob> others;
  for (const sched::RunningJob& r : running) {
    if (r.job_id != job.job_id) others.push_back(r);
  }
  std::vector<sched::PendingJob> queue;
  for (const sched::PendingJob& p : pending) {
    if (p.job_id != job.job_id) queue.push_back(p);
  }
  queue.push_back(job);
  const sched::Decisions replay = scheduler.Schedule(queue, workers, others, queues, now);
  const sched::Placement* placed = nullptr;
  for (const sched::Placement& p : replay.placements) {
    if (p.job_id == job.job_id) {
      placed = &p;
      continue;
    }
    for (const sched::Allocation& a : p.allocations) {
      if (mine.count(a.worker_id)) {
        d.why = absl::StrCat("job ", p.job_id, " ahead would take worker ", a.worker_id);
        return d;
      }
    }
  }
  if (placed == nullptr || static_cast<int>(placed->allocations.size()) <= c.nodes_now) {
    d.why = placed == nullptr
                ? "it would not be placed again at once"
                : absl::StrCat("it would get ", placed->allocations.size(), " nodes, not more than ",
                               c.nodes_now);
    return d;
  }
  d.grow = true;
  d.nodes_after = static_cast<int>(placed->allocations.size());
  for (const sched::Allocation& a : placed->allocations) {
    if (!mine.count(a.worker_id)) d.added_workers.push_back(a.worker_id);
  }
  std::sort(d.added_workers.begin(), d.added_workers.end());
  d.why = absl::StrCat("capacity returned: ", d.nodes_after, " nodes free for it");
  return d;
}

}  // namespace llamafleet
