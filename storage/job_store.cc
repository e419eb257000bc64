#include "storage/job_store.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <iterator>
#include <set>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "spdlog/spdlog.h"
#include "storage/coalescing_vfs.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;

// Job ids are never reused (jobs is rebuilt with AUTOINCREMENT first, by
// RebuildJobsWithAutoincrement: a job deleted by ttl_after_finished never lends its id,
// and so its logs, to a later job); each job's own checkpoint directory, so a second
// job cannot take it; active jobs per owner, for the per-user limit.
// Runs between RebuildJobsWithAutoincrement (before) and BackfillCheckpointDirs (after).
const char kJobsAutoincrementMigration[] = R"sql(
ALTER TABLE jobs ADD COLUMN checkpoint_dir TEXT;  -- spec.checkpoint.dir, normalized; NULL = default dir
CREATE INDEX jobs_by_checkpoint_dir ON jobs(checkpoint_dir) WHERE checkpoint_dir IS NOT NULL;
CREATE INDEX jobs_by_owner_state ON jobs(owner, state);
)sql";

// Schema migrations, in order; PRAGMA user_version = number applied. Never edit an
// applied migration: add a new one.
const char* const kMigrations[] = {
    // 1: jobs, labels, events.
    R"sql(
CREATE TABLE jobs (
  id              INTEGER PRIMARY KEY,   -- job id; larger = newer
  owner           TEXT NOT NULL,
  name            TEXT NOT NULL,
  queue           TEXT NOT NULL,
  priority        INTEGER NOT NULL,
  state           INTEGER NOT NULL,      -- llamafleet.v1.JobState
  status_reason   TEXT NOT NULL,
  spec            BLOB NOT NULL,         -- serialized llamafleet.v1.JobSpec (defaults applied)
  idempotency_key TEXT,                  -- NULL when none was given
  create_time_us  INTEGER NOT NULL,      -- unix microseconds
  update_time_us  INTEGER NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  last_event_seq  INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs(owner, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_by_state ON jobs(state, id);
CREATE INDEX jobs_by_queue ON jobs(queue, id);
CREATE INDEX jobs_by_owner ON jobs(owner, id);
CREATE TABLE job_labels (
  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  key    TEXT NOT NULL,
  value  TEXT NOT NULL,
  PRIMARY KEY (job_id, key)
) WITHOUT ROWID;
CREATE INDEX job_labels_by_kv ON job_labels(key, value, job_id);
CREATE TABLE job_events (
  job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  seq        INTEGER NOT NULL,             -- 1, 2, ... per job
  time_us    INTEGER NOT NULL,
  type       TEXT NOT NULL,
  from_state INTEGER NOT NULL,
  to_state   INTEGER NOT NULL,
  reason     TEXT NOT NULL,
  PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
)sql",
    // 2: workers, attempts, tasks, checkpoints, metrics; scheduling fields on jobs.
    R"sql(
ALTER TABLE jobs ADD COLUMN queued_since_us INTEGER NOT NULL DEFAULT 0;  -- FIFO and reservations
ALTER TABLE jobs ADD COLUMN eligible_us INTEGER NOT NULL DEFAULT 0;      -- restart backoff
ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;         -- of run_policy.max_restarts
ALTER TABLE jobs ADD COLUMN excluded_workers TEXT NOT NULL DEFAULT '';   -- node faults, comma-separated
ALTER TABLE jobs ADD COLUMN last_preempted_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN first_start_us INTEGER NOT NULL DEFAULT 0;   -- active_deadline counts from here
ALTER TABLE jobs ADD COLUMN finish_us INTEGER NOT NULL DEFAULT 0;        -- ttl_after_finished counts from here
ALTER TABLE jobs ADD COLUMN workers TEXT NOT NULL DEFAULT '';            -- current/last attempt, by node rank
ALTER TABLE jobs ADD COLUMN latest_metrics BLOB;                         -- llamafleet.v1.JobMetricsPoint
UPDATE jobs SET queued_since_us = create_time_us;
CREATE TABLE workers (
  name          TEXT PRIMARY KEY,
  inventory     BLOB NOT NULL,            -- llamafleet.v1.Inventory
  state         INTEGER NOT NULL,         -- llamafleet.v1.WorkerState
  registered_us INTEGER NOT NULL,
  last_seen_us  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE attempts (
  job_id        INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt       INTEGER NOT NULL,         -- 1, 2, ...
  state         INTEGER NOT NULL,         -- 0 active, 1 succeeded, 2 failed, 3 stopped
  start_us      INTEGER NOT NULL,
  end_us        INTEGER NOT NULL DEFAULT 0,
  master_addr   TEXT NOT NULL,
  master_port   INTEGER NOT NULL,
  resume_from   TEXT NOT NULL,
  failure_class TEXT NOT NULL DEFAULT '',
  reason        TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;
CREATE INDEX attempts_by_state ON attempts(state);
CREATE TABLE tasks (
  task_id    TEXT PRIMARY KEY,
  job_id     INTEGER NOT NULL,
  attempt    INTEGER NOT NULL,
  node_rank  INTEGER NOT NULL,
  worker     TEXT NOT NULL,
  ranks      INTEGER NOT NULL,            -- GPUs (or CPU ranks) it holds
  state      INTEGER NOT NULL,            -- llamafleet.v1.TaskState
  message    TEXT NOT NULL DEFAULT '',
  exits      BLOB,                        -- llamafleet.v1.TaskStatus
  FOREIGN KEY (job_id, attempt) REFERENCES attempts(job_id, attempt) ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX tasks_by_attempt ON tasks(job_id, attempt);
CREATE TABLE checkpoints (
  job_id          INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step            INTEGER NOT NULL,
  attempt         INTEGER NOT NULL,
  path            TEXT NOT NULL,
  bytes           INTEGER NOT NULL,
  manifest_sha256 TEXT NOT NULL,
  loss            REAL NOT NULL,
  time_us         INTEGER NOT NULL,
  PRIMARY KEY (job_id, step)
) WITHOUT ROWID;
CREATE TABLE job_metrics (
  job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt    INTEGER NOT NULL,
  step       INTEGER NOT NULL,
  time_us    INTEGER NOT NULL,
  point      BLOB NOT NULL                -- llamafleet.v1.JobMetricsPoint
);
CREATE INDEX job_metrics_by_job ON job_metrics(job_id, step);
)sql",
    // 3: API tokens (only their SHA-256 is kept); indexes for metrics and queues.
    R"sql(
CREATE TABLE api_tokens (
  id             INTEGER PRIMARY KEY,
  token_sha256   TEXT NOT NULL UNIQUE,      -- lowercase hex
  user           TEXT NOT NULL,
  role           INTEGER NOT NULL,          -- llamafleet.v1.Role
  create_time_us INTEGER NOT NULL,
  revoked        INTEGER NOT NULL DEFAULT 0
);
-- /metrics and ListQueues group jobs by queue and state; restarts by failure class. At
-- 100k jobs the first takes 8.5 ms with the index, 2.4 s without.
CREATE INDEX jobs_by_queue_state ON jobs(queue, state);
CREATE INDEX attempts_by_failure_class ON attempts(failure_class);
)sql",
    // 4: ids never reused, jobs' own checkpoint dirs, active jobs per owner (above).
    kJobsAutoincrementMigration,
    // 5: worker identities (storage/worker_credential_store.h): per-worker credentials, bound
    // to the worker's name; only their SHA-256 is kept.
    R"sql(
CREATE TABLE worker_credentials (
  name              TEXT PRIMARY KEY,
  credential_sha256 TEXT NOT NULL,          -- lowercase hex
  create_time_us    INTEGER NOT NULL
);
)sql",
    // 6: each attempt's gang size and the elastic resize that started it (issue 14).
    R"sql(
ALTER TABLE attempts ADD COLUMN nodes INTEGER NOT NULL DEFAULT 0;          -- 0: before schema 6
ALTER TABLE attempts ADD COLUMN resize_reason TEXT NOT NULL DEFAULT '';
)sql",
};


// SQLite cannot add AUTOINCREMENT to a table: rebuild it (the documented create-copy-drop-
// rename sequence, with foreign keys off so that dropping the old table cascades nothing).
// The new table is the old one's own CREATE statement with AUTOINCREMENT added, so columns
// that other migrations added are kept; the indexes are recreated from their statements.
absl::Status RebuildJobsWithAutoincrement(sqlite::Connection& conn) {
  absl::StatusOr<sqlite::Statement> table =
      conn.Prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'jobs'");
  if (!table.ok()) return table.status();
  absl::StatusOr<bool> row = table->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError("no jobs table to rebuild");
  std::string create = table->ColumnText(0);
  table->Reset();  // an open statement would keep the table locked against DROP
  if (create.find("AUTOINCREMENT") != std::string::npos) return absl::OkStatus();
  // "CREATE TABLE jobs (" or, after a rename, "CREATE TABLE \"jobs\" (".
  const std::string kKey = "INTEGER PRIMARY KEY";
  const size_t key = create.find(kKey);
  const size_t paren = create.find('(');
  if (key == std::string::npos || paren == std::string::npos || key < paren ||
      create.rfind("CREATE TABLE ", 0) != 0) {
    return absl::InternalError(absl::StrCat("unexpected jobs table: ", create.substr(0, 80)));
  }
  create.insert(key + kKey.size(), " AUTOINCREMENT");
  create.replace(0, paren, "CREATE TABLE jobs_rebuilt ");
  std::vector<std::string> indexes;
  absl::StatusOr<sqlite::Statement> index = conn.Prepare(
      "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs' AND sql IS NOT NULL");
  if (!index.ok()) return index.status();
  while (true) {
    absl::StatusOr<bool> more = index->Step();
    if (!more.ok()) return more.status();
    if (!*more) break;
    indexes.push_back(index->ColumnText(0));
  }
  index->Reset();
  for (const std::string& sql :
       {create, std::string("INSERT INTO jobs_rebuilt SELECT * FROM jobs"), std::string("DROP TABLE jobs"),
        std::string("ALTER TABLE jobs_rebuilt RENAME TO jobs")}) {
    if (absl::Status s = conn.Exec(sql); !s.ok()) return s;
  }
  for (const std::string& sql : indexes) {
    if (absl::Status s = conn.Exec(sql); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Fills jobs.checkpoint_dir from the stored specs of jobs submitted before it existed.
absl::Status BackfillCheckpointDirs(sqlite::Connection& conn) {
  absl::StatusOr<sqlite::Statement> select = conn.Prepare("SELECT id, spec FROM jobs");
  absl::StatusOr<sqlite::Statement> update =
      conn.Prepare("UPDATE jobs SET checkpoint_dir = ?2 WHERE id = ?1");
  if (!select.ok()) return select.status();
  if (!update.ok()) return update.status();
  std::vector<std::pair<int64_t, std::string>> dirs;  // read all first, then write
  while (true) {
    absl::StatusOr<bool> row = select->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    v1::JobSpec spec;
    if (!spec.ParseFromString(select->ColumnText(1)) || spec.checkpoint().dir().empty()) continue;
    dirs.emplace_back(select->ColumnInt(0), spec.checkpoint().dir());
  }
  select->Reset();
  for (const auto& [id, dir] : dirs) {
    update->Bind(1, id).Bind(2, dir);
    if (absl::Status s = update->Run(); !s.ok()) return s;
    update->Reset();
  }
  return absl::OkStatus();
}

constexpr char kJobColumns[] =
    "id, owner, state, status_reason, spec, idempotency_key, create_time_us, update_time_us, "
    "attempts, last_event_seq, restarts, workers, latest_metrics";

}  // namespace

const char* JobColumns() { return kJobColumns; }

absl::StatusOr<v1::Job> JobFromRow(const sqlite::Statement& s) {
  v1::Job job;
  job.set_id(JobIdString(s.ColumnInt(0)));
  job.set_owner(s.ColumnText(1));
  job.set_state(static_cast<v1::JobState>(s.ColumnInt(2)));
  job.set_status_reason(s.ColumnText(3));
  if (!job.mutable_spec()->ParseFromString(s.ColumnText(4))) {
    return absl::DataLossError(absl::StrCat("job ", s.ColumnInt(0), ": stored spec is corrupt"));
  }
  if (!s.ColumnIsNull(5)) job.set_idempotency_key(s.ColumnText(5));
  *job.mutable_create_time() = TimeUtil::MicrosecondsToTimestamp(s.ColumnInt(6));
  *job.mutable_update_time() = TimeUtil::MicrosecondsToTimestamp(s.ColumnInt(7));
  job.set_attempts(static_cast<int32_t>(s.ColumnInt(8)));
  job.set_last_event_seq(s.ColumnInt(9));
  job.set_restarts(static_cast<int32_t>(s.ColumnInt(10)));
  for (absl::string_view w : absl::StrSplit(s.ColumnText(11), ',', absl::SkipEmpty())) {
    job.add_workers(std::string(w));
  }
  if (!s.ColumnIsNull(12)) (void)job.mutable_latest_metrics()->ParseFromString(s.ColumnText(12));
  return job;
}

namespace {

v1::JobEvent EventFromRow(const sqlite::Statement& s) {
  v1::JobEvent e;
  e.set_job_id(JobIdString(s.ColumnInt(0)));
  e.set_seq(s.ColumnInt(1));
  *e.mutable_time() = TimeUtil::MicrosecondsToTimestamp(s.ColumnInt(2));
  e.set_type(s.ColumnText(3));
  e.set_from_state(static_cast<v1::JobState>(s.ColumnInt(4)));
  e.set_to_state(static_cast<v1::JobState>(s.ColumnInt(5)));
  e.set_reason(s.ColumnText(6));
  return e;
}

// Pages in the WAL after the last commit, as reported by SQLite's WAL hook.
thread_local int wal_pages_after_commit = 0;

int RecordWalPages(void*, sqlite3*, const char*, int pages) {
  wal_pages_after_commit = pages;
  return SQLITE_OK;
}

int WalPages(sqlite3*) { return wal_pages_after_commit; }

}  // namespace

int CurrentSchemaVersion() { return static_cast<int>(std::size(kMigrations)); }

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

std::string JobIdString(int64_t id) { return absl::StrCat(id); }

absl::StatusOr<int64_t> ParseJobId(absl::string_view text, absl::string_view field) {
  int64_t id;
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is required"));
  if (!absl::SimpleAtoi(text, &id) || id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be a job id (a positive number), got '", text.substr(0, 64), "'"));
  }
  return id;
}

namespace {

// States in which a job counts against its owner's active-job limit (JobState numbers).
std::vector<int> ActiveStates() {
  return {v1::QUEUED, v1::SCHEDULED, v1::RUNNING, v1::RESTARTING, v1::PREEMPTING};
}

// `dir` (normalized: absolute, no trailing '/', no '.' or '..') and its ancestors, "/" last.
std::vector<std::string> SelfAndAncestors(const std::string& dir) {
  std::vector<std::string> out;
  std::string d = dir;
  while (!d.empty()) {
    out.push_back(d);
    if (d == "/") break;
    const size_t slash = d.rfind('/');
    d = slash == 0 ? "/" : d.substr(0, slash);
  }
  return out;
}

// [low, high): every normalized path strictly below `dir`.
std::pair<std::string, std::string> BelowRange(const std::string& dir) {
  std::string low = dir == "/" ? "/" : dir + "/";
  std::string high = low;
  high.back() = static_cast<char>(high.back() + 1);  // '/' + 1 == '0'
  return {low, high};
}

}  // namespace

// ---------------------------------------------------------------------------
// Writer-side statements and operations.
// ---------------------------------------------------------------------------

struct JobStore::WriterStatements {
  std::map<std::string, sqlite::Statement> cache;  // JobStore::Write's statements
  sqlite::Statement begin, commit, rollback, savepoint, release, rollback_to;
  sqlite::Statement find_by_key;
  sqlite::Statement insert_job;
  sqlite::Statement count_active;
  sqlite::Statement set_finish;
  sqlite::Statement find_checkpoint_dir;
  sqlite::Statement find_checkpoint_dir_below;
  sqlite::Statement insert_label;
  sqlite::Statement insert_event;
  sqlite::Statement select_job;
  sqlite::Statement select_schedulable;  // one job with its scheduling columns
  sqlite::Statement update_state;
  sqlite::Connection* conn = nullptr;
  Clock* clock = nullptr;

  // Active (queued or running) jobs per owner, for limits.max_active_jobs_per_user,
  // without counting rows on every submission (a COUNT over the owner's index range
  // reads every active job of theirs: ~10,000 at the default limit).
  // `active_committed`: as of the last commit, for owners counted since the cache was
  // last dropped; `active_txn`: jobs the open transaction's successful writes created.
  // Only submissions add active jobs; after a commit that held any other write (a job
  // may have ended) the committed counts are dropped and counted again when needed.
  std::map<std::string, int64_t> active_committed;
  std::map<std::string, int64_t> active_txn;

  // The owner's active jobs as the open transaction sees them.
  absl::StatusOr<int64_t> ActiveJobs(const std::string& owner) {
    auto txn = active_txn.find(owner);
    const int64_t in_txn = txn == active_txn.end() ? 0 : txn->second;
    if (auto it = active_committed.find(owner); it != active_committed.end()) {
      return it->second + in_txn;
    }
    count_active.Bind(1, owner);
    absl::StatusOr<bool> row = count_active.Step();
    const int64_t n = row.ok() && *row ? count_active.ColumnInt(0) : 0;
    count_active.Reset();
    if (!row.ok()) return row.status();
    active_committed[owner] = n - in_txn;  // the rows include this transaction's
    return n;
  }

  absl::Status Prepare(sqlite::Connection* c) {
    conn = c;
    auto prep = [&](sqlite::Statement* out, const std::string& sql) -> absl::Status {
      absl::StatusOr<sqlite::Statement> s = c->Prepare(sql);
      if (!s.ok()) return s.status();
      *out = std::move(*s);
      return absl::OkStatus();
    };
    absl::Status s;
    if (!(s = prep(&begin, "BEGIN IMMEDIATE")).ok() || !(s = prep(&commit, "COMMIT")).ok() ||
        !(s = prep(&rollback, "ROLLBACK")).ok() || !(s = prep(&savepoint, "SAVEPOINT op")).ok() ||
        !(s = prep(&release, "RELEASE op")).ok() ||
        !(s = prep(&rollback_to, "ROLLBACK TO op")).ok()) {
      return s;
    }
    if (!(s = prep(&find_by_key, "SELECT id FROM jobs WHERE owner = ?1 AND idempotency_key = ?2"))
             .ok() ||
        !(s = prep(&insert_job,
                   "INSERT INTO jobs (owner, name, queue, priority, state, status_reason, spec, "
                   "idempotency_key, create_time_us, update_time_us, last_event_seq, "
                   "queued_since_us, checkpoint_dir) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                   "?9, 1, ?9, ?10)"))
             .ok() ||
        !(s = prep(&count_active,
                   absl::StrCat("SELECT COUNT(*) FROM jobs WHERE owner = ?1 AND state IN (",
                                absl::StrJoin(ActiveStates(), ", "), ")")))
             .ok() ||
        !(s = prep(&find_checkpoint_dir, "SELECT id FROM jobs WHERE checkpoint_dir = ?1 LIMIT 1"))
             .ok() ||
        !(s = prep(&set_finish, "UPDATE jobs SET finish_us = ?2 WHERE id = ?1 AND finish_us = 0"))
             .ok() ||
        !(s = prep(&find_checkpoint_dir_below,
                   "SELECT id, checkpoint_dir FROM jobs WHERE checkpoint_dir > ?1 AND "
                   "checkpoint_dir < ?2 LIMIT 1"))
             .ok() ||
        !(s = prep(&insert_label, "INSERT INTO job_labels (job_id, key, value) VALUES (?1, ?2, ?3)"))
             .ok() ||
        !(s = prep(&insert_event,
                   "INSERT INTO job_events (job_id, seq, time_us, type, from_state, to_state, "
                   "reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"))
             .ok() ||
        !(s = prep(&select_job, absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id = ?1")))
             .ok() ||
        !(s = prep(&select_schedulable, absl::StrCat("SELECT ", SchedulableJobColumns(),
                                                     " FROM jobs WHERE id = ?1")))
             .ok() ||
        !(s = prep(&update_state,
                   "UPDATE jobs SET state = ?2, status_reason = ?3, update_time_us = ?4, "
                   "last_event_seq = ?5 WHERE id = ?1"))
             .ok()) {
      return s;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<v1::Job>> LoadJob(int64_t id) {
    select_job.Bind(1, id);
    absl::StatusOr<bool> row = select_job.Step();
    std::optional<v1::Job> result;
    if (row.ok() && *row) {
      absl::StatusOr<v1::Job> job = JobFromRow(select_job);
      if (!job.ok()) {
        select_job.Reset();
        return job.status();
      }
      result = std::move(*job);
    }
    select_job.Reset();
    if (!row.ok()) return row.status();
    return result;
  }

  // Inserts one event row.
  absl::Status InsertEvent(int64_t job_id, const v1::JobEvent& e, int64_t time_us) {
    insert_event.Bind(1, job_id).Bind(2, e.seq()).Bind(3, time_us).Bind(4, e.type());
    insert_event.Bind(5, static_cast<int64_t>(e.from_state()));
    insert_event.Bind(6, static_cast<int64_t>(e.to_state())).Bind(7, e.reason());
    return insert_event.Run();
  }

  // Records an event and the job's new state in the current transaction. The job's
  // status reason becomes `status_reason` (default: the event's reason).
  absl::StatusOr<v1::JobEvent> AppendEvent(v1::Job* job, absl::string_view type, v1::JobState to,
                                           absl::string_view reason, int64_t now_us,
                                           std::optional<absl::string_view> status_reason = {}) {
    const absl::string_view status = status_reason.value_or(reason);
    int64_t id;
    (void)absl::SimpleAtoi(job->id(), &id);
    v1::JobEvent e = MakeEvent(*job, job->last_event_seq() + 1, type, job->state(), to, reason,
                               now_us);
    if (absl::Status s = InsertEvent(id, e, now_us); !s.ok()) return s;
    update_state.Bind(1, id).Bind(2, static_cast<int64_t>(to)).Bind(3, status).Bind(4, now_us);
    update_state.Bind(5, e.seq());
    if (absl::Status s = update_state.Run(); !s.ok()) return s;
    job->set_state(to);
    job->set_status_reason(std::string(status));
    job->set_last_event_seq(e.seq());
    *job->mutable_update_time() = e.time();
    return e;
  }

  static v1::JobEvent MakeEvent(const v1::Job& job, int64_t seq, absl::string_view type,
                                v1::JobState from, v1::JobState to, absl::string_view reason,
                                int64_t now_us) {
    v1::JobEvent e;
    e.set_job_id(job.id());
    e.set_seq(seq);
    *e.mutable_time() = TimeUtil::MicrosecondsToTimestamp(now_us);
    e.set_type(std::string(type));
    e.set_from_state(from);
    e.set_to_state(to);
    e.set_reason(std::string(reason));
    return e;
  }
};

class JobStore::WriteOp {
 public:
  virtual ~WriteOp() = default;
  // Applies the write inside the open transaction (within a savepoint of its own).
  virtual absl::Status Apply(WriterStatements& w) = 0;
  // Runs once: after the commit that made the write durable (OK), or on failure.
  virtual void Complete(absl::Status status) = 0;

  // True when Complete may run on the completion thread instead of the writer: the
  // callback only answers a caller (a submission's RPC), so the writer goes on to the next
  // batch instead of spending ~40 us per write in gRPC. Callbacks that change coordinator
  // state stay on the writer, in commit order.
  virtual bool CompletesOffWriter() const { return false; }

  // True when committing this write can only add active jobs (a submission), so the
  // writer's per-owner active counts stay exact without counting again.
  virtual bool OnlyAddsActiveJobs() const { return false; }

  // After the commit, on the writer: hands each job this write created (QUEUED, queued
  // since its create time) to `put`, which files it in the queued-jobs view and returns
  // the view's entry. The write may keep the entry to answer its caller (shared, not
  // copied, on the writer).
  virtual void PutCreatedJobs(
      const std::function<QueuedJobsSnapshot::Entry(v1::Job&&)>& put) {}

  // Background writes (the coordinator's own bookkeeping: attempts, task reports) yield
  // to writes a client waits for (submissions, cancellations): see WriterLoop.
  virtual bool background() const { return false; }
  // How many functions the write runs: what it counts for against max_background.
  virtual size_t weight() const { return 1; }

  absl::Status result;                // Apply's result in the last attempt
  std::vector<v1::JobEvent> events;  // published after commit
  uint64_t seq = 0;                   // order of arrival (Enqueue)
};

namespace {

class SubmitOp : public JobStore::WriteOp {
 public:
  SubmitOp(std::vector<SubmitJobInput> inputs, JobStore::SubmitCallback done)
      : inputs_(std::move(inputs)), done_(std::move(done)) {}

  absl::Status Apply(JobStore::WriterStatements& w) override {
    results_.clear();
    events.clear();
    const int64_t now_us = absl::ToUnixMicros(w.clock->Now());
    // By owner: active jobs including those this write created so far. Merged into
    // w.active_txn only when the whole write succeeds (a failed write is rolled back).
    std::map<std::string, int64_t> active;
    std::map<std::string, int64_t> created;
    for (const SubmitJobInput& in : inputs_) {
      SubmitJobResult r;
      if (!in.idempotency_key.empty()) {
        w.find_by_key.Bind(1, in.owner).Bind(2, in.idempotency_key);
        absl::StatusOr<bool> row = w.find_by_key.Step();
        int64_t existing = row.ok() && *row ? w.find_by_key.ColumnInt(0) : 0;
        w.find_by_key.Reset();
        if (!row.ok()) return row.status();
        if (existing != 0) {
          absl::StatusOr<std::optional<v1::Job>> job = w.LoadJob(existing);
          if (!job.ok()) return job.status();
          r.job = std::move(**job);
          r.created = false;
          results_.push_back(std::move(r));
          continue;
        }
      }
      if (in.max_active_jobs > 0) {
        auto [it, first] = active.try_emplace(in.owner, 0);
        if (first) {
          absl::StatusOr<int64_t> n = w.ActiveJobs(in.owner);
          if (!n.ok()) return n.status();
          it->second = *n + created[in.owner];
        }
        if (++it->second > in.max_active_jobs) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "user ", in.owner, " may have at most ", in.max_active_jobs,
              " active (queued or running) jobs (limits.max_active_jobs_per_user); this "
              "submission would make ", it->second));
        }
      }
      const std::string& checkpoint_dir = in.spec.checkpoint().dir();
      if (!checkpoint_dir.empty()) {
        if (absl::Status s = CheckCheckpointDirFree(w, in.field_prefix, checkpoint_dir); !s.ok()) {
          return s;
        }
      }
      std::string spec_bytes;
      in.spec.SerializeToString(&spec_bytes);
      const std::string reason = "waiting to be scheduled";
      w.insert_job.Bind(1, in.owner).Bind(2, in.spec.name()).Bind(3, in.spec.queue());
      w.insert_job.Bind(4, static_cast<int64_t>(in.spec.priority()));
      w.insert_job.Bind(5, static_cast<int64_t>(v1::QUEUED)).Bind(6, reason);
      w.insert_job.BindBlob(7, spec_bytes);
      if (in.idempotency_key.empty()) {
        w.insert_job.BindNull(8);
      } else {
        w.insert_job.Bind(8, in.idempotency_key);
      }
      w.insert_job.Bind(9, now_us);
      if (checkpoint_dir.empty()) {
        w.insert_job.BindNull(10);
      } else {
        w.insert_job.Bind(10, checkpoint_dir);
      }
      if (absl::Status s = w.insert_job.Run(); !s.ok()) return s;
      const int64_t id = sqlite3_last_insert_rowid(w.conn->raw());
      for (const auto& [key, value] : in.spec.labels()) {
        w.insert_label.Bind(1, id).Bind(2, key).Bind(3, value);
        if (absl::Status s = w.insert_label.Run(); !s.ok()) return s;
      }
      // The job is born QUEUED with its first event; the event names the submitter, the
      // job's status says what happens next.
      // The spec joins the job after the commit (PutCreatedJobs): moved, not copied here.
      v1::Job& job = r.job;
      job.set_id(JobIdString(id));
      job.set_owner(in.owner);
      job.set_idempotency_key(in.idempotency_key);
      job.set_state(v1::QUEUED);
      job.set_status_reason(reason);
      job.set_last_event_seq(1);
      *job.mutable_create_time() = TimeUtil::MicrosecondsToTimestamp(now_us);
      *job.mutable_update_time() = job.create_time();
      v1::JobEvent e = JobStore::WriterStatements::MakeEvent(
          job, 1, "submitted", v1::JOB_STATE_UNSPECIFIED,
                                                   v1::QUEUED,
                                                   absl::StrCat("submitted by ", in.owner), now_us);
      if (absl::Status s = w.InsertEvent(id, e, now_us); !s.ok()) return s;
      events.push_back(std::move(e));
      r.created = true;
      results_.push_back(std::move(r));
      ++created[in.owner];
    }
    for (const auto& [owner, n] : created) w.active_txn[owner] += n;
    return absl::OkStatus();
  }

  bool OnlyAddsActiveJobs() const override { return true; }

  // FAILED_PRECONDITION if another job's own checkpoint directory is `dir`, lies above it
  // or below it: checkpoints of two jobs must never share files, and retention deletes
  // step-N directories inside a job's directory.
  static absl::Status CheckCheckpointDirFree(JobStore::WriterStatements& w,
                                             const std::string& prefix, const std::string& dir) {
    auto taken = [&](int64_t job, absl::string_view how) {
      return absl::FailedPreconditionError(absl::StrCat(
          prefix, "checkpoint.dir ", dir, " ", how, " job ", job,
          "; every job needs a checkpoint directory of its own (leave checkpoint.dir empty for "
          "the default, or read another job's checkpoint with checkpoint.resume)"));
    };
    for (const std::string& d : SelfAndAncestors(dir)) {
      w.find_checkpoint_dir.Bind(1, d);
      absl::StatusOr<bool> row = w.find_checkpoint_dir.Step();
      const int64_t job = row.ok() && *row ? w.find_checkpoint_dir.ColumnInt(0) : 0;
      w.find_checkpoint_dir.Reset();
      if (!row.ok()) return row.status();
      if (job != 0) {
        return taken(job, d == dir ? "is the checkpoint directory of"
                                   : absl::StrCat("is inside ", d, ", the checkpoint directory of"));
      }
    }
    const auto [low, high] = BelowRange(dir);
    w.find_checkpoint_dir_below.Bind(1, low).Bind(2, high);
    absl::StatusOr<bool> row = w.find_checkpoint_dir_below.Step();
    const int64_t job = row.ok() && *row ? w.find_checkpoint_dir_below.ColumnInt(0) : 0;
    const std::string below = job != 0 ? w.find_checkpoint_dir_below.ColumnText(1) : "";
    w.find_checkpoint_dir_below.Reset();
    if (!row.ok()) return row.status();
    if (job != 0) return taken(job, absl::StrCat("contains ", below, ", the checkpoint directory of"));
    return absl::OkStatus();
  }

  // Off the writer: each created job is copied out of its queued-jobs entry here.
  void Complete(absl::Status status) override {
    if (!status.ok()) {
      done_(status);
      return;
    }
    for (size_t i = 0; i < results_.size(); ++i) {
      SubmitJobResult& r = results_[i];
      if (!r.created) continue;
      if (i < entries_.size() && entries_[i] != nullptr) {
        r.job = entries_[i]->job;
      } else {
        *r.job.mutable_spec() = inputs_[i].spec;  // not filed (never expected)
      }
    }
    entries_.clear();
    done_(std::move(results_));
  }

  bool CompletesOffWriter() const override { return true; }

  void PutCreatedJobs(
      const std::function<QueuedJobsSnapshot::Entry(v1::Job&&)>& put) override {
    entries_.assign(results_.size(), nullptr);
    for (size_t i = 0; i < results_.size(); ++i) {
      if (!results_[i].created) continue;
      // Committed: Apply never runs again, so the input's spec can move into the job.
      v1::Job job = std::move(results_[i].job);
      *job.mutable_spec() = std::move(inputs_[i].spec);
      entries_[i] = put(std::move(job));
    }
  }

 private:
  std::vector<SubmitJobInput> inputs_;
  JobStore::SubmitCallback done_;
  std::vector<SubmitJobResult> results_;  // one per input, in order
  std::vector<QueuedJobsSnapshot::Entry> entries_;  // the created jobs' view entries
};

class TransitionOp : public JobStore::WriteOp {
 public:
  // `cancel` selects the cancel semantics (terminal jobs are not an error).
  TransitionOp(int64_t job_id, std::vector<v1::JobState> from, v1::JobState to, std::string type,
               std::string reason, bool cancel,
               std::function<void(absl::StatusOr<CancelJobResult>)> done)
      : job_id_(job_id),
        from_(std::move(from)),
        to_(to),
        type_(std::move(type)),
        reason_(std::move(reason)),
        cancel_(cancel),
        done_(std::move(done)) {}

  absl::Status Apply(JobStore::WriterStatements& w) override {
    events.clear();
    absl::StatusOr<std::optional<v1::Job>> loaded = w.LoadJob(job_id_);
    if (!loaded.ok()) return loaded.status();
    if (!loaded->has_value()) return absl::NotFoundError(absl::StrCat("job ", job_id_, " not found"));
    result_ = CancelJobResult{std::move(**loaded), false, ""};
    v1::Job& job = result_.job;
    const bool allowed = from_.empty() ? !IsTerminal(job.state())
                                       : std::find(from_.begin(), from_.end(), job.state()) !=
                                             from_.end();
    if (!allowed) {
      result_.message = absl::StrCat("job ", job_id_, " is already ", v1::JobState_Name(job.state()),
                                     "; nothing changed");
      if (cancel_ && IsTerminal(job.state())) return absl::OkStatus();
      return absl::FailedPreconditionError(result_.message);
    }
    const int64_t now_us = absl::ToUnixMicros(w.clock->Now());
    absl::StatusOr<v1::JobEvent> e = w.AppendEvent(&job, type_, to_, reason_, now_us);
    if (!e.ok()) return e.status();
    if (IsTerminal(to_)) {
      // ttl_after_finished counts from here (a job cancelled while QUEUED never had an
      // attempt whose end would have set it, and so was never deleted).
      w.set_finish.Bind(1, job_id_).Bind(2, now_us);
      if (absl::Status s = w.set_finish.Run(); !s.ok()) return s;
    }
    events.push_back(std::move(*e));
    result_.changed = true;
    result_.message = cancel_ ? "cancelled" : v1::JobState_Name(to_);
    return absl::OkStatus();
  }

  void Complete(absl::Status status) override {
    if (status.ok()) {
      done_(std::move(result_));
    } else {
      done_(status);
    }
  }

 private:
  const int64_t job_id_;
  const std::vector<v1::JobState> from_;
  const v1::JobState to_;
  const std::string type_;
  const std::string reason_;
  const bool cancel_;
  std::function<void(absl::StatusOr<CancelJobResult>)> done_;
  CancelJobResult result_;
};

// A TxnFunction's transaction: the writer's statements plus the op's event list.
class TxnImpl : public Txn {
 public:
  TxnImpl(JobStore::WriterStatements& w, std::vector<v1::JobEvent>* events)
      : w_(w), events_(events), now_us_(absl::ToUnixMicros(w.clock->Now())) {}

  absl::StatusOr<sqlite::Statement*> Statement(const std::string& sql) override {
    auto it = w_.cache.find(sql);
    if (it == w_.cache.end()) {
      absl::StatusOr<sqlite::Statement> s = w_.conn->Prepare(sql);
      if (!s.ok()) return s.status();
      it = w_.cache.emplace(sql, std::move(*s)).first;
    }
    it->second.Reset();
    return &it->second;
  }
  absl::StatusOr<std::optional<v1::Job>> LoadJob(int64_t job_id) override {
    return w_.LoadJob(job_id);
  }
  absl::Status Transition(v1::Job* job, absl::string_view type, v1::JobState to,
                          absl::string_view reason,
                          std::optional<absl::string_view> status_reason) override {
    absl::StatusOr<v1::JobEvent> e = w_.AppendEvent(job, type, to, reason, now_us_, status_reason);
    if (!e.ok()) return e.status();
    events_->push_back(std::move(*e));
    return absl::OkStatus();
  }
  int64_t NowMicros() const override { return now_us_; }

 private:
  JobStore::WriterStatements& w_;
  std::vector<v1::JobEvent>* events_;
  const int64_t now_us_;
};

class FunctionOp : public JobStore::WriteOp {
 public:
  FunctionOp(TxnFunction fn, std::function<void(absl::Status)> done)
      : fn_(std::move(fn)), done_(std::move(done)) {}
  absl::Status Apply(JobStore::WriterStatements& w) override {
    events.clear();
    TxnImpl txn(w, &events);
    return fn_(txn);
  }
  void Complete(absl::Status status) override { done_(std::move(status)); }
  bool background() const override { return true; }

 private:
  TxnFunction fn_;
  std::function<void(absl::Status)> done_;
};

// Several functions in one write, so they share one transaction (JobStore::WriteEach):
// each runs in a savepoint of its own inside the op's, so one that fails undoes only its
// own changes and the others commit.
class FunctionsOp : public JobStore::WriteOp {
 public:
  explicit FunctionsOp(std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> fns)
      : fns_(std::move(fns)), results_(fns_.size()) {}
  absl::Status Apply(JobStore::WriterStatements& w) override {
    events.clear();
    for (size_t i = 0; i < fns_.size(); ++i) {
      if (absl::Status s = w.savepoint.Run(); !s.ok()) return s;
      std::vector<v1::JobEvent> own;
      TxnImpl txn(w, &own);
      results_[i] = fns_[i].first(txn);
      if (!results_[i].ok()) {
        if (!w.conn->InTransaction()) return results_[i];  // SQLite rolled everything back
        if (absl::Status s = w.rollback_to.Run(); !s.ok()) return s;
      } else {
        for (v1::JobEvent& e : own) events.push_back(std::move(e));
      }
      if (absl::Status s = w.release.Run(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // `status` not OK: the transaction failed, and with it every function.
  void Complete(absl::Status status) override {
    for (size_t i = 0; i < fns_.size(); ++i) fns_[i].second(status.ok() ? results_[i] : status);
  }
  bool background() const override { return true; }
  size_t weight() const override { return fns_.size(); }

 private:
  std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> fns_;
  std::vector<absl::Status> results_;
};

// Runs a statement on the writer connection, in order with the other writes.
class ExecOp : public JobStore::WriteOp {
 public:
  ExecOp(std::string sql, std::function<void(absl::Status)> done)
      : sql_(std::move(sql)), done_(std::move(done)) {}
  absl::Status Apply(JobStore::WriterStatements& w) override { return w.conn->Exec(sql_); }
  void Complete(absl::Status status) override { done_(std::move(status)); }
  bool background() const override { return true; }

 private:
  const std::string sql_;
  std::function<void(absl::Status)> done_;
};

}  // namespace

// ---------------------------------------------------------------------------
// JobStore
// ---------------------------------------------------------------------------

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
  sqlite::Connection* operator->() { return conn_.get(); }
  sqlite::Connection* get() { return conn_.get(); }

 private:
  JobStore* store_;
  std::unique_ptr<sqlite::Connection> conn_;
};

JobStore::JobStore(const JobStoreOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const JobStoreOptions& options) {
  std::unique_ptr<JobStore> store(new JobStore(options));
  if (absl::Status s = store->Init(); !s.ok()) return s;
  // Named for top -H, perf and gdb (15 characters at most).
  store->completion_thread_ = std::thread([s = store.get()] {
    pthread_setname_np(pthread_self(), "lf-db-complete");
    s->CompletionLoop();
  });
  store->writer_thread_ = std::thread([s = store.get()] {
    pthread_setname_np(pthread_self(), "lf-db-writer");
    s->WriterLoop();
  });
  store->checkpoint_thread_ = std::thread([s = store.get()] {
    pthread_setname_np(pthread_self(), "lf-db-checkpt");
    s->CheckpointLoop();
  });
  return store;
}

// The database holds token hashes, every job's spec and its events: only the coordinator's
// user may read it. Creates the file with mode 0600 (SQLite gives the -wal and -shm files
// the database file's mode) and narrows an existing one, its -wal and -shm included.
absl::Status RestrictDatabaseFiles(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open database ", path, ": ", std::strerror(errno)));
  }
  const int rc = fchmod(fd, 0600);
  const int error = errno;
  close(fd);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make database ", path, " private (mode 0600): ", std::strerror(error)));
  }
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string file = path + suffix;
    if (chmod(file.c_str(), 0600) != 0 && errno != ENOENT) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot make ", file, " private (mode 0600): ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

namespace {

// Gives the WAL file room for the frames written between checkpoints, as zeros, so that a
// commit overwrites blocks the file already has. A commit that grows the file makes its
// fdatasync also commit the new size through the filesystem's journal: on ext4 here that
// is ~0.25 ms of a ~0.7 ms sync (0.25 ms of a one-shot `llamafleet submit`). After a
// checkpoint SQLite restarts the WAL from its start and overwrites it anyway; this makes
// the first pass through the file do the same.
// Safe for the database: SQLite reads frames only up to the first one whose salt and
// checksum do not match (zeros never do), and treats a WAL whose header is zeros as empty.
// Runs under BEGIN IMMEDIATE, so no other connection or process appends meanwhile, and
// writes only past the current end. Best effort: on a full disk it gives the space back
// and logs.
void PreallocateWal(sqlite::Connection& conn, const std::string& db_path, int checkpoint_pages) {
  absl::StatusOr<int64_t> page_size = conn.QueryInt("PRAGMA page_size");
  if (!page_size.ok() || *page_size <= 0 || checkpoint_pages <= 0) return;
  // The WAL keeps growing while a checkpoint runs: room for 1.5 times the threshold
  // (6 MB at the defaults; writing and syncing it takes ~15 ms at open).
  const int64_t kWalHeader = 32, kFrameHeader = 24;
  const int64_t want = kWalHeader + int64_t{checkpoint_pages} * 3 / 2 * (*page_size + kFrameHeader);
  if (!conn.Exec("BEGIN IMMEDIATE").ok()) return;
  const std::string wal = db_path + "-wal";
  const int fd = open(wal.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  std::string error;
  if (fd < 0) {
    error = std::strerror(errno);
  } else {
    struct stat st;
    if (fstat(fd, &st) != 0) {
      error = std::strerror(errno);
    } else if (st.st_size < want) {
      const std::string zeros(1 << 20, '\0');
      for (int64_t at = st.st_size; at < want && error.empty();) {
        const ssize_t n = pwrite(fd, zeros.data(),
                                 static_cast<size_t>(std::min<int64_t>(zeros.size(), want - at)), at);
        if (n <= 0) error = std::strerror(n < 0 ? errno : ENOSPC);
        at += std::max<ssize_t>(n, 0);
      }
      if (error.empty() && fdatasync(fd) != 0) error = std::strerror(errno);
      // A disk too full for it gets its space back: the WAL then grows as before.
      if (!error.empty() && ftruncate(fd, st.st_size) != 0) {
        error += absl::StrCat("; and could not give the space back: ", std::strerror(errno));
      }
    }
    close(fd);
  }
  (void)conn.Exec("COMMIT");
  if (!error.empty()) {
    spdlog::warn("database {}: could not preallocate the WAL ({} bytes): {}; commits still work, "
                 "each one that grows the WAL syncs its new size too",
                 db_path, want, error);
  }
}

}  // namespace

absl::Status JobStore::Init() {
  if (absl::Status s = RestrictDatabaseFiles(options_.path); !s.ok()) return s;
  // With synchronous=FULL the writer writes each commit's WAL frames as one pwrite
  // (storage/coalescing_vfs.h): every commit syncs the WAL before other connections can
  // see its frames, which is when that VFS writes them out.
  const char* vfs = options_.synchronous_full ? sqlite::CoalescingVfsName() : nullptr;
  absl::StatusOr<std::unique_ptr<sqlite::Connection>> writer =
      sqlite::Connection::Open(options_.path, /*create=*/true, /*read_only=*/false, vfs);
  if (!writer.ok()) return writer.status();
  writer_ = std::move(*writer);

  absl::StatusOr<int64_t> version = writer_->QueryInt("PRAGMA user_version");
  if (!version.ok()) return version.status();
  if (*version > CurrentSchemaVersion()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database ", options_.path, " has schema version ", *version,
        ", newer than this llamafleet build supports (", CurrentSchemaVersion(),
        "); run a newer llamafleet-coordinator"));
  }
  // WAL: readers never block the writer, and a commit is one append + fsync.
  absl::StatusOr<sqlite::Statement> wal = writer_->Prepare("PRAGMA journal_mode=WAL");
  if (!wal.ok()) return wal.status();
  absl::StatusOr<bool> row = wal->Step();
  if (!row.ok()) return row.status();
  if (!*row || wal->ColumnText(0) != "wal") {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", options_.path, ": cannot enable WAL journal mode"));
  }
  wal->Reset();
  if (absl::Status s = writer_->Exec(options_.synchronous_full ? "PRAGMA synchronous=FULL"
                                                               : "PRAGMA synchronous=NORMAL");
      !s.ok()) {
    return s;
  }
  // Foreign keys stay off while migrating (a table rebuild must not cascade; PRAGMA
  // foreign_keys cannot change inside a transaction) and are checked afterwards.
  const bool migrating = *version < CurrentSchemaVersion();
  if (migrating) {
    if (absl::Status s = writer_->Exec("PRAGMA foreign_keys=OFF"); !s.ok()) return s;
  }
  for (int v = static_cast<int>(*version); v < CurrentSchemaVersion(); ++v) {
    absl::Status s = writer_->Exec("BEGIN IMMEDIATE");
    const bool rebuild = kMigrations[v] == kJobsAutoincrementMigration;
    if (s.ok() && rebuild) s = RebuildJobsWithAutoincrement(*writer_);
    if (s.ok()) s = writer_->Exec(kMigrations[v]);
    if (s.ok() && rebuild) s = BackfillCheckpointDirs(*writer_);
    if (s.ok()) s = writer_->Exec(absl::StrCat("PRAGMA user_version=", v + 1, ";COMMIT;"));
    if (!s.ok()) {
      (void)writer_->Exec("ROLLBACK");
      return absl::Status(s.code(), absl::StrCat("database ", options_.path, ": migration to schema ",
                                                 v + 1, " failed: ", s.message()));
    }
    spdlog::info("database {}: migrated schema to version {}", options_.path, v + 1);
  }
  if (migrating) {
    absl::StatusOr<sqlite::Statement> check = writer_->Prepare("PRAGMA foreign_key_check");
    if (!check.ok()) return check.status();
    absl::StatusOr<bool> violation = check->Step();
    if (!violation.ok()) return violation.status();
    if (*violation) {
      return absl::DataLossError(absl::StrCat("database ", options_.path, ": table ",
                                              check->ColumnText(0), " has rows without their ",
                                              check->ColumnText(2), " row after migrating"));
    }
    if (absl::Status s = writer_->Exec("PRAGMA foreign_keys=ON"); !s.ok()) return s;
  }
  if (options_.max_page_count > 0) {
    if (absl::Status s =
            writer_->Exec(absl::StrCat("PRAGMA max_page_count=", options_.max_page_count));
        !s.ok()) {
      return s;
    }
  }
  // Checkpoints happen on their own thread and connection, not inside commits.
  if (absl::Status s = writer_->Exec("PRAGMA wal_autocheckpoint=0"); !s.ok()) return s;
  if (options_.preallocate_wal) PreallocateWal(*writer_, options_.path, options_.checkpoint_pages);
  sqlite3_wal_hook(writer_->raw(), &RecordWalPages, nullptr);
  absl::StatusOr<std::unique_ptr<sqlite::Connection>> checkpointer =
      sqlite::Connection::Open(options_.path, /*create=*/false, /*read_only=*/false);
  if (!checkpointer.ok()) return checkpointer.status();
  checkpointer_ = std::move(*checkpointer);
  stmts_ = std::make_unique<WriterStatements>();
  stmts_->clock = options_.clock;
  if (absl::Status s = stmts_->Prepare(writer_.get()); !s.ok()) return s;
  if (absl::Status s = RebuildQueuedJobs(); !s.ok()) return s;

  for (int i = 0; i < std::max(1, options_.read_connections); ++i) {
    absl::StatusOr<std::unique_ptr<sqlite::Connection>> reader =
        sqlite::Connection::Open(options_.path, /*create=*/false, /*read_only=*/false);
    if (!reader.ok()) return reader.status();
    if (absl::Status s = (*reader)->Exec("PRAGMA query_only=1"); !s.ok()) return s;
    readers_.push_back(std::move(*reader));
  }
  return absl::OkStatus();
}

JobStore::~JobStore() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  checkpoint_cv_.notify_all();
  if (writer_thread_.joinable()) writer_thread_.join();
  {
    std::lock_guard<std::mutex> lock(completions_mu_);
    completions_stopping_ = true;
  }
  completions_cv_.notify_all();
  if (completion_thread_.joinable()) completion_thread_.join();
  if (checkpoint_thread_.joinable()) checkpoint_thread_.join();
  checkpointer_.reset();
  stmts_.reset();
  // Merge the WAL back into the database file so the closed file stands alone.
  if (writer_ != nullptr) (void)writer_->Exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

void JobStore::CheckpointLoop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      checkpoint_cv_.wait(lock, [&] { return stopping_ || checkpoint_wanted_; });
      if (stopping_) return;
    }
    // PASSIVE: copies what it can without blocking the writer or readers.
    absl::Status s = checkpointer_->Exec("PRAGMA wal_checkpoint(PASSIVE)");
    if (!s.ok()) spdlog::warn("database {}: checkpoint failed: {}", options_.path, s.ToString());
    std::lock_guard<std::mutex> lock(queue_mu_);
    checkpoint_wanted_ = false;
  }
}

void JobStore::Enqueue(std::unique_ptr<WriteOp> op) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (!stopping_) {
      op->seq = next_seq_++;
      (op->background() ? background_ : queue_).push_back(std::move(op));
      queue_cv_.notify_one();
      return;
    }
  }
  op->Complete(absl::UnavailableError("the job store is shutting down"));
}

void JobStore::WriterLoop() {
  while (true) {
    std::vector<std::unique_ptr<WriteOp>> batch;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !background_.empty(); });
      // Stopping, and everything accepted is committed.
      if (queue_.empty() && background_.empty()) return;
      // A transaction takes the waiting client writes (up to max_batch) and at most
      // max_background background writes, each kind oldest first. A submission arriving
      // behind a flood of background writes (a thousand gangs' task reports) waits for at
      // most one transaction holding max_background of them, never for the whole flood;
      // and a stream of submissions cannot starve background writes: when both kinds
      // exceed max_batch, background writes keep a share of every transaction.
      const size_t limit = options_.group_commit ? static_cast<size_t>(options_.max_batch) : 1;
      const size_t background_limit =
          options_.group_commit ? static_cast<size_t>(std::max(1, options_.max_background)) : 1;
      size_t client_n = std::min(queue_.size(), limit);
      // Background writes by weight (a WriteEach counts its functions), so a
      // transaction holds at most max_background background functions; the first
      // write always goes (WriteEach splits itself to fit).
      size_t bulk_n = 0;
      for (size_t weight = 0; bulk_n < background_.size(); ++bulk_n) {
        weight += background_[bulk_n]->weight();
        if (bulk_n > 0 && weight > background_limit) break;
      }
      if (client_n + bulk_n > limit) {
        if (limit == 1) {  // one write per transaction: the older of the two
          const bool bulk_first = background_.front()->seq < queue_.front()->seq;
          client_n = bulk_first ? 0 : 1;
          bulk_n = bulk_first ? 1 : 0;
        } else {  // more of both than fit: background writes keep a share, at most half
          bulk_n = std::min(bulk_n, std::max<size_t>(1, limit / 2));
          client_n = std::min(client_n, limit - bulk_n);
        }
      }
      std::vector<std::unique_ptr<WriteOp>> client, bulk;
      for (size_t i = 0; i < client_n; ++i) {
        client.push_back(std::move(queue_.front()));
        queue_.pop_front();
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
    }
    CommitBatch(batch);
  }
}

