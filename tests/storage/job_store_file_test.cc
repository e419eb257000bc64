// JobStore's database file: the schema version and its migrations, files that are not
// databases, a full disk, a SIGKILL under load, and the files' modes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "storage/cluster_store.h"
#include "storage/dir_claims.h"
#include "storage/job_store.h"
#include "storage/schema.h"
#include "storage/sqlite.h"
#include "tests/storage/job_store_fixture.h"

namespace llamafleet {
namespace {

TEST_F(JobStoreTest, FreshDatabaseHasCurrentSchemaAndNewerIsRefused) {
  { auto store = Open(); }
  {
    auto conn = sqlite::Connection::Open(Options().path, false, false);
    ASSERT_TRUE(conn.ok());
    EXPECT_EQ(*(*conn)->QueryInt("PRAGMA user_version"), CurrentSchemaVersion());
    EXPECT_EQ(*(*conn)->QueryInt("PRAGMA foreign_keys"), 1);
    ASSERT_TRUE((*conn)->Exec(absl::StrCat("PRAGMA user_version=", CurrentSchemaVersion() + 1)).ok());
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(Options());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("newer than this llamafleet build supports"),
            std::string::npos)
      << store.status();
}

TEST_F(JobStoreTest, MigratesFromEmptyVersionZeroFile) {
  {
    auto conn = sqlite::Connection::Open(Options().path, true, false);
    ASSERT_TRUE(conn.ok());
    EXPECT_EQ(*(*conn)->QueryInt("PRAGMA user_version"), 0);
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_GT(SubmitOne(store.get(), Input("a")), 0);
}

TEST_F(JobStoreTest, UnopenableOrForeignFilesGiveClearErrors) {
  JobStoreOptions o = Options();
  o.path = dir_.path() + "/missing-dir/coordinator.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(o.path), std::string::npos) << store.status();

  o.path = dir_.path() + "/not-a-db";
  std::ofstream(o.path) << std::string(8192, 'x');
  store = JobStore::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("not a database"), std::string::npos) << store.status();
  EXPECT_NE(store.status().message().find(o.path), std::string::npos) << store.status();
}

TEST_F(JobStoreTest, FullDatabaseRejectsWritesWithoutCorruptionAndRecovers) {
  auto store = Open();
  std::vector<int64_t> acked;
  for (int i = 0; i < 10; ++i) acked.push_back(SubmitOne(store.get(), Input(absl::StrCat("j", i))));
  absl::StatusOr<int64_t> pages = [&] {
    auto conn = sqlite::Connection::Open(Options().path, false, false);
    return (*conn)->QueryInt("PRAGMA page_count");
  }();
  ASSERT_TRUE(pages.ok());
  ASSERT_TRUE(store->SetMaxPageCount(*pages).ok());

  // A batch large enough to need new pages fails whole: all or nothing.
  std::vector<SubmitJobInput> big;
  for (int i = 0; i < 200; ++i) big.push_back(Input(absl::StrCat("big", i)));
  absl::StatusOr<std::vector<SubmitJobResult>> r = store->SubmitJobsAndWait(big);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  absl::StatusOr<ListJobsResult> list = store->ListJobs({});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs.size(), acked.size());

