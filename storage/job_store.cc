#include "storage/job_store.h"

#include <algorithm>
#include <future>
#include <iterator>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace llamafleet {

class JobStore::ReaderLease {
 public:
  ReaderLease(JobStore* store, std::unique_ptr<sqlite::Connection> conn)
      : store_(store), conn_(std::move(conn)) {}
  ReaderLease(ReaderLease&&) = default;
  ~ReaderLease() {
    if (conn_ == nullptr) return;
    std::lock_guard<std::mutex> lock(store_->readers_mu_);
    store_->readers_.push_back(std::move(conn_));
    store_->readers_cv_.notify_one();
  }
  sqlite::Connection& operator*() { return *conn_; }

 private:
  JobStore* store_;
  std::unique_ptr<sqlite::Connection> conn_;
};

JobStore::JobStore(const JobStoreOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const JobStoreOptions& options) {
  std::unique_ptr<JobStore> store(new JobStore(options));
  LF_RETURN_IF_ERROR(store->Init());
  return store;
}

absl::Status JobStore::Init() {
  LF_RETURN_IF_ERROR(RestrictDatabaseFiles(options_.path));
  LF_ASSIGN_OR_RETURN(
      std::unique_ptr<sqlite::Connection> conn,
      sqlite::Connection::Open(options_.path, /*create=*/true, /*read_only=*/false));
  LF_ASSIGN_OR_RETURN(int version, SchemaVersion(*conn, options_.path));
  // WAL: readers never block the writer, and a commit is one append + fsync.
  LF_ASSIGN_OR_RETURN(sqlite::Statement wal, conn->Prepare("PRAGMA journal_mode=WAL"));
  LF_ASSIGN_OR_RETURN(bool row, wal.Step());
  if (!row || wal.ColumnText(0) != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", options_.path, ": cannot enable WAL journal mode"));
  }
  wal.Reset();
  LF_RETURN_IF_ERROR(conn->Exec(options_.synchronous_full ? "PRAGMA synchronous=FULL"
                                                          : "PRAGMA synchronous=NORMAL"));
  LF_RETURN_IF_ERROR(MigrateSchema(*conn, options_.path, version));
  if (options_.max_page_count > 0) {
    LF_RETURN_IF_ERROR(conn->Exec(absl::StrCat("PRAGMA max_page_count=", options_.max_page_count)));
  }
  LF_RETURN_IF_ERROR(queued_.Rebuild(*conn));
  for (int i = 0; i < std::max(1, options_.read_connections); ++i) {
    LF_ASSIGN_OR_RETURN(
        std::unique_ptr<sqlite::Connection> reader,
        sqlite::Connection::Open(options_.path, /*create=*/false, /*read_only=*/false));
    LF_RETURN_IF_ERROR(reader->Exec("PRAGMA query_only=1"));
    readers_.push_back(std::move(reader));
  }
  WriterOptions w;
  w.path = options_.path;
  w.group_commit = options_.group_commit;
  w.max_batch = options_.max_batch;
  w.max_background = options_.max_background;
  w.checkpoint_pages = options_.checkpoint_pages;
  LF_ASSIGN_OR_RETURN(
      writer_,
      Writer::Start(std::move(conn), w,
                    [this](sqlite::Connection& c, std::vector<std::unique_ptr<WriteOp>>& batch,
                           bool committed) { Committed(c, batch, committed); }));
  return absl::OkStatus();
}

JobStore::~JobStore() { writer_.reset(); }