absl::Status JobStore::RunInTransaction(std::vector<std::unique_ptr<WriteOp>>& ops) {
  WriterStatements& w = *stmts_;
  auto abort = [&](absl::Status s) {
    if (writer_->InTransaction()) (void)w.rollback.Run();
    return s;
  };
  const absl::Time start = absl::Now();
  // First without savepoints: a SAVEPOINT and a RELEASE per write cost about a tenth of
  // the writer's time, and writes rarely fail. When one does, everything is rolled back
  // and applied again with a savepoint per write, so only the failing write is undone
  // (Apply is re-runnable: the batch retry below relies on that too).
  w.active_txn.clear();
  if (absl::Status s = w.begin.Run(); !s.ok()) return abort(s);
  bool all_ok = true;
  for (auto& op : ops) {
    op->result = op->Apply(w);
    if (!op->result.ok()) {
      all_ok = false;
      break;
    }
  }
  if (!all_ok) {
    if (writer_->InTransaction()) (void)w.rollback.Run();
    w.active_txn.clear();
    if (absl::Status s = w.begin.Run(); !s.ok()) return abort(s);
    for (auto& op : ops) {
      if (absl::Status s = w.savepoint.Run(); !s.ok()) return abort(s);
      op->result = op->Apply(w);
      if (!op->result.ok()) {
        op->events.clear();
        if (!writer_->InTransaction()) return op->result;  // SQLite rolled everything back.
        (void)w.rollback_to.Run();
      }
      if (absl::Status s = w.release.Run(); !s.ok()) return abort(s);
    }
  }
  const absl::Time applied = absl::Now();
  if (absl::Status s = w.commit.Run(); !s.ok()) return abort(s);
  last_apply_time_ = applied - start;
  last_commit_time_ = absl::Now() - applied;
  return absl::OkStatus();
}

