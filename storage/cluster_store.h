#ifndef LLAMAFLEET_STORAGE_CLUSTER_STORE_H_
#define LLAMAFLEET_STORAGE_CLUSTER_STORE_H_

// The cluster's durable state beside the jobs: workers, attempts and their tasks,
// checkpoints and metrics. Every change is a TxnFunction run through JobStore::Write, so it
// is group-committed with everything else and its job events are written in the same
// transaction as the state change they describe.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "storage/attempt_end_plan.h"
#include "storage/job_store.h"
#include "storage/queued_jobs.h"
#include "storage/usage_store.h"

namespace llamafleet {

struct TaskRecord {
  std::string task_id;
  int node_rank = 0;
  std::string worker;  // worker name
  int ranks = 0;       // GPUs or CPU ranks held
  v1::TaskState state = v1::TASK_STARTING;
};

struct AttemptRecord {
  int64_t job_id = 0;
  int attempt = 0;
  AttemptState state = AttemptState::kActive;
  absl::Time started;
  std::string master_addr;
  int master_port = 0;
  std::string resume_from;
  std::vector<TaskRecord> tasks;  // by node rank
  // An elastic gang's size change, leading the "scheduled" event's reason ("resized 3 → 2
  // nodes: worker w3 lost"); "" for none.
  std::string resize_note;
};

struct AttemptEnd {
  int64_t job_id = 0;
  int attempt = 0;
  AttemptOutcome outcome = AttemptOutcome::kSucceeded;
  std::string reason;             // human-readable; becomes the event's reason
  std::string excluded_worker;    // kNodeFault, kNodeDrained (a hung node)
  PriceTable pricing = {};        // prices the attempt's usage (storage/usage_store.h)
};

// --- Write operations (run with JobStore::Write / WriteAndWait).

// Job QUEUED → SCHEDULED with the attempt, its tasks and its "placed" phase (seconds: since
// the job last became QUEUED), also stored in `*queued_seconds` when given (read it once
// the write is done). FAILED_PRECONDITION if the job is no longer QUEUED (cancelled
// meanwhile): nothing is written.
TxnFunction StartAttemptTxn(AttemptRecord attempt, std::shared_ptr<double> queued_seconds = nullptr);
// Job SCHEDULED → RUNNING once every rank has started, with the attempt's
// "trainers_started" phase (seconds: since placed).
TxnFunction AttemptRunningTxn(int64_t job_id, int attempt);
TxnFunction SetTaskStateTxn(const std::string& task_id, const v1::TaskStatus& status);
// Closes the attempt and moves the job as PlanAttemptEnd (storage/attempt_end_plan.h)
// plans it for `end` and the job as this transaction reads it. The first end of an
// attempt records its usage (RecordAttemptUsage, priced by end.pricing).
TxnFunction EndAttemptTxn(AttemptEnd end);
// Job QUEUED → FAILED (e.g. its active deadline passed between attempts); a job no
// longer QUEUED is left as it is.
TxnFunction FailQueuedJobTxn(int64_t job_id, std::string reason);
// Job RUNNING/SCHEDULED → PREEMPTING.
TxnFunction BeginPreemptionTxn(int64_t job_id, std::string reason);
// A start-up phase of the job's current attempt (phase.name, seconds, detail, and its
// time when set, else the transaction's), stored as the attempt's phase and as an event ("startup", with
// `reason`) that leaves the state and status reason as they are. Ignored for another
// attempt or a finished job, and for a phase the attempt already has (the first report
// stands: no second row, no second event). StartAttemptTxn records "placed" and
// AttemptRunningTxn "trainers_started" themselves.
TxnFunction RecordStartupPhaseTxn(int64_t job_id, int attempt, v1::AttemptPhase phase, std::string reason);
// An event of `type` about the job's current attempt (e.g. "tokenizing" progress) that
// leaves the state and status reason as they are; ignored for another attempt or a job no
// longer SCHEDULED or RUNNING.
TxnFunction RecordAttemptNoteTxn(int64_t job_id, int attempt, std::string type, std::string reason);
// An event of `type` about the job in whatever state it is (a webhook's delivery after it
// ended), leaving the state and status reason as they are. NOT_FOUND without the job.
TxnFunction RecordJobNoteTxn(int64_t job_id, std::string type, std::string reason);
// Records a complete checkpoint (idempotent per job and step).
TxnFunction RecordCheckpointTxn(int64_t job_id, int attempt, const v1::CheckpointReport& report);
// Deletes the rows of checkpoints whose files retention has already removed.
TxnFunction ForgetCheckpointsTxn(int64_t job_id, std::vector<int64_t> steps);
TxnFunction UpsertWorkerTxn(const std::string& name, const v1::Inventory& inventory,
                            v1::WorkerState state);
TxnFunction SetWorkerStateTxn(const std::string& name, v1::WorkerState state);

// --- Reads.

// Attempts still active (with their tasks), for recovery after a restart.
absl::StatusOr<std::vector<AttemptRecord>> LoadActiveAttempts(JobStore& store);

// Jobs in `states` with their scheduling fields (SchedulableJob, storage/queued_jobs.h), by
// job id, read from SQLite. The scheduler's QUEUED jobs come from memory instead:
// JobStore::SnapshotQueuedJobs.
absl::StatusOr<std::vector<SchedulableJob>> LoadJobsInStates(JobStore& store,
                                                             const std::vector<v1::JobState>& states);
absl::StatusOr<std::vector<v1::Checkpoint>> ListCheckpoints(JobStore& store, int64_t job_id);
// Every attempt of the job, newest first, each with its tasks by node rank and its start-up
// phases in the order they were done, and an ended one with its recorded usage (an active
// one's: AddActiveAttemptUsage, storage/usage_store.h). An unknown job
// has no attempts (callers that must tell it apart check the job first).
absl::StatusOr<std::vector<v1::Attempt>> ListAttempts(JobStore& store, int64_t job_id);
// Attempts that ended with a failure class ("retryable", "node_fault", "permanent",
// "deadline", "preempted"), counted per class. Jobs deleted by ttl_after_finished take
// their attempts with them.
absl::StatusOr<std::map<std::string, int64_t>> CountAttemptFailures(JobStore& store);
// Finished jobs whose ttl_after_finished has passed at `now`.
absl::StatusOr<std::vector<int64_t>> ExpiredJobs(JobStore& store, absl::Time now);
// Deletes job `job_id`'s record; its named checkpoint dir stays its owner's
// (storage/deleted_job_dirs.h).
TxnFunction DeleteJobTxn(int64_t job_id);
// The same for a job that must have finished: NOT_FOUND without the job,
// FAILED_PRECONDITION (naming its state) while it has not finished.
TxnFunction DeleteFinishedJobTxn(int64_t job_id);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_CLUSTER_STORE_H_
