#ifndef LLAMAFLEET_STORAGE_JOB_STORE_H_
#define LLAMAFLEET_STORAGE_JOB_STORE_H_

// The coordinator's durable state: jobs, their events, in one SQLite database (WAL).
//
// Writes go through one writer thread that batches whatever is waiting into one
// transaction (group commit): a caller's callback runs only after the transaction that
// holds its write has committed (with synchronous=FULL: after fsync), so an
// acknowledgement built on it survives kill -9 and power loss. Reads use a pool of
// separate connections and never wait for the writer (WAL).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llamafleet/v1/job.pb.h"
#include "scheduler/clock.h"
#include "storage/queued_jobs.h"
#include "storage/sqlite.h"

namespace llamafleet {

struct JobStoreOptions {
  // Database file; created with its schema if missing. Its directory must exist.
  std::string path;
  // PRAGMA synchronous: FULL (fsync every commit) when true, NORMAL otherwise.
  bool synchronous_full = true;
  // Batch waiting writes into one transaction; false = one transaction per write
  // (the baseline the benchmark compares against).
  bool group_commit = true;
  // Upper bound of writes per transaction.
  int max_batch = 1024;
  // Upper bound of background writes (JobStore::Write, WriteEach: the coordinator's own
  // bookkeeping; a WriteEach counts each of its functions) per transaction; writes a
  // client waits for (submissions, cancellations) take the rest of max_batch first. See
  // JobStore::WriterLoop. 32: dispatch_bench's gang burst (500 gangs, 1,000 task
  // reports) put the coordinator's submit p99 at 42-47 ms with 256 and 22-29 ms with
  // 32, admissions/s the same (medians 1,069 and 1,074 over 7 runs each); 8 cut the tail
  // further in some runs but slowed admissions in others.
  int max_background = 32;
  // PRAGMA max_page_count for the writer (0 = SQLite's default). Tests use it to make
  // the database "full" without filling a disk.
  int64_t max_page_count = 0;
  // Read connections in the pool.
  int read_connections = 4;
  // Checkpoint the WAL into the database (in the background) once it has this many pages.
  int checkpoint_pages = 1000;
  // Write the WAL full of zeros at open (1.5 x checkpoint_pages frames, ~15 ms), so that
  // commits overwrite it instead of growing it (a shorter fdatasync). False for one-shot
  // tools that make a write or two and close.
  bool preallocate_wal = true;
  // Time source for timestamps. Not owned; must outlive the store.
  Clock* clock = Clock::Real();
};

// The newest schema version this build knows (PRAGMA user_version).
int CurrentSchemaVersion();

struct SubmitJobInput {
  v1::JobSpec spec;        // validated, defaults applied, paths normalized
  std::string owner;
  std::string idempotency_key;  // "" = none
  // RESOURCE_EXHAUSTED (nothing stored) if the owner would have more active (queued or
  // running) jobs than this; 0 = no limit.
  int64_t max_active_jobs = 0;
  // Put before field names in errors ("spec.", "jobs[3].spec.").
  std::string field_prefix = "spec.";
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

struct ListJobsQuery {
  std::vector<v1::JobState> states;  // any of; empty = all
  std::string queue;                 // "" = any
  std::string owner;                 // "" = any
  std::vector<std::pair<std::string, std::string>> labels;  // all must match
  std::string name_contains;          // case-insensitive substring; "" = any
  // Sort column: "" or "id" (= creation order), "update_time", "name", "priority",
  // "state", "owner", "queue"; ties newest first.
  std::string order_by;
  bool descending = true;
  int page_size = 100;
  // Paging: by id order, only ids < before_id (0 = from the newest); by any other
  // order, skip `offset` rows.
  int64_t before_id = 0;
  int64_t offset = 0;
  bool count_total = false;  // fill ListJobsResult::total
};

struct ListJobsResult {
  std::vector<v1::Job> jobs;
  bool more = false;           // another page follows
  int64_t next_before_id = 0;  // id order: where the next page starts
  int64_t total = -1;          // matching jobs, when asked for
};

struct JobCounts {
  std::map<v1::JobState, int64_t> by_state;
};

// A write transaction as seen by a function given to JobStore::Write: the building block
// for multi-table state changes composed elsewhere in storage/ (cluster_store.h). Valid
// only during that call, on the writer thread.
class Txn {
 public:
  virtual ~Txn() = default;
  // A prepared statement for `sql`, cached across transactions; reset, no bindings.
  virtual absl::StatusOr<sqlite::Statement*> Statement(const std::string& sql) = 0;
  // The job as stored now (nullopt if there is none).
  virtual absl::StatusOr<std::optional<v1::Job>> LoadJob(int64_t job_id) = 0;
  // Moves `job` to `to` and records the event, published to subscribers after commit.
  // The job's status reason becomes `status_reason` (default: `reason`).
  virtual absl::Status Transition(v1::Job* job, absl::string_view type, v1::JobState to,
                                  absl::string_view reason,
                                  std::optional<absl::string_view> status_reason = {}) = 0;
  // The store clock's time for this transaction.
  virtual int64_t NowMicros() const = 0;
};
using TxnFunction = std::function<absl::Status(Txn& txn)>;

class JobStore {
 public:
  // Opens or creates the database, migrates the schema, starts the writer thread.
  // Errors: FAILED_PRECONDITION for a file that cannot be opened or is not a
  // database, or whose schema is newer than this build knows (the message says so).
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const JobStoreOptions& options);

  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;
  // Commits every write already accepted, runs their callbacks, then closes.
  ~JobStore();