void JobStore::CommitBatch(std::vector<std::unique_ptr<WriteOp>>& batch) {
  absl::Status txn = RunInTransaction(batch);
  if (!txn.ok() && batch.size() > 1) {
    // The transaction as a whole failed (disk full at commit, I/O error). Retry each
    // write alone, so each caller learns the fate of its own write. Said in the log (at
    // most every 10 s): if the singles succeed, nothing else would show that every batch
    // now costs a transaction per write.
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      ++batches_retried_alone_;
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
      op = std::move(single[0]);
    }
    batch.clear();
    return;
  }
  int64_t committed = 0;
  for (auto& op : batch) {
    if (!txn.ok()) {
      op->events.clear();
      op->result = txn;
    }
    if (op->result.ok()) ++committed;
  }
  WriterStatements& w = *stmts_;
  if (txn.ok() && std::all_of(batch.begin(), batch.end(),
                              [](const auto& op) { return op->OnlyAddsActiveJobs(); })) {
    for (const auto& [owner, n] : w.active_txn) {
      if (auto it = w.active_committed.find(owner); it != w.active_committed.end()) it->second += n;
    }
  } else {
    w.active_committed.clear();  // a job may have ended, or the transaction did not commit
  }
  w.active_txn.clear();
  if (txn.ok()) {
    std::lock_guard<std::mutex> lock(queue_mu_);
    ++transactions_;
    writes_ += committed;
    apply_time_ += last_apply_time_;
    commit_time_ += last_commit_time_;
    if (WalPages(writer_->raw()) >= options_.checkpoint_pages && !checkpoint_wanted_) {
      checkpoint_wanted_ = true;
      checkpoint_cv_.notify_one();
    }
  }
  if (!txn.ok()) spdlog::warn("database {}: write failed: {}", options_.path, txn.ToString());
  // The view first: whoever reacts to an event below must see the job in it.
  if (txn.ok()) UpdateQueuedJobs(batch);
  // Publish first, so anyone told "done" can already see the events through a watch.
  {
    std::lock_guard<std::mutex> lock(listeners_mu_);
    std::vector<const v1::JobEvent*> all;
    for (auto& op : batch) {
      for (const v1::JobEvent& e : op->events) {
        for (auto& [handle, listener] : listeners_) listener(e);
        if (!batch_listeners_.empty()) all.push_back(&e);
      }
    }
    if (!all.empty()) {
      for (auto& [handle, listener] : batch_listeners_) listener(all);
    }
  }
  std::vector<std::unique_ptr<WriteOp>> later;
  for (auto& op : batch) {
    if (op->CompletesOffWriter()) {
      later.push_back(std::move(op));
    } else {
      op->Complete(op->result);
    }
  }
  if (later.empty()) return;
  // With nothing else waiting for the writer and nothing waiting on the completion
  // thread, answering here is sooner than a hand-off: waking that thread is a futex and a
  // context switch on the one-shot submission's critical path (tens of microseconds on a
  // VM), while the answers themselves are a few. Under load, writes are queued and the
  // hand-off keeps the writer on commits.
  bool inline_answers = later.size() <= kInlineCompletions;
  if (inline_answers) {
    std::lock_guard<std::mutex> lock(queue_mu_);
    inline_answers = queue_.empty() && background_.empty();
  }
  if (inline_answers) {
    std::lock_guard<std::mutex> lock(completions_mu_);
    inline_answers = completions_.empty();
  }
  if (inline_answers) {
    answered_on_writer_.fetch_add(1, std::memory_order_relaxed);
    for (auto& op : later) op->Complete(op->result);
    return;
  }
  std::lock_guard<std::mutex> lock(completions_mu_);
  completions_.push_back(std::move(later));
  completions_cv_.notify_one();
}

