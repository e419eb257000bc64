#include "storage/schema.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "llamafleet/v1/job.pb.h"
#include "spdlog/spdlog.h"

namespace llamafleet {
namespace {

// Job ids are never reused (jobs is rebuilt with AUTOINCREMENT first, by
// RebuildJobsWithAutoincrement: a job deleted by ttl_after_finished never lends its id,
// and so its logs, to a later job); each job's own checkpoint directory, so a second
// job cannot take it; active jobs per owner, for the per-user limit.
// Runs between RebuildJobsWithAutoincrement (before) and BackfillJobDirs (after).
const char kJobsAutoincrementMigration[] = R"sql(
ALTER TABLE jobs ADD COLUMN checkpoint_dir TEXT;  -- spec.checkpoint.dir, normalized; NULL = default dir
CREATE INDEX jobs_by_checkpoint_dir ON jobs(checkpoint_dir) WHERE checkpoint_dir IS NOT NULL;
CREATE INDEX jobs_by_owner_state ON jobs(owner, state);
)sql";

// Each job's own export directory, so that a second job cannot take it (nor a checkpoint
// directory inside it). Followed by BackfillJobDirs for output.export_dir.
const char kExportDirMigration[] = R"sql(
ALTER TABLE jobs ADD COLUMN export_dir TEXT;  -- spec.output.export_dir, normalized; NULL = none
CREATE INDEX jobs_by_export_dir ON jobs(export_dir) WHERE export_dir IS NOT NULL;
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
-- /metrics and ListQueues group jobs by queue and state; restarts by failure class:
-- both are index scans, not table scans.
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
    // 6: each attempt's gang size and the elastic resize that started it.
    R"sql(
ALTER TABLE attempts ADD COLUMN nodes INTEGER NOT NULL DEFAULT 0;          -- 0: before schema 6
ALTER TABLE attempts ADD COLUMN resize_reason TEXT NOT NULL DEFAULT '';
)sql",
    // 7: each attempt's start-up phases (llamafleet.v1.AttemptPhase), at most one row per
    // phase name, in the order they were done (time_us, then rowid).
    R"sql(
CREATE TABLE attempt_phases (
  job_id   INTEGER NOT NULL,
  attempt  INTEGER NOT NULL,
  phase    TEXT NOT NULL,                 -- placed, trainers_started, data_ready, ...
  time_us  INTEGER NOT NULL,
  seconds  REAL NOT NULL,
  detail   TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, attempt, phase),
  FOREIGN KEY (job_id, attempt) REFERENCES attempts(job_id, attempt) ON DELETE CASCADE
);
)sql",
    // 8: jobs' own export dirs (above).
    kExportDirMigration,
    // 9: drained workers (storage/worker_drain_store.h): no new placements until undrained.
    R"sql(
CREATE TABLE IF NOT EXISTS worker_drains (
  name      TEXT PRIMARY KEY,          -- the worker's name
  reason    TEXT NOT NULL,
  source    TEXT NOT NULL,             -- operator | preflight
  since_us  INTEGER NOT NULL
);
)sql",
    // 10: every evaluation (llamafleet.v1.EvalPoint) and its checkpoint's eval loss; GPU
    // time and cost per attempt (cost NULL: no price covered its workers) and per user
    // and queue, kept when jobs are deleted.
    R"sql(
CREATE TABLE job_evals (
  job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt    INTEGER NOT NULL,
  step       INTEGER NOT NULL,
  time_us    INTEGER NOT NULL,
  loss       REAL NOT NULL,
  perplexity REAL NOT NULL
);
CREATE INDEX job_evals_by_job ON job_evals(job_id, step);
ALTER TABLE checkpoints ADD COLUMN eval_loss REAL;                -- NULL: no evaluation at the step
ALTER TABLE attempts ADD COLUMN gpu_seconds REAL NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN cost REAL;
CREATE TABLE usage_totals (
  user               TEXT NOT NULL,
  queue              TEXT NOT NULL,
  jobs               INTEGER NOT NULL DEFAULT 0,
  gpu_seconds        REAL NOT NULL DEFAULT 0,
  failed_gpu_seconds REAL NOT NULL DEFAULT 0,
  cost               REAL,
  failed_cost        REAL,
  PRIMARY KEY (user, queue)
) WITHOUT ROWID;
-- Attempts that ended before: their GPU time from their tasks (unpriced), into the totals
-- (jobs deleted before this schema are not known any more).
UPDATE attempts SET gpu_seconds = MAX(0, end_us - start_us) / 1e6 *
  (SELECT COALESCE(SUM(ranks), 0) FROM tasks t WHERE t.job_id = attempts.job_id AND t.attempt = attempts.attempt)
  WHERE state != 0;