  // --- Writes. `done` runs on the writer thread after commit (or failure); it must not
  // block. RESOURCE_EXHAUSTED means the database or disk is full: nothing was written.

  // Stores the batch in one transaction: all or nothing. With an idempotency key the
  // owner already used, the existing job is returned (created = false). A job whose
  // spec.checkpoint.dir is, contains or lies inside another job's (this batch's included)
  // fails with FAILED_PRECONDITION naming checkpoint.dir; past an owner's
  // max_active_jobs, RESOURCE_EXHAUSTED. Job ids are never reused, deleted jobs' included.
  using SubmitCallback = std::function<void(absl::StatusOr<std::vector<SubmitJobResult>>)>;
  void SubmitJobs(std::vector<SubmitJobInput> jobs, SubmitCallback done);

  // Cancels a non-terminal job (NOT_FOUND if there is none). A terminal job is returned
  // unchanged with changed = false and a message saying why.
  using CancelCallback = std::function<void(absl::StatusOr<CancelJobResult>)>;
  void CancelJob(int64_t job_id, std::string actor, std::string reason, CancelCallback done);

  // Moves a job to `to` if it is in one of `from` (empty = any non-terminal state),
  // recording an event of `type` with `reason`. FAILED_PRECONDITION otherwise.
  using JobCallback = std::function<void(absl::StatusOr<v1::Job>)>;
  void TransitionJob(int64_t job_id, std::vector<v1::JobState> from, v1::JobState to,
                     std::string type, std::string reason, JobCallback done);

  // Runs `fn` in the writer's next transaction, in a savepoint of its own: an error
  // from `fn` undoes only its changes. `done` runs after the commit (or failure).
  void Write(TxnFunction fn, std::function<void(absl::Status)> done);
  // Runs the functions in one transaction, in order, each in a savepoint of its own: an
  // error from one undoes only its changes, the others commit. Each `done` gets its own
  // function's result after the commit (or the transaction's error). More than
  // max_background functions are split into consecutive transactions of that many, still
  // in order, so a write a client waits for never queues behind one huge transaction.
  // For many small writes at once, e.g. the attempts one scheduling pass starts: one
  // commit and one fsync instead of one each.
  void WriteEach(std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> writes);
  absl::Status WriteAndWait(TxnFunction fn);
  // Runs `fn` with a read connection from the pool (any thread).
  absl::Status Read(const std::function<absl::Status(sqlite::Connection&)>& fn);