void JobStore::CompletionLoop() {
  while (true) {
    std::vector<std::unique_ptr<WriteOp>> ops;
    {
      std::unique_lock<std::mutex> lock(completions_mu_);
      completions_cv_.wait(lock, [&] { return completions_stopping_ || !completions_.empty(); });
      if (completions_.empty()) return;  // stopping, and every callback has run
      ops = std::move(completions_.front());
      completions_.pop_front();
    }
    for (auto& op : ops) op->Complete(op->result);
  }
}

absl::Status JobStore::RebuildQueuedJobs() {
  absl::StatusOr<sqlite::Statement> s =
      writer_->Prepare(absl::StrCat("SELECT ", SchedulableJobColumns(), " FROM jobs WHERE state = ",
                                    static_cast<int>(v1::QUEUED), " ORDER BY id"));
  if (!s.ok()) return s.status();
  std::map<int64_t, QueuedJobsSnapshot::Entry> jobs;
  while (true) {
    absl::StatusOr<bool> row = s->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::StatusOr<SchedulableJob> job = SchedulableJobFromRow(*s);
    if (!job.ok()) return job.status();
    const int64_t id = s->ColumnInt(0);
    jobs[id] = std::make_shared<const SchedulableJob>(std::move(*job));
  }
  queued_.Replace(std::move(jobs));
  queued_stale_.store(false);
  return absl::OkStatus();
}

