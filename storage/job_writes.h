#ifndef LLAMAFLEET_STORAGE_JOB_WRITES_H_
#define LLAMAFLEET_STORAGE_JOB_WRITES_H_

// Changes to jobs, as functions of a write transaction (TxnFunction), and the write that
// runs them on the generic writer (storage/writer.h). Every job change records its event
// in the same transaction; the events are published after the commit, in commit order.
// Other multi-table changes are composed the same way (storage/cluster_store.h).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/job.pb.h"
#include "common/clock.h"
#include "storage/queued_jobs.h"
#include "storage/sqlite.h"
#include "storage/writer.h"

namespace llamafleet {

// A write transaction as a TxnFunction sees it. Valid only during that call, on the
// writer thread. A function may run more than once (the writer retries a batch with a
// savepoint per write): each run gets a fresh Txn and must start from scratch.
class Txn {
 public:
  Txn(sqlite::Connection& conn, int64_t now_us) : conn_(conn), now_us_(now_us) {}
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;

  // A prepared statement for `sql`, cached on the writer connection; reset, no bindings.
  absl::StatusOr<sqlite::Statement*> Statement(const std::string& sql);
  // The job as stored now (nullopt if there is none).
  absl::StatusOr<std::optional<v1::Job>> LoadJob(int64_t job_id);
  // Moves `job` to `to` and records the event, published to subscribers after commit.
  // The job's status reason becomes `status_reason` (default: `reason`).
  absl::Status Transition(v1::Job* job, absl::string_view type, v1::JobState to,
                          absl::string_view reason,
                          std::optional<absl::string_view> status_reason = {});
  // Stores `event` of job `job_id` as it is (the job row is the caller's), published after
  // commit.
  absl::Status AddEvent(int64_t job_id, v1::JobEvent event);
  // A job this transaction created QUEUED: the queued-jobs view files it as it is after
  // the commit, instead of reading its row again.
  void AddQueued(int64_t job_id, SchedulableJob job) {
    queued_.emplace_back(job_id, std::move(job));
  }
  // Rows the last INSERT, UPDATE or DELETE changed.
  int64_t Changes() const { return sqlite3_changes(conn_.raw()); }
  // The rowid of the last row this connection inserted.
  int64_t LastInsertId() const { return sqlite3_last_insert_rowid(conn_.raw()); }
  // The store clock's time for this transaction.
  int64_t NowMicros() const { return now_us_; }

  std::vector<v1::JobEvent>& events() { return events_; }
  std::vector<std::pair<int64_t, SchedulableJob>>& queued() { return queued_; }

 private:
  sqlite::Connection& conn_;
  const int64_t now_us_;
  std::vector<v1::JobEvent> events_;
  std::vector<std::pair<int64_t, SchedulableJob>> queued_;
};
using TxnFunction = std::function<absl::Status(Txn& txn)>;

// A write of TxnFunctions, in order, in one transaction; with more than one, each in a
// savepoint of its own, so one that fails undoes only its own changes and the others
// commit. Each `done` gets its own function's result after the commit (or the
// transaction's error). After Apply, events() and queued() hold what the functions that
// succeeded recorded, for after the commit.
class JobWrite : public WriteOp {
 public:
  using Done = std::function<void(absl::Status)>;
  JobWrite(std::vector<std::pair<TxnFunction, Done>> fns, bool background, Clock* clock)
      : fns_(std::move(fns)), results_(fns_.size()), background_(background), clock_(clock) {}

  absl::Status Apply(sqlite::Connection& conn) override;
  void Complete(absl::Status status) override;
  bool background() const override { return background_; }
  size_t weight() const override { return fns_.size(); }

  const std::vector<v1::JobEvent>& events() const { return events_; }
  std::vector<std::pair<int64_t, SchedulableJob>>& queued() { return queued_; }

 private:
  std::vector<std::pair<TxnFunction, Done>> fns_;
  std::vector<absl::Status> results_;
  const bool background_;
  Clock* const clock_;
  std::vector<v1::JobEvent> events_;
  std::vector<std::pair<int64_t, SchedulableJob>> queued_;
};

// A claim on a directory (storage/dir_claims.h) that the coordinator found not to keep a
// submission out: job `job_id`'s claim through `field`.
struct PendingClaim {
  int64_t job_id = 0;
  std::string field;  // "checkpoint.dir" or "output.export_dir"
};

struct SubmitJobInput {
  v1::JobSpec spec;        // validated, defaults applied, paths normalized
  std::string owner;
  std::string idempotency_key;  // "" = none
  // RESOURCE_EXHAUSTED (nothing stored) if the owner would have more active (queued or
  // running) jobs than this; 0 = no limit.
  int64_t max_active_jobs = 0;
  // Put before field names in errors ("spec.", "jobs[3].spec.").
  std::string field_prefix = "spec.";
  // {k, b}: spec.depends_on[k] names job b of the same submission (b before this one);
  // the transaction stores b's id there (in submitted_spec too).
  std::vector<std::pair<int, int>> batch_parents = {};
  // The spec as the client wrote it (Job.submitted_spec), stored beside `spec`; unset: none.
  std::optional<v1::JobSpec> submitted_spec = {};
  // The job this one is resubmitted from (0: none), checked to exist when submitted.
  // Recorded on the job and in its "submitted" event. (A failed or cancelled job never
  // exported, so its export directory's claim no longer stands: storage/dir_claims.h.)
  int64_t derived_from = 0;
  // Other users' claims that clash with this job's directories but keep it out neither in
  // a dry run nor in the transaction (server/claim_judge.h decides which).
  std::vector<PendingClaim> pending_claims = {};
};

struct SubmitJobResult {
  v1::Job job;
  bool created = false;  // false: the idempotency key matched an existing job
};

struct CancelJobResult {
  v1::Job job;
  bool changed = false;
  std::string message;
};

// A submission: its inputs and, once its SubmitJobsTxn has run, its results.
struct SubmitBatch {
  std::vector<SubmitJobInput> inputs;
  std::vector<SubmitJobResult> results;  // one per input; created jobs without their spec
  // After the commit: the results, each created job with its input's spec moved in.
  std::vector<SubmitJobResult> TakeResults();
};

// Stores the batch's jobs, QUEUED with a "submitted" event: all or nothing (see
// JobStore::SubmitJobs for the errors; a standing claim on a job's own directory that is
// not among its pending_claims refuses it, storage/dir_claims.h). Fills batch->results.
TxnFunction SubmitJobsTxn(std::shared_ptr<SubmitBatch> batch);

class JobStore;

// Moves a job to `to` if it is in one of `from` (empty = any non-terminal state), with an
// event of `type`; FAILED_PRECONDITION otherwise, NOT_FOUND for no job. Fills *result.
TxnFunction TransitionJobTxn(int64_t job_id, std::vector<v1::JobState> from, v1::JobState to,
                             std::string type, std::string reason,
                             std::shared_ptr<CancelJobResult> result);
// Cancels a non-terminal job; a terminal one is left as it is (OK, changed = false, the
// message says why). Fills *result.
TxnFunction CancelJobTxn(int64_t job_id, std::string actor, std::string reason,
                         std::shared_ptr<CancelJobResult> result);

// The owner's active (queued or running) jobs: one COUNT over the jobs_by_owner_state
// index range, as the open transaction sees it.
absl::StatusOr<int64_t> CountActiveJobs(Txn& txn, const std::string& owner);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_JOB_WRITES_H_