  // Reads go on; space comes back; writes succeed again, same store.
  for (int64_t id : acked) EXPECT_TRUE(store->GetJob(id).ok());
  ASSERT_TRUE(store->SetMaxPageCount(0).ok());
  r = store->SubmitJobsAndWait(big);
  ASSERT_TRUE(r.ok()) << r.status();
  store.reset();
  auto conn = sqlite::Connection::Open(Options().path, false, false);
  absl::StatusOr<sqlite::Statement> check = (*conn)->Prepare("PRAGMA integrity_check");
  ASSERT_TRUE(check.ok());
  ASSERT_TRUE(*check->Step());
  EXPECT_EQ(check->ColumnText(0), "ok");
}

// A child process submits as fast as it can and reports every acknowledged job id on a
// pipe; the parent kills it with SIGKILL mid-load and checks that every acknowledged job
// is in the database.
TEST_F(JobStoreTest, SigkillMidLoadLosesNoAcknowledgedJob) {
  int ack_pipe[2];
  ASSERT_EQ(pipe(ack_pipe), 0);
  const std::string path = Options().path;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ack_pipe[0]);
    JobStoreOptions o;
    o.path = path;
    std::unique_ptr<JobStore> store = OpenOrExit(o);
    std::mutex write_mu;
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0;; ++i) {
          auto r = store->SubmitJobsAndWait(
              {Input(absl::StrCat("c", t, "-", i), "alice", absl::StrCat("key-", t, "-", i))});
          if (!r.ok()) _exit(4);
          std::string line = absl::StrCat((*r)[0].job.id(), " key-", t, "-", i, "\n");
          std::lock_guard<std::mutex> lock(write_mu);
          if (write(ack_pipe[1], line.data(), line.size()) < 0) _exit(5);
        }
      });
    }
    for (auto& t : threads) t.join();
    _exit(0);
  }
  close(ack_pipe[1]);
  FILE* acks = fdopen(ack_pipe[0], "r");
  std::vector<std::pair<int64_t, std::string>> acknowledged;
  char line[256];
  while (acknowledged.size() < 1500 && fgets(line, sizeof(line), acks) != nullptr) {
    char key[128];
    long long id;
    if (sscanf(line, "%lld %127s", &id, key) == 2) acknowledged.emplace_back(id, key);
  }
  kill(child, SIGKILL);
  // Acks written before the kill but not yet read count too.
  while (fgets(line, sizeof(line), acks) != nullptr) {
    char key[128];
    long long id;
    if (sscanf(line, "%lld %127s", &id, key) == 2) acknowledged.emplace_back(id, key);
  }
  fclose(acks);
  int status;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited on its own with " << WEXITSTATUS(status);
  ASSERT_GE(acknowledged.size(), 1500u);

  auto store = Open();
  for (const auto& [id, key] : acknowledged) {
    absl::StatusOr<v1::Job> job = store->GetJob(id);
    ASSERT_TRUE(job.ok()) << "acknowledged job " << id << " lost: " << job.status();
    EXPECT_EQ(job->idempotency_key(), key);
  }
}

TEST_F(JobStoreTest, DatabaseFilesAreModeSixHundred) {
  auto store = Open();
  SubmitOne(store.get(), Input("a"));
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st;
    ASSERT_EQ(stat((Options().path + suffix).c_str(), &st), 0) << suffix;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << suffix;
  }
}