absl::Status JobStore::ReloadQueuedJob(int64_t job_id) {
  sqlite::Statement& st = stmts_->select_schedulable;
  st.Bind(1, job_id);
  absl::StatusOr<bool> row = st.Step();
  absl::Status status = row.status();
  if (row.ok() && *row && static_cast<v1::JobState>(st.ColumnInt(2)) == v1::QUEUED) {
    absl::StatusOr<SchedulableJob> job = SchedulableJobFromRow(st);
    if (job.ok()) {
      queued_.Put(job_id, std::move(*job));
    } else {
      status = job.status();
    }
  } else if (row.ok()) {
    queued_.Erase(job_id);  // gone from QUEUED, or deleted
  }
  st.Reset();
  return status;
}

void JobStore::UpdateQueuedJobs(std::vector<std::unique_ptr<WriteOp>>& batch) {
  // Jobs a write created go in as built; any other job an event moved into or out of
  // QUEUED is re-read from its committed row, once, after all the batch's writes.
  std::set<int64_t> reload;
  for (auto& op : batch) {
    if (!op->result.ok()) continue;  // rolled back to its savepoint
    std::set<int64_t> created;
    op->PutCreatedJobs([&](v1::Job&& job) {
      int64_t id = 0;
      (void)absl::SimpleAtoi(job.id(), &id);
      SchedulableJob j;
      j.queued_since = absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(job.create_time()));
      j.job = std::move(job);
      j.eligible = absl::FromUnixMicros(0);
      j.last_preempted = absl::InfinitePast();
      j.first_start = absl::InfinitePast();
      created.insert(id);
      return queued_.Put(id, std::move(j));
    });
    for (const v1::JobEvent& e : op->events) {
      if (e.from_state() != v1::QUEUED && e.to_state() != v1::QUEUED) continue;
      int64_t id = 0;
      if (!absl::SimpleAtoi(e.job_id(), &id)) continue;
      if (created.count(id) && e.type() == "submitted") continue;
      reload.insert(id);
    }
  }
  if (queued_stale_.load()) {
    if (absl::Status s = RebuildQueuedJobs(); !s.ok()) {
      spdlog::error("database {}: cannot rebuild the queued-jobs view: {}", options_.path,
                    s.ToString());
    }
    return;
  }
  for (int64_t id : reload) {
    if (absl::Status s = ReloadQueuedJob(id); !s.ok()) {
      spdlog::error("database {}: cannot refresh job {} in the queued-jobs view: {}; rebuilding it",
                    options_.path, id, s.ToString());
      queued_stale_.store(true);
      if (absl::Status r = RebuildQueuedJobs(); !r.ok()) {
        spdlog::error("database {}: cannot rebuild the queued-jobs view: {}", options_.path,
                      r.ToString());
      }
      return;
    }
  }
}

