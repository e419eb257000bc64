// The WAL-coalescing VFS (storage/coalescing_vfs.h): a commit's frames reach the WAL in
// one write, what a commit wrote is what other connections read, and transactions of any
// size commit (the wrapped VFS writes at most 128 KiB - 1 per call).

#include "storage/coalescing_vfs.h"

#include <sqlite3.h>

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "clients/jobspec/jobspec.h"
#include "storage/job_store.h"
#include "storage/sqlite.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::TempDir;

std::unique_ptr<sqlite::Connection> OpenWithVfs(const std::string& path, const char* vfs) {
  absl::StatusOr<std::unique_ptr<sqlite::Connection>> c =
      sqlite::Connection::Open(path, /*create=*/true, /*read_only=*/false, vfs);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

class CoalescingVfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    vfs_ = sqlite::CoalescingVfsName();
    ASSERT_NE(vfs_, nullptr);
    path_ = dir_.path() + "/t.db";
    writer_ = OpenWithVfs(path_, vfs_);
    ASSERT_NE(writer_, nullptr);
    ASSERT_TRUE(writer_->Exec("PRAGMA journal_mode=WAL").ok());
    ASSERT_TRUE(writer_->Exec("PRAGMA synchronous=FULL").ok());
    ASSERT_TRUE(writer_->Exec("PRAGMA wal_autocheckpoint=0").ok());
    ASSERT_TRUE(writer_->Exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)").ok());
    reader_ = OpenWithVfs(path_, nullptr);  // SQLite's own VFS, its own descriptors
    ASSERT_NE(reader_, nullptr);
  }

  // Inserts `rows` rows of `bytes` bytes each in one transaction.
  void InsertRows(int rows, int bytes) {
    ASSERT_TRUE(writer_->Exec("BEGIN IMMEDIATE").ok());
    for (int i = 0; i < rows; ++i) {
      ASSERT_TRUE(writer_->Exec(absl::StrCat("INSERT INTO t (v) VALUES (randomblob(", bytes, "))")).ok());
    }
    ASSERT_TRUE(writer_->Exec("COMMIT").ok());
  }

  TempDir dir_;
  const char* vfs_ = nullptr;
  std::string path_;
  std::unique_ptr<sqlite::Connection> writer_, reader_;
};

TEST_F(CoalescingVfsTest, ACommitsFramesGoOutInOneWriteAndOtherConnectionsReadThem) {
  const sqlite::CoalescingVfsStats before = sqlite::GetCoalescingVfsStats();
  InsertRows(20, 3000);  // ~20 pages: ~40 frame writes
  const sqlite::CoalescingVfsStats after = sqlite::GetCoalescingVfsStats();
  const long long writes = after.wal_writes - before.wal_writes;
  const long long pwrites = after.wal_pwrites - before.wal_pwrites;
  EXPECT_GE(writes, 20);
  EXPECT_GE(pwrites, 1);
  EXPECT_LE(pwrites, 2) << writes << " frame writes went out as " << pwrites << " writes";
  absl::StatusOr<int64_t> n = reader_->QueryInt("SELECT count(*) FROM t");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 20);
}

// One transaction whose frames (~4 MB) are far past what the wrapped VFS writes in one
// call: they go out in pieces and the commit succeeds. (Writing them in one call was
// cut short and failed every large group commit with "database or disk is full".)
TEST_F(CoalescingVfsTest, ATransactionLargerThanOneWriteCommits) {
  InsertRows(1000, 3000);
  absl::StatusOr<int64_t> n = reader_->QueryInt("SELECT count(*) FROM t");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1000);
  absl::StatusOr<int64_t> total = reader_->QueryInt("SELECT sum(length(v)) FROM t");
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, 1000 * 3000);
}