void JobStore::Committed(sqlite::Connection& conn, std::vector<std::unique_ptr<WriteOp>>& batch,
                         bool committed) {
  if (!committed) return;  // nothing changed: no view update, no events
  // The JobWrites that committed (SetMaxPageCount's Exec, the only other write, changes no job).
  std::vector<JobWrite*> writes;
  for (auto& op : batch) {
    if (!op->result.ok()) continue;  // rolled back to its savepoint
    if (auto* w = dynamic_cast<JobWrite*>(op.get())) writes.push_back(w);
  }
  // The view first: whoever reacts to an event below must see the job in it. Jobs a
  // write created go in as built; any other job an event moved into or out of QUEUED is
  // re-read from its committed row, once, after all the batch's writes.
  std::set<int64_t> reload;
  for (JobWrite* w : writes) {
    std::set<int64_t> created;
    for (auto& [id, job] : w->queued()) {
      created.insert(id);
      queued_.Put(id, std::move(job));
    }
    for (const v1::JobEvent& e : w->events()) {
      if (e.from_state() != v1::QUEUED && e.to_state() != v1::QUEUED) continue;
      int64_t id = 0;
      if (!absl::SimpleAtoi(e.job_id(), &id)) continue;
      if (created.count(id) && e.type() == "submitted") continue;
      reload.insert(id);
    }
  }
  if (absl::Status s = queued_.Refresh(conn, reload); !s.ok()) {
    spdlog::error("database {}: queued-jobs view: {}", options_.path, s.ToString());
  }
  // Then the events, so anyone told "done" can already see them through a watch.
  std::lock_guard<std::mutex> lock(listeners_mu_);
  std::vector<const v1::JobEvent*> all;
  for (JobWrite* w : writes) {
    for (const v1::JobEvent& e : w->events()) {
      for (auto& [handle, listener] : listeners_) listener(e);
      if (!batch_listeners_.empty()) all.push_back(&e);
    }
  }
  if (!all.empty()) {
    for (auto& [handle, listener] : batch_listeners_) listener(all);
  }
}

void JobStore::Enqueue(std::vector<std::pair<TxnFunction, JobWrite::Done>> fns, bool background) {
  writer_->Enqueue(std::make_unique<JobWrite>(std::move(fns), background, options_.clock));
}

absl::StatusOr<QueuedJobsSnapshot> JobStore::SnapshotQueuedJobs() const {
  if (queued_.stale()) {
    return absl::UnavailableError(
        "the queued-jobs view is being rebuilt after a read error (see the log)");
  }
  return queued_.Snapshot();
}

size_t JobStore::queued_jobs_size() const { return queued_.size(); }

void JobStore::SubmitJobs(std::vector<SubmitJobInput> jobs, SubmitCallback done) {
  auto batch = std::make_shared<SubmitBatch>();
  batch->inputs = std::move(jobs);
  TxnFunction fn = SubmitJobsTxn(batch);
  std::vector<std::pair<TxnFunction, JobWrite::Done>> fns;
  fns.emplace_back(std::move(fn), [batch, done = std::move(done)](absl::Status s) {
    if (s.ok()) {
      done(batch->TakeResults());
    } else {
      done(s);
    }
  });
  Enqueue(std::move(fns), /*background=*/false);
}

namespace {

// A write whose function fills a CancelJobResult, answered with it after the commit.
std::vector<std::pair<TxnFunction, JobWrite::Done>> WithResult(
    std::shared_ptr<CancelJobResult> result, TxnFunction fn,
    std::function<void(absl::StatusOr<CancelJobResult>)> done) {
  std::vector<std::pair<TxnFunction, JobWrite::Done>> fns;
  fns.emplace_back(std::move(fn), [result, done = std::move(done)](absl::Status s) {
    if (s.ok()) {
      done(std::move(*result));
    } else {
      done(s);
    }
  });
  return fns;
}

}  // namespace

void JobStore::CancelJob(int64_t job_id, std::string actor, std::string reason,
                         CancelCallback done) {
  auto result = std::make_shared<CancelJobResult>();
  TxnFunction fn = CancelJobTxn(job_id, std::move(actor), std::move(reason), result);
  Enqueue(WithResult(result, std::move(fn), std::move(done)), /*background=*/false);
}

void JobStore::Write(TxnFunction fn, std::function<void(absl::Status)> done) {
  std::vector<std::pair<TxnFunction, JobWrite::Done>> fns;
  fns.emplace_back(std::move(fn), std::move(done));
  Enqueue(std::move(fns), /*background=*/true);
}

