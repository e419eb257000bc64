#ifndef LLAMAFLEET_SERVER_SCHEDULER_INPUT_H_
#define LLAMAFLEET_SERVER_SCHEDULER_INPUT_H_

// The scheduler's input, built from what the coordinator holds: the queued jobs as
// stored, the live workers and the active attempts. Pure: same arguments, same result;
// no I/O, no clock of its own.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "scheduler/scheduler.h"
#include "server/attempt_tracker.h"
#include "storage/cluster_store.h"
#include "storage/queued_jobs.h"

namespace llamafleet {

// A worker as the scheduler needs it.
struct WorkerView {
  std::string name;
  v1::Inventory inventory;
  bool schedulable = false;  // connected and not lost
};

// Slots a worker offers: its GPUs, or its CPU ranks on a CPU-only worker.
int WorkerSlots(const v1::Inventory& inventory);

struct SchedulerInput {
  std::vector<sched::PendingJob> pending;
  std::vector<sched::Worker> workers;
  std::vector<sched::RunningJob> running;
  // Queued jobs that are not offered to the scheduler this pass, with why (BACKOFF).
  std::map<int64_t, v1::PendingInfo> held_back;
  // Queued jobs whose active deadline passed between attempts: they fail from the queue.
  std::map<int64_t, std::string> deadline_passed;  // job → reason
  // The stored job behind each pending job (points into `queued`).
  std::map<int64_t, const SchedulableJob*> jobs;
};

// Rules, in order, for each queued job:
//   - a job that still has an attempt (its previous one is stopping) is left out;
//   - a job started before whose active_deadline_seconds has passed since its first
//     start goes to deadline_passed;
//   - a job in its restart backoff (eligible > now) goes to held_back as BACKOFF with
//     the time it becomes eligible;
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
                                   absl::Time now);
// The same over the store's in-memory view of the queue (JobStore::SnapshotQueuedJobs).
SchedulerInput BuildSchedulerInput(const QueuedJobsSnapshot& queued,
                                   const std::vector<WorkerView>& workers,
                                   const std::map<int64_t, AttemptTracker>& attempts,
                                   absl::Time now);

// BuildSchedulerInput for the coordinator's passes, kept across them: a queue entry is an
// immutable object shared by the store's view (a commit that changes a queued job
// replaces its entry), so its conversion to a sched::PendingJob (spec fields, labels,
// memory estimate) is made once, when the entry first appears, and reused by every pass
// while the entry stays: a pass converts only the entries that changed since the last.
// The rules that depend on the pass (attempts, deadlines, backoff, exclusions against the current
// workers) are applied every pass, as BuildSchedulerInput does; the result is the same as
// BuildSchedulerInput's for the same queue. Not thread-safe: one caller (the manager's
// strand).
class PendingJobCache {
 public:
  struct Input {
    std::vector<const sched::PendingJob*> pending;  // in job id order
    std::vector<sched::Worker> workers;
    std::vector<sched::RunningJob> running;
    std::map<int64_t, v1::PendingInfo> held_back;
    std::map<int64_t, std::string> deadline_passed;
    // Queued jobs left out because their previous attempt is still active, in id order.
    std::vector<int64_t> held_by_attempt;
  };

  // The input for one pass over `queued` (the whole queue). Valid until the next Build or
  // Update (it points into the cache, which holds the entries it was built from).
  // `workers_version` names `workers`: the same version as the last call's means the
  // same workers, whose conversion is reused.
  const Input& Build(const QueuedJobsSnapshot& queued, const std::vector<WorkerView>& workers,
                     uint64_t workers_version, const std::map<int64_t, AttemptTracker>& attempts,
                     absl::Time now);
  // The stored job behind a pending job of the last Build or Update, or null.
  const SchedulableJob* Job(int64_t id) const;

  // Queue entries converted by the last Build or Update (the rest were reused).
  size_t converted() const { return converted_; }

 private:
  struct Cached {
    QueuedJobsSnapshot::Entry entry;
    sched::PendingJob job;
    // What the pass-dependent rules read, copied out of the entry.
    int64_t deadline_seconds = 0;
    absl::Time first_start;
    absl::Time eligible;
  };
  Cached Convert(int64_t id, QueuedJobsSnapshot::Entry entry);
  void Apply(const QueuedJobsSnapshot& queued);
  const Input& Assemble(const std::vector<WorkerView>& workers, uint64_t workers_version,
                        const std::map<int64_t, AttemptTracker>& attempts, absl::Time now);

  std::map<int64_t, Cached> jobs_;
  std::deque<sched::PendingJob> adjusted_;  // this pass's copies with exclusions dropped
  Input input_;
  size_t converted_ = 0;
  std::optional<uint64_t> workers_version_;  // of input_.workers
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_SCHEDULER_INPUT_H_