absl::StatusOr<QueuedJobsSnapshot> JobStore::SnapshotQueuedJobs() const {
  if (queued_stale_.load()) {
    return absl::UnavailableError(
        "the queued-jobs view is being rebuilt after a read error (see the log)");
  }
  return queued_.Snapshot();
}

absl::StatusOr<QueuedJobsChanges> JobStore::QueuedJobChangesSince(uint64_t version) const {
  if (queued_stale_.load()) {
    return absl::UnavailableError(
        "the queued-jobs view is being rebuilt after a read error (see the log)");
  }
  return queued_.ChangesSince(version);
}

size_t JobStore::queued_jobs_size() const { return queued_.size(); }

void JobStore::SubmitJobs(std::vector<SubmitJobInput> jobs, SubmitCallback done) {
  Enqueue(std::make_unique<SubmitOp>(std::move(jobs), std::move(done)));
}

void JobStore::CancelJob(int64_t job_id, std::string actor, std::string reason,
                         CancelCallback done) {
  std::string why = reason.empty() ? absl::StrCat("cancelled by ", actor)
                                   : absl::StrCat("cancelled by ", actor, ": ", reason);
  Enqueue(std::make_unique<TransitionOp>(job_id, std::vector<v1::JobState>{}, v1::CANCELLED,
                                         "cancelled", std::move(why), /*cancel=*/true,
                                         std::move(done)));
}

