#include "storage/writer.h"

#include <pthread.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace llamafleet {
namespace {

// Pages in the WAL after the last commit, as reported by SQLite's WAL hook (called on the
// committing thread: the writer's).
thread_local int wal_pages_after_commit = 0;

int RecordWalPages(void*, sqlite3*, const char*, int pages) {
  wal_pages_after_commit = pages;
  return SQLITE_OK;
}

absl::Status Run(sqlite::Connection& conn, const std::string& sql) {
  LF_ASSIGN_OR_RETURN(auto* s, conn.Cached(sql));
  return s->Run();
}

// Runs a statement on the writer connection, in order with the other writes.
class ExecOp : public WriteOp {
 public:
  ExecOp(std::string sql, std::function<void(absl::Status)> done)
      : sql_(std::move(sql)), done_(std::move(done)) {}
  absl::Status Apply(sqlite::Connection& conn) override { return conn.Exec(sql_); }
  void Complete(absl::Status status) override { done_(std::move(status)); }
  bool background() const override { return true; }

 private:
  const std::string sql_;
  std::function<void(absl::Status)> done_;
};

}  // namespace

Writer::Writer(std::unique_ptr<sqlite::Connection> conn, const WriterOptions& options, CommitHook hook)
    : options_(options), hook_(std::move(hook)), conn_(std::move(conn)) {}

absl::StatusOr<std::unique_ptr<Writer>> Writer::Start(std::unique_ptr<sqlite::Connection> conn,
                                                      const WriterOptions& options, CommitHook hook) {
  // Checkpoints happen on their own thread and connection, not inside commits.
  LF_RETURN_IF_ERROR(conn->Exec("PRAGMA wal_autocheckpoint=0"));
  sqlite3_wal_hook(conn->raw(), &RecordWalPages, nullptr);
  LF_ASSIGN_OR_RETURN(
      std::unique_ptr<sqlite::Connection> checkpointer,
      sqlite::Connection::Open(options.path, /*create=*/false, /*read_only=*/false));
  std::unique_ptr<Writer> writer(new Writer(std::move(conn), options, std::move(hook)));
  writer->checkpointer_ = std::move(checkpointer);
  // Named for top -H, perf and gdb (15 characters at most).
  writer->thread_ = std::thread([w = writer.get()] {
    pthread_setname_np(pthread_self(), "lf-db-writer");
    w->Loop();
  });
  writer->checkpoint_thread_ = std::thread([w = writer.get()] {
    pthread_setname_np(pthread_self(), "lf-db-checkpt");
    w->CheckpointLoop();
  });
  return writer;
}

Writer::~Writer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  checkpoint_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (checkpoint_thread_.joinable()) checkpoint_thread_.join();
  checkpointer_.reset();
  // Merge the WAL back into the database file so the closed file stands alone.
  if (conn_ != nullptr) (void)conn_->Exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

void Writer::Enqueue(std::unique_ptr<WriteOp> op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      op->seq = next_seq_++;
      (op->background() ? background_ : client_).push_back(std::move(op));
      cv_.notify_one();
      return;
    }
  }
  op->Complete(absl::UnavailableError("the database is shutting down"));
}

void Writer::Exec(std::string sql, std::function<void(absl::Status)> done) {
  Enqueue(std::make_unique<ExecOp>(std::move(sql), std::move(done)));
}

WriterStats Writer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Writer::CheckpointLoop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      checkpoint_cv_.wait(lock, [&] { return stopping_ || checkpoint_wanted_; });
      if (stopping_) return;
    }
    // PASSIVE: copies what it can without blocking the writer or readers.
    absl::Status s = checkpointer_->Exec("PRAGMA wal_checkpoint(PASSIVE)");
    if (!s.ok()) spdlog::warn("database {}: checkpoint failed: {}", options_.path, s.ToString());
    std::lock_guard<std::mutex> lock(mu_);
    checkpoint_wanted_ = false;
  }
}

std::vector<std::unique_ptr<WriteOp>> Writer::NextBatch() {
  // The waiting client writes (up to max_batch) and at most max_background background
  // writes, each kind oldest first.
  const size_t limit = options_.group_commit ? static_cast<size_t>(options_.max_batch) : 1;
  const size_t background_limit =
      options_.group_commit ? static_cast<size_t>(std::max(1, options_.max_background)) : 1;
  size_t client_n = std::min(client_.size(), limit);
  // Background writes by weight; the first always goes (a bigger one is its own batch).
  size_t bulk_n = 0;
  for (size_t weight = 0; bulk_n < background_.size(); ++bulk_n) {
    weight += background_[bulk_n]->weight();
    if (bulk_n > 0 && weight > background_limit) break;
  }
  if (client_n + bulk_n > limit) {
    if (limit == 1) {  // one write per transaction: the older of the two
      const bool bulk_first = background_.front()->seq < client_.front()->seq;
      client_n = bulk_first ? 0 : 1;
      bulk_n = bulk_first ? 1 : 0;
    } else {  // more of both than fit: background writes keep a share, at most half
      bulk_n = std::min(bulk_n, std::max<size_t>(1, limit / 2));
      client_n = std::min(client_n, limit - bulk_n);
    }
  }
  std::vector<std::unique_ptr<WriteOp>> client, bulk, batch;
  for (size_t i = 0; i < client_n; ++i) {
    client.push_back(std::move(client_.front()));
    client_.pop_front();
  }
  for (size_t i = 0; i < bulk_n; ++i) {
    bulk.push_back(std::move(background_.front()));
    background_.pop_front();
  }
  // Applied in order of arrival, as one queue would have.
  batch.reserve(client.size() + bulk.size());
  std::merge(std::make_move_iterator(client.begin()), std::make_move_iterator(client.end()),
             std::make_move_iterator(bulk.begin()), std::make_move_iterator(bulk.end()),
             std::back_inserter(batch),
             [](const std::unique_ptr<WriteOp>& a, const std::unique_ptr<WriteOp>& b) {
               return a->seq < b->seq;
             });
  return batch;
}

