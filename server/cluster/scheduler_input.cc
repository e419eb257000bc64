#include "server/cluster/scheduler_input.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "jobspec/dependencies.h"
#include "jobspec/jobspec.h"
#include "jobspec/sweep.h"
#include "google/protobuf/util/time_util.h"

namespace llamafleet {

using google::protobuf::util::TimeUtil;

int WorkerSlots(const v1::Inventory& inv) {
  return inv.gpus_size() > 0 ? inv.gpus_size() : inv.cpu_ranks();
}

namespace {

// What a pass does with one queued job.
enum class Disposition { kSkip, kDeadlinePassed, kDependencyFailed, kWaitingForParent, kBackoff, kPending };

// The rules that depend on the pass (attempts, now), in the order of the header's list.
Disposition Classify(const SchedulableJob& j, int64_t id,
                     const std::map<int64_t, AttemptTracker>& attempts, absl::Time now,
                     const DependencyVerdict& dependencies) {
  if (attempts.count(id) > 0) return Disposition::kSkip;  // previous attempt still stopping
  const int64_t deadline_seconds = j.job.spec().run_policy().active_deadline_seconds();
  if (deadline_seconds > 0 && j.first_start != absl::InfinitePast() &&
      now - j.first_start > absl::Seconds(deadline_seconds)) {
    return Disposition::kDeadlinePassed;
  }
  if (dependencies.kind == DependencyVerdict::kImpossible) return Disposition::kDependencyFailed;
  if (dependencies.kind == DependencyVerdict::kWaiting) return Disposition::kWaitingForParent;
  if (j.eligible > now) return Disposition::kBackoff;
  return Disposition::kPending;
}

std::string DeadlineReason(const SchedulableJob& j) {
  return absl::StrCat("active_deadline_seconds (",
                      j.job.spec().run_policy().active_deadline_seconds(), ") exceeded");
}

v1::PendingInfo BackoffInfo(const SchedulableJob& j, absl::Time now) {
  v1::PendingInfo info;
  info.set_code("BACKOFF");
  info.set_message(absl::StrCat("restarting after backoff in ",
                                absl::FormatDuration(absl::Ceil(j.eligible - now, absl::Seconds(1)))));
  *info.mutable_estimated_start() =
      TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(j.eligible));
  return info;
}

// The part of a pending job that depends only on the stored job. Exclusions are the
// stored ones.
sched::PendingJob PendingJobOf(int64_t id, const SchedulableJob& j) {
  const v1::JobSpec& spec = j.job.spec();
  sched::PendingJob p;
  p.job_id = id;
  p.queue = spec.queue();
  p.priority = spec.priority();
  p.queued_since = j.queued_since;
  p.nodes = spec.resources().nodes();
  p.gpus_per_node = spec.resources().gpus_per_node();
  p.efa_per_node = spec.resources().efa_per_node();
  p.instance_type = spec.resources().instance_type();
  p.node_labels.insert(spec.resources().node_labels().begin(),
                       spec.resources().node_labels().end());
  p.excluded_workers = j.excluded_workers;
  p.last_preempted = j.last_preempted;
  const int64_t deadline = spec.run_policy().active_deadline_seconds();
  if (deadline > 0) p.expected_duration = absl::Seconds(deadline);
  if (std::optional<v1::MemoryEstimate> e = EstimateJobMemory(spec)) {
    p.memory_per_gpu_bytes = e->total_bytes();
  }
  p.min_nodes = spec.resources().min_nodes();  // elastic: 0 or >= 1 (validated)
  return p;
}

// A node fault keeps the worker out of the job's next placement only while the cluster
// could run the job without it: with no spare (two workers, one lost and back after a
// network cut) the job would otherwise wait forever. True: drop the exclusions this pass.
bool ExclusionsStrand(const sched::PendingJob& p, const std::vector<WorkerView>& workers) {
  if (p.excluded_workers.empty()) return false;
  const int64_t need = p.min_nodes > 0 ? p.min_nodes : p.nodes;
  int64_t others = 0;
  for (const WorkerView& w : workers) others += p.excluded_workers.count(w.name) ? 0 : 1;
  return others < need;
}

std::vector<sched::Worker> SchedulerWorkers(const std::vector<WorkerView>& workers) {
  std::vector<sched::Worker> out;
  out.reserve(workers.size());
  for (const WorkerView& w : workers) {
    sched::Worker sw;
    sw.id = w.name;
    sw.instance_type = w.inventory.instance_type();
    sw.labels.insert(w.inventory.labels().begin(), w.inventory.labels().end());
    sw.gpus = WorkerSlots(w.inventory);
    sw.efa = w.inventory.efa_devices();
    for (const auto& gpu : w.inventory.gpus()) {  // the smallest GPU bounds a job's shard
      if (sw.gpu_memory_bytes == 0 || gpu.memory_bytes() < sw.gpu_memory_bytes) {
        sw.gpu_memory_bytes = gpu.memory_bytes();
      }
    }
    sw.schedulable = w.schedulable;
    out.push_back(std::move(sw));
  }
  return out;
}

std::vector<sched::RunningJob> SchedulerRunning(const std::map<int64_t, AttemptTracker>& attempts,
                                                absl::Time now) {
  std::vector<sched::RunningJob> out;
  out.reserve(attempts.size());
  for (const auto& [job_id, a] : attempts) {
    sched::RunningJob r;
    r.job_id = job_id;
    r.queue = a.spec.queue();
    r.priority = a.spec.priority();
    r.allocations = a.HeldAllocations();
    r.started = a.record.started;
    r.last_preempted = a.last_preempted;
    r.expected_end = a.ExpectedEnd(now);
    r.preempting = a.stopping;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

sched::PendingJob MakePendingJob(int64_t id, const SchedulableJob& j,
                                 const std::vector<WorkerView>& workers) {
  sched::PendingJob p = PendingJobOf(id, j);
  if (ExclusionsStrand(p, workers)) p.excluded_workers.clear();
  return p;
}

namespace {

// One body for both kinds of queue (a vector in tests, the store's in-memory snapshot in
// the coordinator): `in.jobs` points into `queued`, which must outlive the input.
template <typename Jobs>
SchedulerInput Build(const Jobs& queued, const std::vector<WorkerView>& workers,
                     const std::map<int64_t, AttemptTracker>& attempts, absl::Time now,
                     const std::map<int64_t, v1::JobState>& parents) {
  SchedulerInput in;
  std::set<int64_t> awaited;
  // Per throttled sweep: the jobs holding workers (attempts), and those offered this pass.
  struct SweepUse {
    std::vector<int64_t> running;
    uint32_t offered = 0;
  };
  std::map<std::string, SweepUse> sweeps;
  for (const auto& [job_id, a] : attempts) {
    if (std::string key = SweepThrottleKey(a.owner, a.spec); !key.empty()) sweeps[key].running.push_back(job_id);
  }
  for (const SchedulableJob& j : queued) {
    int64_t id;
    if (!absl::SimpleAtoi(j.job.id(), &id)) continue;
    const DependencyVerdict dependencies = j.job.spec().depends_on().empty()
                                               ? DependencyVerdict{}
                                               : EvaluateDependencies(j.job.spec(), parents);
    switch (Classify(j, id, attempts, now, dependencies)) {
      case Disposition::kSkip:
        in.held_by_attempt.push_back(id);
        continue;
      case Disposition::kDeadlinePassed:
        in.deadline_passed[id] = DeadlineReason(j);
        continue;
      case Disposition::kDependencyFailed:
        in.dependency_failed[id] = dependencies.message;
        continue;
      case Disposition::kWaitingForParent: {
        v1::PendingInfo info;
        info.set_code("DEPENDENCY");
        info.set_message(dependencies.message);
        in.held_back[id] = std::move(info);
        for (int64_t parent : ParentIds(j.job.spec())) awaited.insert(parent);
        continue;
      }
      case Disposition::kBackoff:
        in.held_back[id] = BackoffInfo(j, now);
        continue;
      case Disposition::kPending:
        break;
    }
    if (std::string key = SweepThrottleKey(j.job.owner(), j.job.spec()); !key.empty()) {
      const v1::SweepSpec& sweep = j.job.spec().sweep();
      SweepUse& use = sweeps[key];
      if (use.running.size() + use.offered >= sweep.max_concurrent()) {
        v1::PendingInfo info;
        info.set_code("SWEEP");
        info.set_message(absl::StrCat("sweep ", sweep.point().sweep(), ": ", use.running.size(), " of ",
                                      sweep.max_concurrent(), " running",
                                      use.offered > 0 ? absl::StrCat(", ", use.offered, " next in line") : ""));
        in.held_back[id] = std::move(info);
        awaited.insert(use.running.begin(), use.running.end());
        continue;
      }
      ++use.offered;
    }
    in.pending.push_back(MakePendingJob(id, j, workers));
    in.jobs[id] = &j;
  }
  in.awaited_jobs.assign(awaited.begin(), awaited.end());
  in.workers = SchedulerWorkers(workers);
  in.running = SchedulerRunning(attempts, now);
  return in;
}

}  // namespace

SchedulerInput BuildSchedulerInput(const std::vector<SchedulableJob>& queued,
                                   const std::vector<WorkerView>& workers,
                                   const std::map<int64_t, AttemptTracker>& attempts,
                                   absl::Time now, const std::map<int64_t, v1::JobState>& parents) {
  return Build(queued, workers, attempts, now, parents);
}

SchedulerInput BuildSchedulerInput(const QueuedJobsSnapshot& queued,
                                   const std::vector<WorkerView>& workers,
                                   const std::map<int64_t, AttemptTracker>& attempts,
                                   absl::Time now, const std::map<int64_t, v1::JobState>& parents) {
  return Build(queued, workers, attempts, now, parents);
}

}  // namespace llamafleet