  // Caps the database at `pages` pages (PRAGMA max_page_count; 0 = SQLite's maximum).
  // Writes that would grow it further fail with RESOURCE_EXHAUSTED and change nothing;
  // raising the cap lets them succeed again without a restart.
  absl::Status SetMaxPageCount(int64_t pages);

  // Blocking forms of the above, for tools and tests.
  absl::StatusOr<std::vector<SubmitJobResult>> SubmitJobsAndWait(std::vector<SubmitJobInput> jobs);
  absl::StatusOr<CancelJobResult> CancelJobAndWait(int64_t job_id, std::string actor,
                                                   std::string reason);

  // --- Reads (any thread).
  absl::StatusOr<v1::Job> GetJob(int64_t job_id);
  absl::StatusOr<ListJobsResult> ListJobs(const ListJobsQuery& query);
  // Events with seq > after_seq, oldest first, at most `limit`.
  absl::StatusOr<std::vector<v1::JobEvent>> GetEvents(int64_t job_id, int64_t after_seq,
                                                      int limit);
  absl::StatusOr<JobCounts> CountJobs();
  // Jobs per queue and state, in one GROUP BY query (for metrics). Queues without jobs
  // are absent.
  absl::StatusOr<std::map<std::string, JobCounts>> CountJobsByQueue();

  // The QUEUED jobs with their scheduling columns, in id order, from memory (see
  // queued_jobs.h): what a query for state = QUEUED would return after the newest commit
  // whose events have been published. UNAVAILABLE while the view is being rebuilt after
  // a read error (the next commit retries).
  absl::StatusOr<QueuedJobsSnapshot> SnapshotQueuedJobs() const;
  // The view's changes after `version` (QueuedJobs::ChangesSince), for a reader that keeps
  // its own copy; UNAVAILABLE as above.
  absl::StatusOr<QueuedJobsChanges> QueuedJobChangesSince(uint64_t version) const;
  size_t queued_jobs_size() const;

  // --- Committed events, in commit order, delivered on the writer thread right after
  // the commit that made them durable. Listeners must not block or call back into
  // writes synchronously. Returns a handle for Unsubscribe.
  using EventListener = std::function<void(const v1::JobEvent&)>;
  int64_t Subscribe(EventListener listener);
  // The same events, once per commit: all of that commit's events, in order (a commit
  // without events calls nothing). For a listener that hands work to another thread: one
  // hand-off per commit, not one per job (issue 13). Unsubscribe takes its handle too.
  using BatchListener = std::function<void(const std::vector<const v1::JobEvent*>&)>;
  int64_t SubscribeBatches(BatchListener listener);
  void Unsubscribe(int64_t handle);

  // Transactions committed and writes applied so far (for metrics and benchmarks).
  int64_t transactions_committed() const;
  int64_t writes_committed() const;

  struct WriterStats {
    int64_t transactions = 0;    // committed
    int64_t writes = 0;          // committed writes (a batch submission counts once)
    absl::Duration apply_time;   // spent applying writes inside transactions
    absl::Duration commit_time;  // spent in COMMIT (with synchronous=FULL: the fsync)
    // Batches of submissions answered on the writer, which had nothing else to do,
    // rather than handed to the completion thread.
    int64_t answered_on_writer = 0;
    // Transactions of several writes that failed as a whole (a full disk, an I/O error at
    // commit) and were retried write by write, so each caller learns its own write's fate.
    int64_t batches_retried_alone = 0;
  };
  WriterStats writer_stats() const;

  // The database file's path (JobStoreOptions.path).
  const std::string& path() const { return options_.path; }

  class WriteOp;  // One queued write; defined in job_store.cc.
  struct WriterStatements;  // The writer's prepared statements; defined in job_store.cc.

 private:
  explicit JobStore(const JobStoreOptions& options);
  absl::Status Init();
  void Enqueue(std::unique_ptr<WriteOp> op);
  void WriterLoop();
  void CommitBatch(std::vector<std::unique_ptr<WriteOp>>& batch);
  absl::Status RunInTransaction(std::vector<std::unique_ptr<WriteOp>>& ops);

  // Borrow a read connection.
  class ReaderLease;
  ReaderLease AcquireReader();