// A page cache too small for the transaction spills pages to the WAL before the commit
// and reads them back: the writer reads what it gathered, and the database stays whole.
TEST_F(CoalescingVfsTest, PagesSpilledMidTransactionReadBackWhole) {
  ASSERT_TRUE(writer_->Exec("PRAGMA cache_size=10").ok());
  ASSERT_TRUE(writer_->Exec("BEGIN IMMEDIATE").ok());
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(writer_->Exec(absl::StrCat("INSERT INTO t (id, v) VALUES (", i, ", zeroblob(2000))")).ok());
  }
  // Rewrite every row: pages spilled earlier in the transaction are read back, changed
  // and written again (over their frames).
  ASSERT_TRUE(writer_->Exec("UPDATE t SET v = randomblob(2000)").ok());
  ASSERT_TRUE(writer_->Exec("COMMIT").ok());
  absl::StatusOr<int64_t> zeros =
      reader_->QueryInt("SELECT count(*) FROM t WHERE v = zeroblob(2000)");
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  EXPECT_EQ(*zeros, 0);
  for (sqlite::Connection* c : {writer_.get(), reader_.get()}) {
    absl::StatusOr<sqlite::Statement> check = c->Prepare("PRAGMA integrity_check");
    ASSERT_TRUE(check.ok()) << check.status();
    absl::StatusOr<bool> row = check->Step();
    ASSERT_TRUE(row.ok() && *row);
    EXPECT_EQ(check->ColumnText(0), "ok");
  }
  absl::StatusOr<int64_t> n = reader_->QueryInt("SELECT count(*) FROM t");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 300);
}

// Checkpoints (another connection) and a WAL restart (the writer, after a complete
// checkpoint) with coalesced frames: every committed row survives, in the database file.
TEST_F(CoalescingVfsTest, CheckpointsAndWalRestartsKeepEveryCommit) {
  for (int round = 0; round < 5; ++round) {
    InsertRows(50, 1000);
    ASSERT_TRUE(reader_->Exec("PRAGMA wal_checkpoint(PASSIVE)").ok());
  }
  ASSERT_TRUE(writer_->Exec("PRAGMA wal_checkpoint(TRUNCATE)").ok());
  InsertRows(10, 1000);  // into the restarted WAL
  writer_.reset();       // the last connection to close checkpoints what is left
  reader_.reset();
  std::unique_ptr<sqlite::Connection> again = OpenWithVfs(path_, nullptr);
  ASSERT_NE(again, nullptr);
  absl::StatusOr<int64_t> n = again->QueryInt("SELECT count(*) FROM t");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 260);
}

// The job store's writer uses it with synchronous=FULL: a batch of 2,000 submissions is
// one transaction of several MB.
TEST(JobStoreCoalescingTest, ALargeBatchOfSubmissionsCommitsAsOneTransaction) {
  TempDir dir;
  JobStoreOptions o;
  o.path = dir.path() + "/jobs.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<SubmitJobInput> jobs;
  for (int i = 0; i < 2000; ++i) {
    v1::JobSpec spec;
    spec.set_name(absl::StrCat("job-", i));
    spec.mutable_model()->set_preset("tiny");
    spec.mutable_model()->set_tokenizer("/t/tokenizer.model");
    spec.mutable_data()->set_train_path("/d/train.jsonl");
    ApplyDefaults(&spec);
    jobs.push_back(SubmitJobInput{std::move(spec), "alice", ""});
  }
  const int64_t transactions = (*store)->writer_stats().transactions;
  const sqlite::CoalescingVfsStats before = sqlite::GetCoalescingVfsStats();
  absl::StatusOr<std::vector<SubmitJobResult>> results = (*store)->SubmitJobsAndWait(std::move(jobs));
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 2000u);
  EXPECT_EQ((*store)->writer_stats().transactions, transactions + 1);
  const sqlite::CoalescingVfsStats after = sqlite::GetCoalescingVfsStats();
  EXPECT_GT(after.wal_writes - before.wal_writes, 10 * (after.wal_pwrites - before.wal_pwrites));
  absl::StatusOr<v1::Job> last = (*store)->GetJob(std::stoll(results->back().job.id()));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->spec().name(), "job-1999");
}

}  // namespace
}  // namespace llamafleet