void JobStore::TransitionJob(int64_t job_id, std::vector<v1::JobState> from, v1::JobState to,
                             std::string type, std::string reason, JobCallback done) {
  Enqueue(std::make_unique<TransitionOp>(
      job_id, std::move(from), to, std::move(type), std::move(reason), /*cancel=*/false,
      [done = std::move(done)](absl::StatusOr<CancelJobResult> r) {
        if (r.ok()) {
          done(std::move(r->job));
        } else {
          done(r.status());
        }
      }));
}

void JobStore::Write(TxnFunction fn, std::function<void(absl::Status)> done) {
  Enqueue(std::make_unique<FunctionOp>(std::move(fn), std::move(done)));
}

void JobStore::WriteEach(std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> writes) {
  // At most max_background functions per transaction, so that a submission never waits
  // behind one transaction of a thousand attempt starts (each takes ~60 us to apply).
  const size_t chunk = static_cast<size_t>(std::max(1, options_.max_background));
  for (size_t begin = 0; begin < writes.size(); begin += chunk) {
    const size_t end = std::min(writes.size(), begin + chunk);
    std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> part(
        std::make_move_iterator(writes.begin() + begin), std::make_move_iterator(writes.begin() + end));
    Enqueue(std::make_unique<FunctionsOp>(std::move(part)));
  }
}