INSERT INTO usage_totals (user, queue, jobs, gpu_seconds, failed_gpu_seconds)
  SELECT j.owner, j.queue, SUM(a.attempt = 1), SUM(a.gpu_seconds),
         SUM(CASE WHEN a.state = 2 OR (a.state = 3 AND a.failure_class = 'preempted') THEN a.gpu_seconds ELSE 0 END)
  FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.state != 0 GROUP BY j.owner, j.queue;
)sql",
    // 11: the dynamic Unix uid of each API user without a configured mapping
    // (storage/identity_store.h): one per user, none shared, kept for good.
    R"sql(
CREATE TABLE user_identities (
  user           TEXT PRIMARY KEY,
  uid            INTEGER NOT NULL UNIQUE,
  create_time_us INTEGER NOT NULL
) WITHOUT ROWID;
)sql",
    // 12: each worker identity remembers the join token that minted it (its SHA-256; ''
    // for those minted before), so the identities one token mints are capped
    // (server/cluster/worker_identity.h); and a deleted job's named checkpoint dir stays
    // its owner's (storage/deleted_job_dirs.h).
    R"sql(
ALTER TABLE worker_credentials ADD COLUMN join_token_sha256 TEXT NOT NULL DEFAULT '';
CREATE INDEX worker_credentials_by_join_token ON worker_credentials(join_token_sha256);
CREATE TABLE deleted_job_dirs (
  dir        TEXT PRIMARY KEY,   -- the deleted job's checkpoint.dir, normalized
  job_id     INTEGER NOT NULL,   -- the deleted job's id (not a reference: its row is gone)
  owner      TEXT NOT NULL,
  deleted_us INTEGER NOT NULL
);
)sql",
    // 13: each job's spec as submitted (before defaults), for running it again, and the
    // job a resubmitted one derives from.
    R"sql(
ALTER TABLE jobs ADD COLUMN submitted_spec BLOB;     -- llamafleet.v1.JobSpec as submitted; NULL before schema 13
ALTER TABLE jobs ADD COLUMN derived_from INTEGER;    -- the job it was resubmitted from; NULL = none
)sql",
    // 14: the eval set of each evaluation (data.eval[i].name; '' for data.eval_path's).
    R"sql(
ALTER TABLE job_evals ADD COLUMN eval_set TEXT NOT NULL DEFAULT '';
)sql",
    // 15: the samples of each evaluation (eval.samples; storage/sample_store.h bounds them).
    R"sql(
CREATE TABLE IF NOT EXISTS job_samples (
  job_id  INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step    INTEGER NOT NULL,          -- the optimizer step evaluated after
  idx     INTEGER NOT NULL,          -- the prompt's position in eval.samples' list
  attempt INTEGER NOT NULL,
  time_us INTEGER NOT NULL,
  bytes   INTEGER NOT NULL,          -- prompt + text + reference, for the per-job bound
  sample  BLOB NOT NULL,             -- llamafleet.v1.Sample
  PRIMARY KEY (job_id, step, idx)
) WITHOUT ROWID;
)sql",
};

