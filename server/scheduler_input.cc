#include "server/scheduler_input.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "clients/jobspec/jobspec.h"
#include "google/protobuf/util/time_util.h"

namespace llamafleet {

using google::protobuf::util::TimeUtil;

int WorkerSlots(const v1::Inventory& inv) {
  return inv.gpus_size() > 0 ? inv.gpus_size() : inv.cpu_ranks();
}

sched::PendingJob MakePendingJob(int64_t id, const SchedulableJob& j,
                                 const std::vector<WorkerView>& workers) {
  const v1::JobSpec& spec = j.job.spec();
  const int64_t deadline = spec.run_policy().active_deadline_seconds();
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
  if (!p.excluded_workers.empty()) {
    // A node fault keeps the worker out of the job's next placement only while the
    // cluster could run the job without it: with no spare (two workers, one lost and
    // back after a network cut) the job would otherwise wait forever.
    const int64_t need = spec.resources().min_nodes() > 0 ? spec.resources().min_nodes()
                                                           : spec.resources().nodes();
    int64_t others = 0;
    for (const WorkerView& w : workers) others += p.excluded_workers.count(w.name) ? 0 : 1;
    if (others < need) p.excluded_workers.clear();
  }
  p.last_preempted = j.last_preempted;
  if (deadline > 0) p.expected_duration = absl::Seconds(deadline);
  if (std::optional<v1::MemoryEstimate> e = EstimateJobMemory(spec)) {
    p.memory_per_gpu_bytes = e->total_bytes();
  }
  p.min_nodes = spec.resources().min_nodes();  // elastic: 0 or >= 1 (validated)
  return p;
}

namespace {

// One body for both kinds of queue (a vector in tests, the store's in-memory snapshot in
// the coordinator): `in.jobs` points into `queued`, which must outlive the input.
template <typename Jobs>
SchedulerInput Build(const Jobs& queued, const std::vector<WorkerView>& workers,
                     const std::map<int64_t, AttemptTracker>& attempts, absl::Time now) {
  SchedulerInput in;
  for (const SchedulableJob& j : queued) {
    int64_t id;
    if (!absl::SimpleAtoi(j.job.id(), &id)) continue;
    if (attempts.count(id)) continue;  // previous attempt still stopping
    const v1::JobSpec& spec = j.job.spec();
    const int64_t deadline = spec.run_policy().active_deadline_seconds();
    if (deadline > 0 && j.first_start != absl::InfinitePast() &&
        now - j.first_start > absl::Seconds(deadline)) {
      in.deadline_passed[id] = absl::StrCat("active_deadline_seconds (", deadline, ") exceeded");
      continue;
    }
    if (j.eligible > now) {
      v1::PendingInfo& info = in.held_back[id];
      info.set_code("BACKOFF");
      info.set_message(absl::StrCat("restarting after backoff in ",
                                    absl::FormatDuration(absl::Ceil(j.eligible - now, absl::Seconds(1)))));
      *info.mutable_estimated_start() =
          TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(j.eligible));
      continue;
    }
    in.pending.push_back(MakePendingJob(id, j, workers));
    in.jobs[id] = &j;
  }
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
    in.workers.push_back(std::move(sw));
  }
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
    in.running.push_back(std::move(r));
  }
  return in;
}

}  // namespace

SchedulerInput BuildSchedulerInput(const std::vector<SchedulableJob>& queued,
                                   const std::vector<WorkerView>& workers,
                                   const std::map<int64_t, AttemptTracker>& attempts,
                                   absl::Time now) {
  return Build(queued, workers, attempts, now);
}

SchedulerInput BuildSchedulerInput(const QueuedJobsSnapshot& queued,
                                   const std::vector<WorkerView>& workers,
                                   const std::map<int64_t, AttemptTracker>& attempts,
                                   absl::Time now) {
  return Build(queued, workers, attempts, now);
}

}  // namespace llamafleet
