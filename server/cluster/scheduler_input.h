#ifndef LLAMAFLEET_SERVER_CLUSTER_SCHEDULER_INPUT_H_
#define LLAMAFLEET_SERVER_CLUSTER_SCHEDULER_INPUT_H_

// The scheduler's input, built from what the coordinator holds: the queued jobs as
// stored, the live workers and the active attempts. Pure: same arguments, same result;
// no I/O, no clock of its own.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "scheduler/scheduler.h"
#include "server/cluster/attempt_tracker.h"
#include "storage/cluster_store.h"
#include "storage/queued_jobs.h"

namespace llamafleet {

// A worker as the scheduler needs it.
struct WorkerView {
  std::string name;
  v1::Inventory inventory;
  bool schedulable = false;  // connected, not lost and not drained
};

// Slots a worker offers: its GPUs, or its CPU ranks on a CPU-only worker.
int WorkerSlots(const v1::Inventory& inventory);

struct SchedulerInput {
  std::vector<sched::PendingJob> pending;
  std::vector<sched::Worker> workers;
  std::vector<sched::RunningJob> running;
  // Queued jobs that are not offered to the scheduler this pass, with why (DEPENDENCY,
  // BACKOFF, SWEEP).
  std::map<int64_t, v1::PendingInfo> held_back;
  // Queued jobs whose active deadline passed between attempts: they fail from the queue.
  std::map<int64_t, std::string> deadline_passed;  // job → reason
  // Queued jobs a dependency of which can no longer hold: they are cancelled.
  std::map<int64_t, std::string> dependency_failed;  // job → reason
  // The jobs whose end others held back wait for, in id order: the parents of DEPENDENCY
  // jobs and the jobs holding a SWEEP throttle. One of them ending is worth a pass at once.
  std::vector<int64_t> awaited_jobs;
  // Queued jobs left out because their previous attempt is still active, in id order.
  std::vector<int64_t> held_by_attempt;
  // The stored job behind each pending job (points into `queued`).
  std::map<int64_t, const SchedulableJob*> jobs;
};

// Rules, in order, for each queued job:
//   - a job that still has an attempt (its previous one is stopping) is left out, in
//     held_by_attempt;
//   - a job started before whose active_deadline_seconds has passed since its first
//     start goes to deadline_passed;
//   - a job whose depends_on can no longer hold goes to dependency_failed; one still
//     waiting for a parent goes to held_back as DEPENDENCY ("waiting for job 41
//     (RUNNING)"), its parents to awaited_jobs (jobspec/dependencies.h; `parents` holds
//     the state of every parent the store still has);
//   - a job in its restart backoff (eligible > now) goes to held_back as BACKOFF with
//     the time it becomes eligible;
//   - a job of a sweep with max_concurrent (jobspec/sweep.h) goes to held_back as SWEEP
//     when that many jobs of its sweep (same owner and sweep name) have attempts or were
//     offered earlier in this pass, in queue order: "sweep lr-rank: 2 of 2 running", or
//     "sweep lr-rank: 1 of 2 running, 1 next in line" (the jobs with attempts go to
//     awaited_jobs);
//   - otherwise it is pending, with its last preemption, its node-fault exclusions
//     (dropped when fewer workers than it needs are known besides the excluded ones: the
//     job could never start without them) and, when it has an active
//     deadline, that as its expected duration (it will not run longer; backfill may use it).
// Workers: schedulable when connected and not lost, with WorkerSlots GPUs. Running jobs:
// every attempt, holding only its tasks that are not terminal, with its last preemption
// time, its expected end (AttemptTracker::ExpectedEnd) and `preempting` once stopping.
// One queued job as the scheduler sees it (the "otherwise it is pending" rule above):
// also used to replay the pass a running elastic job would meet if it were queued again.
sched::PendingJob MakePendingJob(int64_t id, const SchedulableJob& job,
                                 const std::vector<WorkerView>& workers);

SchedulerInput BuildSchedulerInput(const std::vector<SchedulableJob>& queued,
                                   const std::vector<WorkerView>& workers,
                                   const std::map<int64_t, AttemptTracker>& attempts,
                                   absl::Time now,
                                   const std::map<int64_t, v1::JobState>& parents = {});
// The same over the store's in-memory view of the queue (JobStore::SnapshotQueuedJobs):
// what each scheduling pass reads.
SchedulerInput BuildSchedulerInput(const QueuedJobsSnapshot& queued,
                                   const std::vector<WorkerView>& workers,
                                   const std::map<int64_t, AttemptTracker>& attempts,
                                   absl::Time now,
                                   const std::map<int64_t, v1::JobState>& parents = {});

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_SCHEDULER_INPUT_H_
