#ifndef LLAMAFLEET_STORAGE_JOB_STORE_H_
#define LLAMAFLEET_STORAGE_JOB_STORE_H_

// The coordinator's durable state: jobs, their events, in one SQLite database (WAL).
//
// JobStore owns the database: the writer (storage/writer.h: group commit; a caller's
// callback runs only after the transaction that holds its write has committed, with
// synchronous=FULL after fsync, so an acknowledgement built on it survives kill -9 and
// power loss), a pool of read connections that never wait for the writer (WAL), and the
// in-memory view of the queued jobs (storage/queued_jobs.h). What a write does is a
// TxnFunction (storage/job_writes.h, storage/cluster_store.h); what a read does,
// storage/job_reads.h.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llamafleet/v1/job.pb.h"
#include "common/clock.h"
#include "storage/job_reads.h"
#include "storage/job_writes.h"
#include "storage/queued_jobs.h"
#include "storage/schema.h"
#include "storage/sqlite.h"
#include "storage/writer.h"

namespace llamafleet {

struct JobStoreOptions {
  // Database file; created with its schema if missing. Its directory must exist.
  std::string path;
  // PRAGMA synchronous: FULL (fsync every commit) when true, NORMAL otherwise.
  bool synchronous_full = true;
  // Batch waiting writes into one transaction; false = one transaction per write.
  bool group_commit = true;
  // Upper bound of writes per transaction.
  int max_batch = 1024;
  // Upper bound of background writes (JobStore::Write, WriteEach: the coordinator's own
  // bookkeeping; a WriteEach counts each of its functions) per transaction; writes a
  // client waits for (submissions, cancellations) take the rest of max_batch first
  // (storage/writer.h). Small, so that a burst of bookkeeping delays a submission by at
  // most one short transaction.
  int max_background = 32;
  // PRAGMA max_page_count for the writer (0 = SQLite's default). Tests use it to make
  // the database "full" without filling a disk.
  int64_t max_page_count = 0;
  // Read connections in the pool.
  int read_connections = 4;
  // Checkpoint the WAL into the database (in the background) once it has this many pages.
  int checkpoint_pages = 1000;
  // Time source for timestamps. Not owned; must outlive the store.
  Clock* clock = Clock::Real();
};

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

  // --- Writes. `done` runs on the writer thread after commit (or failure), in commit
  // order; it must not block or wait for another write. RESOURCE_EXHAUSTED means the
  // database or disk is full: nothing was written.

  // Stores the batch in one transaction: all or nothing. With an idempotency key the
  // owner already used, the existing job is returned (created = false). A job whose
  // spec.checkpoint.dir is, contains or lies inside another job's (this batch's included)
  // fails with FAILED_PRECONDITION naming checkpoint.dir; past an owner's
  // max_active_jobs (counted in the transaction), RESOURCE_EXHAUSTED. Job ids are never
  // reused, deleted jobs' included.
  using SubmitCallback = std::function<void(absl::StatusOr<std::vector<SubmitJobResult>>)>;
  void SubmitJobs(std::vector<SubmitJobInput> jobs, SubmitCallback done);

  // Cancels a non-terminal job (NOT_FOUND if there is none). A terminal job is returned
  // unchanged with changed = false and a message saying why.
  using CancelCallback = std::function<void(absl::StatusOr<CancelJobResult>)>;
  void CancelJob(int64_t job_id, std::string actor, std::string reason, CancelCallback done);

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

  // --- Reads (any thread), on a connection of the pool (storage/job_reads.h).
  // GetJob also fills the job's submitted_spec (when stored) and derived_from, which
  // ListJobs and the other reads leave unset.
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
  size_t queued_jobs_size() const;

  // --- Committed events, in commit order, delivered on the writer thread right after
  // the commit that made them durable. Listeners must not block or call back into
  // writes synchronously. Returns a handle for Unsubscribe.
  using EventListener = std::function<void(const v1::JobEvent&)>;
  int64_t Subscribe(EventListener listener);
  // The same events, once per commit: all of that commit's events, in order (a commit
  // without events calls nothing). For a listener that hands work to another thread: one
  // hand-off per commit, not one per job. Unsubscribe takes its handle too.
  using BatchListener = std::function<void(const std::vector<const v1::JobEvent*>&)>;
  int64_t SubscribeBatches(BatchListener listener);
  void Unsubscribe(int64_t handle);

  // Transactions committed and writes applied so far (for metrics and benchmarks).
  int64_t transactions_committed() const;
  int64_t writes_committed() const;
  using WriterStats = ::llamafleet::WriterStats;
  WriterStats writer_stats() const;

  // The database file's path (JobStoreOptions.path).
  const std::string& path() const { return options_.path; }
  // The time source of its transactions (JobStoreOptions.clock), for reads measured "now".
  Clock* clock() const { return options_.clock; }

 private:
  explicit JobStore(const JobStoreOptions& options);
  absl::Status Init();
  void Enqueue(std::vector<std::pair<TxnFunction, JobWrite::Done>> fns, bool background);
  // The writer's commit hook: the queued-jobs view, then the events to subscribers.
  void Committed(sqlite::Connection& conn, std::vector<std::unique_ptr<WriteOp>>& batch,
                 bool committed);

  // Borrow a read connection.
  class ReaderLease;
  ReaderLease AcquireReader();

  // Constant after construction.
  const JobStoreOptions options_;

  std::mutex readers_mu_;
  std::condition_variable readers_cv_;
  std::vector<std::unique_ptr<sqlite::Connection>> readers_ ABSL_GUARDED_BY(readers_mu_);

  std::mutex listeners_mu_;
  int64_t next_listener_ ABSL_GUARDED_BY(listeners_mu_) = 1;
  std::map<int64_t, EventListener> listeners_ ABSL_GUARDED_BY(listeners_mu_);
  std::map<int64_t, BatchListener> batch_listeners_ ABSL_GUARDED_BY(listeners_mu_);

  // Written on the writer thread (Init, then after each commit).
  QueuedJobs queued_;

  // Last: destroyed first, so its final commits still find the view and the listeners.
  std::unique_ptr<Writer> writer_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_JOB_STORE_H_