void Writer::Loop() {
  while (true) {
    std::vector<std::unique_ptr<WriteOp>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !client_.empty() || !background_.empty(); });
      // Stopping, and everything accepted is committed.
      if (client_.empty() && background_.empty()) return;
      batch = NextBatch();
    }
    CommitBatch(batch);
  }
}

absl::Status Writer::RunInTransaction(std::vector<std::unique_ptr<WriteOp>>& ops) {
  sqlite::Connection& conn = *conn_;
  auto abort = [&](absl::Status s) {
    if (conn.InTransaction()) (void)Run(conn, "ROLLBACK");
    return s;
  };
  const absl::Time start = absl::Now();
  // First without savepoints: a SAVEPOINT and a RELEASE per write cost about a tenth of
  // the writer's time, and writes rarely fail. When one does, everything is rolled back
  // and applied again with a savepoint per write, so only the failing write is undone.
  if (absl::Status s = Run(conn, "BEGIN IMMEDIATE"); !s.ok()) return abort(s);
  bool all_ok = true;
  for (auto& op : ops) {
    op->result = op->Apply(conn);
    if (!op->result.ok()) {
      all_ok = false;
      break;
    }
  }
  if (!all_ok) {
    if (conn.InTransaction()) (void)Run(conn, "ROLLBACK");
    if (absl::Status s = Run(conn, "BEGIN IMMEDIATE"); !s.ok()) return abort(s);
    for (auto& op : ops) {
      if (absl::Status s = Run(conn, "SAVEPOINT op"); !s.ok()) return abort(s);
      op->result = op->Apply(conn);
      if (!op->result.ok()) {
        if (!conn.InTransaction()) return op->result;  // SQLite rolled everything back.
        (void)Run(conn, "ROLLBACK TO op");
      }
      if (absl::Status s = Run(conn, "RELEASE op"); !s.ok()) return abort(s);
    }
  }
  const absl::Time applied = absl::Now();
  if (absl::Status s = Run(conn, "COMMIT"); !s.ok()) return abort(s);
  last_apply_time_ = applied - start;
  last_commit_time_ = absl::Now() - applied;
  return absl::OkStatus();
}

void Writer::CommitBatch(std::vector<std::unique_ptr<WriteOp>>& batch) {
  absl::Status txn = RunInTransaction(batch);
  if (!txn.ok() && batch.size() > 1) {
    // Retry each write alone. Said in the log (at most every 10 s): if the singles
    // succeed, nothing else would show that every batch now costs a transaction per write.
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.batches_retried_alone;
    }
    const absl::Time now = absl::Now();
    if (now - last_retry_warning_ >= absl::Seconds(10)) {
      spdlog::warn("database {}: a transaction of {} writes failed ({}); retrying each write "
                   "alone{}",
                   options_.path, batch.size(), txn.ToString(),
                   retries_not_logged_ > 0
                       ? absl::StrCat(" (", retries_not_logged_, " more since the last such line)")
                       : "");
      last_retry_warning_ = now;
      retries_not_logged_ = 0;
    } else {
      ++retries_not_logged_;
    }
    for (auto& op : batch) {
      std::vector<std::unique_ptr<WriteOp>> single;
      single.push_back(std::move(op));
      CommitBatch(single);
    }
    batch.clear();
    return;
  }
  int64_t committed = 0;
  for (auto& op : batch) {
    if (!txn.ok()) op->result = txn;
    if (op->result.ok()) ++committed;
  }
  if (txn.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.transactions;
    stats_.writes += committed;
    stats_.apply_time += last_apply_time_;
    stats_.commit_time += last_commit_time_;
    if (wal_pages_after_commit >= options_.checkpoint_pages && !checkpoint_wanted_) {
      checkpoint_wanted_ = true;
      checkpoint_cv_.notify_one();
    }
  } else {
    spdlog::warn("database {}: write failed: {}", options_.path, txn.ToString());
  }
  if (hook_) hook_(*conn_, batch, txn.ok());
  for (auto& op : batch) op->Complete(op->result);
}

}  // namespace llamafleet
