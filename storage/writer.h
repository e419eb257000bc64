#ifndef LLAMAFLEET_STORAGE_WRITER_H_
#define LLAMAFLEET_STORAGE_WRITER_H_

// One SQLite connection's writes, made by one thread with group commit: whatever writes
// are waiting go into one transaction, and a write's callback runs only after the
// transaction that holds it has committed (with synchronous=FULL: after the fsync), so an
// acknowledgement built on it survives kill -9 and power loss. Knows nothing of what the
// writes mean (storage/job_writes.h gives them meaning).
//
// Contracts:
// - Writes are applied in order of arrival. Each write is all or nothing: one that fails
//   is undone alone (a savepoint of its own) and the others in its transaction commit.
// - A transaction that fails as a whole (a full disk at COMMIT, an I/O error) is retried
//   write by write, so each caller learns its own write's fate.
// - After each transaction, on the writer thread and in commit order: the commit hook,
//   then each write's Complete, in order. Nothing runs on another thread, so whatever a
//   callback does happens in commit order; callbacks must not block or wait for writes.
// - Background writes (bookkeeping nobody waits on) yield to client writes: a transaction
//   holds at most max_background of them, and when both kinds are queued past max_batch,
//   background writes keep a share of every transaction (at most half).
// - WAL checkpoints run on a thread and connection of their own, never inside a commit.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/sqlite.h"

namespace llamafleet {

struct WriterOptions {
  std::string path;          // the database file: for the checkpoint connection and logs
  bool group_commit = true;  // false: one transaction per write
  int max_batch = 1024;      // writes per transaction
  int max_background = 32;   // background writes (by weight) per transaction
  int checkpoint_pages = 1000;  // checkpoint the WAL once it has this many pages
};

// One queued write.
class WriteOp {
 public:
  virtual ~WriteOp() = default;
  // Applies the write inside the open transaction. May run more than once (the writer
  // rolls back and applies a batch again when one of its writes fails), so it must start
  // from scratch each time.
  virtual absl::Status Apply(sqlite::Connection& conn) = 0;
  // Runs once: after the commit that made the write durable (OK), or with its failure.
  virtual void Complete(absl::Status status) = 0;
  virtual bool background() const { return false; }
  // What the write counts for against max_background.
  virtual size_t weight() const { return 1; }

  absl::Status result;  // Apply's result in the last attempt (the transaction's error if it failed)
  uint64_t seq = 0;     // order of arrival
};

struct WriterStats {
  int64_t transactions = 0;    // committed
  int64_t writes = 0;          // committed writes
  absl::Duration apply_time;   // spent applying writes inside transactions
  absl::Duration commit_time;  // spent in COMMIT (with synchronous=FULL: the fsync)
  // Transactions of several writes that failed as a whole and were retried write by write.
  int64_t batches_retried_alone = 0;
};

class Writer {
 public:
  // Runs on the writer thread after each transaction, before the writes' callbacks:
  // `committed` false when it failed (each write's result is then the error).
  using CommitHook = std::function<void(sqlite::Connection& conn,
                                        std::vector<std::unique_ptr<WriteOp>>& batch, bool committed)>;

  // Takes `conn` (the schema migrated, pragmas set) and starts the writer and checkpoint
  // threads.
  static absl::StatusOr<std::unique_ptr<Writer>> Start(std::unique_ptr<sqlite::Connection> conn,
                                                       const WriterOptions& options, CommitHook hook);
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  // Commits every write already accepted and runs its callbacks, then merges the WAL into
  // the database file and closes.
  ~Writer();

  // Queues `op`; after shutdown began it completes at once with UNAVAILABLE.
  void Enqueue(std::unique_ptr<WriteOp> op);
  // Runs `sql` on the writer connection as a background write, in order with the others.
  void Exec(std::string sql, std::function<void(absl::Status)> done);

  WriterStats stats() const;

 private:
  Writer(std::unique_ptr<sqlite::Connection> conn, const WriterOptions& options, CommitHook hook);
  void Loop();
  std::vector<std::unique_ptr<WriteOp>> NextBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CommitBatch(std::vector<std::unique_ptr<WriteOp>>& batch);
  absl::Status RunInTransaction(std::vector<std::unique_ptr<WriteOp>>& ops);
  void CheckpointLoop();

  const WriterOptions options_;
  const CommitHook hook_;
  std::unique_ptr<sqlite::Connection> conn_;          // writer thread only
  std::unique_ptr<sqlite::Connection> checkpointer_;  // checkpoint thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<WriteOp>> client_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<WriteOp>> background_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  WriterStats stats_ ABSL_GUARDED_BY(mu_);
  bool checkpoint_wanted_ ABSL_GUARDED_BY(mu_) = false;
  std::condition_variable checkpoint_cv_;

  // Writer thread only.
  absl::Duration last_apply_time_;
  absl::Duration last_commit_time_;
  absl::Time last_retry_warning_ = absl::InfinitePast();
  int64_t retries_not_logged_ = 0;

  std::thread thread_;
  std::thread checkpoint_thread_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_WRITER_H_