// A database of schema 3 (ids reusable: no AUTOINCREMENT) migrates: every job keeps its
// row, labels and events (the rebuild cascades nothing), its checkpoint.dir is recorded,
// and the next id follows the largest.
TEST_F(JobStoreTest, MigrationFromSchemaThreeKeepsEveryRowAndStopsIdReuse) {
  const std::string path = Options().path;
  {
    auto store = Open();
    v1::JobSpec spec =
        SpecBuilder("with-dir").Queue("default").Label("team", "nlp").CheckpointDir("/fsx/ck").WithDefaults();
    SubmitOne(store.get(), SubmitJobInput{spec, "alice", ""});
    SubmitOne(store.get(), Input("two"));
  }
  // Turn it back into schema 3: jobs without AUTOINCREMENT and without checkpoint_dir.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    char* error = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (error ? error : "");
    sqlite3_free(error);
  };
  std::string create, indexes;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT type, sql FROM sqlite_master WHERE tbl_name = 'jobs' AND sql IS NOT NULL",
                     -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    const std::string type = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    const std::string sql = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
    if (type == "table") create = sql;
    if (type == "index" && sql.find("checkpoint_dir") == std::string::npos &&
        sql.find("export_dir") == std::string::npos && sql.find("jobs_by_owner_state") == std::string::npos) {
      indexes += sql + ";";
    }
  }
  sqlite3_finalize(st);
  ASSERT_NE(create.find(" AUTOINCREMENT"), std::string::npos);
  create.erase(create.find(" AUTOINCREMENT"), std::string(" AUTOINCREMENT").size());
  create.replace(0, create.find('('), "CREATE TABLE jobs_v3 ");  // the name may be quoted
  exec("PRAGMA foreign_keys=OFF");
  // Schema 3 had neither the checkpoint_dir column nor the later worker_credentials table
  // nor the attempts' nodes and resize_reason columns (schema 6) nor their phases (schema 7)
  // nor the jobs' export_dir (schema 8) nor evaluations and usage (schema 10) nor users'
  // dynamic uids (schema 11) nor deleted jobs' dirs (schema 12) nor specs as submitted (13).
  exec("BEGIN; DROP TABLE user_identities; DROP INDEX jobs_by_checkpoint_dir; DROP INDEX jobs_by_owner_state; DROP INDEX jobs_by_export_dir;"
       "ALTER TABLE jobs DROP COLUMN export_dir;"
       "DROP TABLE job_evals; DROP TABLE usage_totals; ALTER TABLE checkpoints DROP COLUMN eval_loss;"
       "ALTER TABLE attempts DROP COLUMN gpu_seconds; ALTER TABLE attempts DROP COLUMN cost;"
       "ALTER TABLE jobs DROP COLUMN checkpoint_dir; DROP TABLE worker_credentials;"
       "ALTER TABLE attempts DROP COLUMN nodes; ALTER TABLE attempts DROP COLUMN resize_reason;"
       "DROP TABLE attempt_phases; DROP TABLE deleted_job_dirs;"
       "ALTER TABLE jobs DROP COLUMN submitted_spec; ALTER TABLE jobs DROP COLUMN derived_from;");
  // The columns are gone from `create` too: drop them from the text.
  for (const std::string kColumn : {"derived_from INTEGER", "submitted_spec BLOB", "export_dir TEXT", "checkpoint_dir TEXT"}) {
    const size_t column = create.find(kColumn);
    ASSERT_NE(column, std::string::npos) << create;
    const size_t comma = create.rfind(',', column);
    create.erase(comma, column + kColumn.size() - comma);
  }
  exec(create + "; INSERT INTO jobs_v3 SELECT * FROM jobs; DROP TABLE jobs;"
                "ALTER TABLE jobs_v3 RENAME TO jobs;" + indexes +
       "DELETE FROM sqlite_sequence WHERE name = 'jobs'; PRAGMA user_version = 3; COMMIT;");
  // Job 2 deleted under schema 3; the migration cannot know of it. Job 1 is the largest.
  exec("PRAGMA foreign_keys=ON; DELETE FROM jobs WHERE id = 2;");
  sqlite3_close(db);

  auto store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<v1::Job> job = store->GetJob(1);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().labels().at("team"), "nlp");
  absl::StatusOr<std::vector<v1::JobEvent>> events = store->GetEvents(1, 0, 10);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u) << "events survived the rebuild";
  absl::StatusOr<std::vector<DirClaim>> owners = CheckpointClaimsOver(*store, "/fsx/ck/step-1");
  ASSERT_TRUE(owners.ok());
  ASSERT_EQ(owners->size(), 1u);
  EXPECT_EQ(owners->at(0).job_id, 1);
  const int64_t next = SubmitOne(store.get(), Input("three"));
  EXPECT_EQ(next, 2) << "the first id after the largest at migration";
  ASSERT_TRUE(store->WriteAndWait(DeleteJobTxn(next)).ok());
  EXPECT_EQ(SubmitOne(store.get(), Input("four")), next + 1);
}

}  // namespace
}  // namespace llamafleet