absl::Status JobStore::WriteAndWait(TxnFunction fn) {
  std::promise<absl::Status> promise;
  auto future = promise.get_future();
  Write(std::move(fn), [&promise](absl::Status s) { promise.set_value(std::move(s)); });
  return future.get();
}

absl::Status JobStore::Read(const std::function<absl::Status(sqlite::Connection&)>& fn) {
  ReaderLease reader = AcquireReader();
  return fn(*reader.get());
}

absl::Status JobStore::SetMaxPageCount(int64_t pages) {
  std::promise<absl::Status> promise;
  auto future = promise.get_future();
  Enqueue(std::make_unique<ExecOp>(
      absl::StrCat("PRAGMA max_page_count=", pages <= 0 ? int64_t{4294967294} : pages),
      [&promise](absl::Status s) { promise.set_value(std::move(s)); }));
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

absl::StatusOr<v1::Job> JobStore::GetJob(int64_t job_id) {
  ReaderLease reader = AcquireReader();
  absl::StatusOr<sqlite::Statement> s =
      reader->Prepare(absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id = ?1"));
  if (!s.ok()) return s.status();
  s->Bind(1, job_id);
  absl::StatusOr<bool> row = s->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  return JobFromRow(*s);
}

absl::StatusOr<ListJobsResult> JobStore::ListJobs(const ListJobsQuery& query) {
  static const auto* kOrderColumns = new std::map<std::string, std::string>{
      {"", "id"},       {"id", "id"},       {"update_time", "update_time_us"},
      {"name", "name"}, {"priority", "priority"}, {"state", "state"},
      {"owner", "owner"}, {"queue", "queue"}};
  auto column = kOrderColumns->find(query.order_by);
  if (column == kOrderColumns->end()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot order by ", query.order_by));
  }
  const bool by_id = column->second == "id";
  std::string where = " WHERE 1";
  int next = 1;
  std::vector<std::pair<int, std::string>> binds_text;
  std::vector<std::pair<int, int64_t>> binds_int;
  if (!query.states.empty()) {
    std::vector<std::string> states;
    for (v1::JobState s : query.states) states.push_back(absl::StrCat(static_cast<int>(s)));
    absl::StrAppend(&where, " AND state IN (", absl::StrJoin(states, ","), ")");
  }
  if (!query.queue.empty()) {
    absl::StrAppend(&where, " AND queue = ?", next);
    binds_text.emplace_back(next++, query.queue);
  }
  if (!query.owner.empty()) {
    absl::StrAppend(&where, " AND owner = ?", next);
    binds_text.emplace_back(next++, query.owner);
  }
  if (!query.name_contains.empty()) {
    absl::StrAppend(&where, " AND instr(lower(name), lower(?", next, ")) > 0");
    binds_text.emplace_back(next++, query.name_contains);
  }
  for (const auto& [key, value] : query.labels) {
    absl::StrAppend(&where, " AND id IN (SELECT job_id FROM job_labels WHERE key = ?", next,
                    " AND value = ?", next + 1, ")");
    binds_text.emplace_back(next++, key);
    binds_text.emplace_back(next++, value);
  }
  const int filter_params = next;
  std::string page_where = where;
  if (by_id && query.before_id > 0) {
    absl::StrAppend(&page_where, query.descending ? " AND id < ?" : " AND id > ?", next);
    binds_int.emplace_back(next++, query.before_id);
  }
  const int page_size = std::clamp(query.page_size, 1, 10000);
  const char* dir = query.descending ? "DESC" : "ASC";
  std::string sql;
  if (by_id) {
    // The rowid order: a range scan of page_size + 1 rows wherever the page is.
    sql = absl::StrCat("SELECT ", kJobColumns, " FROM jobs", page_where, " ORDER BY id ", dir,
                       " LIMIT ", page_size + 1);
  } else {
    // Columns without an index: every matching row is sorted. Sort only (key, id), then
    // read the page's rows by id, so the sorter never holds the specs of the rows an
    // OFFSET skips (page 100 of 10,000 jobs sorted 10,000 whole rows).
    const std::string order = absl::StrCat(" ORDER BY ", column->second, " ", dir, ", id DESC");
    sql = absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id IN (SELECT id FROM jobs",
                       page_where, order, " LIMIT ", page_size + 1,
                       query.offset > 0 ? absl::StrCat(" OFFSET ", query.offset) : "", ")",
                       order);
  }

  ReaderLease reader = AcquireReader();
  ListJobsResult result;
  if (query.count_total) {
    absl::StatusOr<sqlite::Statement> c =
        reader->Prepare(absl::StrCat("SELECT count(*) FROM jobs", where));
    if (!c.ok()) return c.status();
    for (const auto& [i, v] : binds_text) {
      if (i < filter_params) c->Bind(i, v);
    }
    absl::StatusOr<bool> row = c->Step();
    if (!row.ok()) return row.status();
    result.total = *row ? c->ColumnInt(0) : 0;
  }
  absl::StatusOr<sqlite::Statement> s = reader->Prepare(sql);
  if (!s.ok()) return s.status();
  for (const auto& [i, v] : binds_text) s->Bind(i, v);
  for (const auto& [i, v] : binds_int) s->Bind(i, v);
  while (true) {
    absl::StatusOr<bool> row = s->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    if (static_cast<int>(result.jobs.size()) == page_size) {
      result.more = true;
      (void)absl::SimpleAtoi(result.jobs.back().id(), &result.next_before_id);
      break;
    }
    absl::StatusOr<v1::Job> job = JobFromRow(*s);
    if (!job.ok()) return job.status();
    result.jobs.push_back(std::move(*job));
  }
  return result;
}

absl::StatusOr<std::vector<v1::JobEvent>> JobStore::GetEvents(int64_t job_id, int64_t after_seq,
                                                              int limit) {
  ReaderLease reader = AcquireReader();
  absl::StatusOr<sqlite::Statement> s = reader->Prepare(
      "SELECT job_id, seq, time_us, type, from_state, to_state, reason FROM job_events "
      "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3");
  if (!s.ok()) return s.status();
  s->Bind(1, job_id).Bind(2, after_seq).Bind(3, static_cast<int64_t>(limit));
  std::vector<v1::JobEvent> events;
  while (true) {
    absl::StatusOr<bool> row = s->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    events.push_back(EventFromRow(*s));
  }
  return events;
}

absl::StatusOr<JobCounts> JobStore::CountJobs() {
  ReaderLease reader = AcquireReader();
  absl::StatusOr<sqlite::Statement> s =
      reader->Prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state");
  if (!s.ok()) return s.status();
  JobCounts counts;
  while (true) {
    absl::StatusOr<bool> row = s->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    counts.by_state[static_cast<v1::JobState>(s->ColumnInt(0))] = s->ColumnInt(1);
  }
  return counts;
}

absl::StatusOr<std::map<std::string, JobCounts>> JobStore::CountJobsByQueue() {
  ReaderLease reader = AcquireReader();
  absl::StatusOr<sqlite::Statement> s =
      reader->Prepare("SELECT queue, state, COUNT(*) FROM jobs GROUP BY queue, state");
  if (!s.ok()) return s.status();
  std::map<std::string, JobCounts> counts;
  while (true) {
    absl::StatusOr<bool> row = s->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    counts[s->ColumnText(0)].by_state[static_cast<v1::JobState>(s->ColumnInt(1))] = s->ColumnInt(2);
  }
  return counts;
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

int64_t JobStore::transactions_committed() const {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return transactions_;
}

JobStore::WriterStats JobStore::writer_stats() const {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return WriterStats{transactions_,
                     writes_,
                     apply_time_,
                     commit_time_,
                     answered_on_writer_.load(std::memory_order_relaxed),
                     batches_retried_alone_};
}

int64_t JobStore::writes_committed() const {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return writes_;
}

absl::StatusOr<std::vector<CheckpointDirOwner>> CheckpointDirOwners(JobStore& store,
                                                                     const std::string& path) {
  std::vector<CheckpointDirOwner> out;
  absl::Status s = store.Read([&](sqlite::Connection& conn) -> absl::Status {
    absl::StatusOr<sqlite::Statement> q =
        conn.Prepare("SELECT id, owner FROM jobs WHERE checkpoint_dir = ?1");
    if (!q.ok()) return q.status();
    for (const std::string& d : SelfAndAncestors(path)) {
      q->Reset();
      q->Bind(1, d);
      while (true) {
        absl::StatusOr<bool> row = q->Step();
        if (!row.ok()) return row.status();
        if (!*row) break;
        out.push_back({q->ColumnInt(0), q->ColumnText(1), d});
      }
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace llamafleet