void JobStore::WriteEach(std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> writes) {
  // At most max_background functions per transaction, so that a submission never waits
  // behind one transaction of a thousand attempt starts.
  const size_t chunk = static_cast<size_t>(std::max(1, options_.max_background));
  for (size_t begin = 0; begin < writes.size(); begin += chunk) {
    const size_t end = std::min(writes.size(), begin + chunk);
    std::vector<std::pair<TxnFunction, JobWrite::Done>> part(
        std::make_move_iterator(writes.begin() + begin), std::make_move_iterator(writes.begin() + end));
    Enqueue(std::move(part), /*background=*/true);
  }
}

absl::Status JobStore::WriteAndWait(TxnFunction fn) {
  std::promise<absl::Status> promise;
  auto future = promise.get_future();
  Write(std::move(fn), [&promise](absl::Status s) { promise.set_value(std::move(s)); });
  return future.get();
}

absl::Status JobStore::SetMaxPageCount(int64_t pages) {
  std::promise<absl::Status> promise;
  auto future = promise.get_future();
  writer_->Exec(absl::StrCat("PRAGMA max_page_count=", pages <= 0 ? int64_t{4294967294} : pages),
                [&promise](absl::Status s) { promise.set_value(std::move(s)); });
  return future.get();
}

absl::StatusOr<std::vector<SubmitJobResult>> JobStore::SubmitJobsAndWait(
    std::vector<SubmitJobInput> jobs) {
  std::promise<absl::StatusOr<std::vector<SubmitJobResult>>> promise;
  auto future = promise.get_future();
  SubmitJobs(std::move(jobs), [&promise](auto r) { promise.set_value(std::move(r)); });
  return future.get();
}

absl::StatusOr<CancelJobResult> JobStore::CancelJobAndWait(int64_t job_id, std::string actor,
                                                           std::string reason) {
  std::promise<absl::StatusOr<CancelJobResult>> promise;
  auto future = promise.get_future();
  CancelJob(job_id, std::move(actor), std::move(reason),
            [&promise](auto r) { promise.set_value(std::move(r)); });
  return future.get();
}

JobStore::ReaderLease JobStore::AcquireReader() {
  std::unique_lock<std::mutex> lock(readers_mu_);
  readers_cv_.wait(lock, [&] { return !readers_.empty(); });
  std::unique_ptr<sqlite::Connection> conn = std::move(readers_.back());
  readers_.pop_back();
  return ReaderLease(this, std::move(conn));
}

absl::Status JobStore::Read(const std::function<absl::Status(sqlite::Connection&)>& fn) {
  ReaderLease reader = AcquireReader();
  return fn(*reader);
}

absl::StatusOr<v1::Job> JobStore::GetJob(int64_t job_id) {
  ReaderLease reader = AcquireReader();
  return ReadJob(*reader, job_id);
}

absl::StatusOr<ListJobsResult> JobStore::ListJobs(const ListJobsQuery& query) {
  ReaderLease reader = AcquireReader();
  return ReadJobs(*reader, query);
}

absl::StatusOr<std::vector<v1::JobEvent>> JobStore::GetEvents(int64_t job_id, int64_t after_seq,
                                                              int limit) {
  ReaderLease reader = AcquireReader();
  return ReadEvents(*reader, job_id, after_seq, limit);
}

absl::StatusOr<JobCounts> JobStore::CountJobs() {
  ReaderLease reader = AcquireReader();
  return ReadJobCounts(*reader);
}

absl::StatusOr<std::map<std::string, JobCounts>> JobStore::CountJobsByQueue() {
  ReaderLease reader = AcquireReader();
  return ReadJobCountsByQueue(*reader);
}

int64_t JobStore::Subscribe(EventListener listener) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  int64_t handle = next_listener_++;
  listeners_.emplace(handle, std::move(listener));
  return handle;
}

int64_t JobStore::SubscribeBatches(BatchListener listener) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  int64_t handle = next_listener_++;
  batch_listeners_.emplace(handle, std::move(listener));
  return handle;
}

void JobStore::Unsubscribe(int64_t handle) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(handle);
  batch_listeners_.erase(handle);
}

int64_t JobStore::transactions_committed() const { return writer_->stats().transactions; }

int64_t JobStore::writes_committed() const { return writer_->stats().writes; }

JobStore::WriterStats JobStore::writer_stats() const { return writer_->stats(); }

}  // namespace llamafleet