// SQLite cannot add AUTOINCREMENT to a table: rebuild it (the documented create-copy-drop-
// rename sequence, with foreign keys off so that dropping the old table cascades nothing).
// The new table is the old one's own CREATE statement with AUTOINCREMENT added, so columns
// that other migrations added are kept; the indexes are recreated from their statements.
absl::Status RebuildJobsWithAutoincrement(sqlite::Connection& conn) {
  LF_ASSIGN_OR_RETURN(
      sqlite::Statement table,
      conn.Prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"));
  LF_ASSIGN_OR_RETURN(bool row, table.Step());
  if (!row) return absl::InternalError("no jobs table to rebuild");
  std::string create = table.ColumnText(0);
  table.Reset();  // an open statement would keep the table locked against DROP
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
  LF_ASSIGN_OR_RETURN(sqlite::Statement index,
                      conn.Prepare("SELECT sql FROM sqlite_master WHERE type = 'index' AND "
                                   "tbl_name = 'jobs' AND sql IS NOT NULL"));
  while (true) {
    LF_ASSIGN_OR_RETURN(bool more, index.Step());
    if (!more) break;
    indexes.push_back(index.ColumnText(0));
  }
  index.Reset();
  for (const std::string& sql :
       {create, std::string("INSERT INTO jobs_rebuilt SELECT * FROM jobs"), std::string("DROP TABLE jobs"),
        std::string("ALTER TABLE jobs_rebuilt RENAME TO jobs")}) {
    LF_RETURN_IF_ERROR(conn.Exec(sql));
  }
  for (const std::string& sql : indexes) {
    LF_RETURN_IF_ERROR(conn.Exec(sql));
  }
  return absl::OkStatus();
}

// Fills `column` (checkpoint_dir, export_dir) from the stored specs of jobs submitted
// before it existed; `field` reads the spec's value ("" = none).
absl::Status BackfillJobDirs(sqlite::Connection& conn, const std::string& column,
                             const std::function<const std::string&(const v1::JobSpec&)>& field) {
  LF_ASSIGN_OR_RETURN(sqlite::Statement select, conn.Prepare("SELECT id, spec FROM jobs"));
  LF_ASSIGN_OR_RETURN(
      sqlite::Statement update,
      conn.Prepare(absl::StrCat("UPDATE jobs SET ", column, " = ?2 WHERE id = ?1")));
  std::vector<std::pair<int64_t, std::string>> dirs;  // read all first, then write
  while (true) {
    LF_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    v1::JobSpec spec;
    if (!spec.ParseFromString(select.ColumnText(1)) || field(spec).empty()) continue;
    dirs.emplace_back(select.ColumnInt(0), field(spec));
  }
  select.Reset();
  for (const auto& [id, dir] : dirs) {
    update.Bind(1, id).Bind(2, dir);
    LF_RETURN_IF_ERROR(update.Run());
    update.Reset();
  }
  return absl::OkStatus();
}

}  // namespace

int CurrentSchemaVersion() { return static_cast<int>(std::size(kMigrations)); }

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

absl::StatusOr<int> SchemaVersion(sqlite::Connection& conn, const std::string& path) {
  LF_ASSIGN_OR_RETURN(int64_t version, conn.QueryInt("PRAGMA user_version"));
  if (version > CurrentSchemaVersion()) {
    return absl::FailedPreconditionError(
        absl::StrCat("database ", path, " has schema version ", version,
                     ", newer than this llamafleet build supports (", CurrentSchemaVersion(),
                     "); run a newer llamafleet-coordinator"));
  }
  return static_cast<int>(version);
}

absl::Status MigrateSchema(sqlite::Connection& conn, const std::string& path, int version) {
  if (version >= CurrentSchemaVersion()) return absl::OkStatus();
  // Foreign keys stay off while migrating (a table rebuild must not cascade; PRAGMA
  // foreign_keys cannot change inside a transaction) and are checked afterwards.
  LF_RETURN_IF_ERROR(conn.Exec("PRAGMA foreign_keys=OFF"));
  for (int v = version; v < CurrentSchemaVersion(); ++v) {
    absl::Status s = conn.Exec("BEGIN IMMEDIATE");
    const bool rebuild = kMigrations[v] == kJobsAutoincrementMigration;
    if (s.ok() && rebuild) s = RebuildJobsWithAutoincrement(conn);
    if (s.ok()) s = conn.Exec(kMigrations[v]);
    if (s.ok() && rebuild) {
      s = BackfillJobDirs(conn, "checkpoint_dir", [](const v1::JobSpec& j) -> const std::string& {
        return j.checkpoint().dir();
      });
    }
    if (s.ok() && kMigrations[v] == kExportDirMigration) {
      s = BackfillJobDirs(conn, "export_dir", [](const v1::JobSpec& j) -> const std::string& {
        return j.output().export_dir();
      });
    }
    if (s.ok()) s = conn.Exec(absl::StrCat("PRAGMA user_version=", v + 1, ";COMMIT;"));
    if (!s.ok()) {
      (void)conn.Exec("ROLLBACK");
      return absl::Status(s.code(), absl::StrCat("database ", path, ": migration to schema ",
                                                 v + 1, " failed: ", s.message()));
    }
    spdlog::info("database {}: migrated schema to version {}", path, v + 1);
  }
  LF_ASSIGN_OR_RETURN(sqlite::Statement check, conn.Prepare("PRAGMA foreign_key_check"));
  LF_ASSIGN_OR_RETURN(bool violation, check.Step());
  if (violation) {
    return absl::DataLossError(absl::StrCat("database ", path, ": table ", check.ColumnText(0),
                                            " has rows without their ", check.ColumnText(2),
                                            " row after migrating"));
  }
  check.Reset();
  return conn.Exec("PRAGMA foreign_keys=ON");
}

}  // namespace llamafleet