  // Constant after construction.
  const JobStoreOptions options_;

  // Owned by the writer thread after Init().
  std::unique_ptr<sqlite::Connection> writer_;
  std::unique_ptr<WriterStatements> stmts_;

  mutable std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  // Writes waiting: those a client waits for, and background ones (WriteOp::background).
  std::deque<std::unique_ptr<WriteOp>> queue_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<std::unique_ptr<WriteOp>> background_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(queue_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  int64_t transactions_ ABSL_GUARDED_BY(queue_mu_) = 0;
  int64_t writes_ ABSL_GUARDED_BY(queue_mu_) = 0;
  absl::Duration apply_time_ ABSL_GUARDED_BY(queue_mu_);
  absl::Duration commit_time_ ABSL_GUARDED_BY(queue_mu_);
  // Set by RunInTransaction for the batch it ran (writer thread only).
  absl::Duration last_apply_time_;
  absl::Duration last_commit_time_;

  std::mutex readers_mu_;
  std::condition_variable readers_cv_;
  std::vector<std::unique_ptr<sqlite::Connection>> readers_ ABSL_GUARDED_BY(readers_mu_);

  std::mutex listeners_mu_;
  int64_t next_listener_ ABSL_GUARDED_BY(listeners_mu_) = 1;
  std::map<int64_t, EventListener> listeners_ ABSL_GUARDED_BY(listeners_mu_);
  std::map<int64_t, BatchListener> batch_listeners_ ABSL_GUARDED_BY(listeners_mu_);

  std::thread writer_thread_;

  // Callbacks of writes that CompletesOffWriter(), batch by batch in commit order.
  void CompletionLoop();
  std::mutex completions_mu_;
  std::condition_variable completions_cv_;
  std::deque<std::vector<std::unique_ptr<WriteOp>>> completions_ ABSL_GUARDED_BY(completions_mu_);
  // At most this many callbacks of one batch run on an idle writer instead (CommitBatch).
  static constexpr size_t kInlineCompletions = 4;
  std::atomic<int64_t> answered_on_writer_{0};
  int64_t batches_retried_alone_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // Rate limit of the warning for a batch retried alone (writer thread only).
  absl::Time last_retry_warning_ = absl::InfinitePast();
  int64_t retries_not_logged_ = 0;
  bool completions_stopping_ ABSL_GUARDED_BY(completions_mu_) = false;
  std::thread completion_thread_;

  // The queued-jobs view: written on the writer thread (Init, then after each commit).
  absl::Status RebuildQueuedJobs();
  absl::Status ReloadQueuedJob(int64_t job_id);
  void UpdateQueuedJobs(std::vector<std::unique_ptr<WriteOp>>& batch);
  QueuedJobs queued_;
  std::atomic<bool> queued_stale_{false};

  // WAL checkpoints run here, off the commit path, so a commit never pays for one.
  void CheckpointLoop();
  std::unique_ptr<sqlite::Connection> checkpointer_;
  bool checkpoint_wanted_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::condition_variable checkpoint_cv_;
  std::thread checkpoint_thread_;
};

// The columns JobFromRow reads, for queries composed elsewhere in storage/.
const char* JobColumns();
// Reads a job from a row that starts with JobColumns() at column `first`.
absl::StatusOr<v1::Job> JobFromRow(const sqlite::Statement& row);

// Jobs whose own checkpoint.dir (as submitted, normalized) is `path` or one of its
// ancestors; `path` must be normalized (absolute, no '.', '..' or trailing '/').
struct CheckpointDirOwner {
  int64_t job_id = 0;
  std::string owner;
  std::string dir;
};
absl::StatusOr<std::vector<CheckpointDirOwner>> CheckpointDirOwners(JobStore& store,
                                                                     const std::string& path);

// Helpers shared by the coordinator.
bool IsTerminal(v1::JobState state);
std::string JobIdString(int64_t id);
// Parses a job id as clients send it ("42"); INVALID_ARGUMENT names `field`.
absl::StatusOr<int64_t> ParseJobId(absl::string_view text, absl::string_view field);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_JOB_STORE_H_
