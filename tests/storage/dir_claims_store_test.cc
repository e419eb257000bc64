// Claims on directories in the store (storage/dir_claims.h): a claim stands while its job
// has not ended and afterwards only if the job wrote there; a deleted job's is kept only
// then; claims the coordinator found pending do not refuse a submission; an admin's
// release removes the record with an event. And a database error carries no SQL text.
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "storage/cluster_store.h"
#include "storage/dir_claims.h"
#include "storage/sqlite.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

class DirClaimsStoreTest : public testing::StoreTest {
 protected:
  void SetUp() override {
    store_ = Open();
    ASSERT_NE(store_, nullptr);
  }

  int64_t Submit(const std::string& owner, const std::string& checkpoint_dir,
                 const std::string& export_dir = "") {
    testing::SpecBuilder spec("t");
    spec.Tokenizer("").TrainPath("/data/train.jsonl").CheckpointDir(checkpoint_dir);
    if (!export_dir.empty()) spec.ExportDir(export_dir);
    return SubmitSpec(store_.get(), spec.Build(), owner);
  }

  void RecordCheckpoint(int64_t job, const std::string& dir) {
    v1::CheckpointReport report;
    report.set_step(2);
    report.set_path(dir + "/step-2");
    ASSERT_TRUE(store_->WriteAndWait(RecordCheckpointTxn(job, 1, report)).ok());
  }

  std::vector<DirClaim> Clashing(const std::string& dir, const std::string& owner,
                                 const std::vector<PendingClaim>& pending = {}) {
    std::vector<DirClaim> out;
    EXPECT_TRUE(store_
                    ->Read([&](sqlite::Connection& conn) {
                      Txn txn(conn, 0);
                      absl::StatusOr<std::vector<DirClaim>> found =
                          ClashingClaims(txn, dir, owner, pending, 10);
                      if (found.ok()) out = *std::move(found);
                      return found.status();
                    })
                    .ok());
    return out;
  }

  std::unique_ptr<JobStore> store_;
};

TEST_F(DirClaimsStoreTest, AClaimStandsWhileItsJobRunsAndAfterwardsOnlyWhereItWrote) {
  const int64_t idle = Submit("bob", "/fsx/a", "/fsx/a-out");
  const int64_t wrote = Submit("bob", "/fsx/b");
  ASSERT_EQ(Clashing("/fsx/a/x", "alice").size(), 1u);
  ASSERT_EQ(Clashing("/fsx/a-out", "alice").size(), 1u);
  EXPECT_FALSE(Clashing("/fsx/a", "alice")[0].wrote);
  RecordCheckpoint(wrote, "/fsx/b");
  EXPECT_TRUE(Clashing("/fsx/b", "alice")[0].wrote);
  ASSERT_TRUE(store_->CancelJobAndWait(idle, "bob", "").ok());
  ASSERT_TRUE(store_->CancelJobAndWait(wrote, "bob", "").ok());
  EXPECT_TRUE(Clashing("/fsx", "alice").size() == 1u &&
              Clashing("/fsx", "alice")[0].job_id == wrote)
      << "only the claim of the job that wrote stands";
  EXPECT_TRUE(CheckpointClaimsOver(*store_, "/fsx/a/step-1")->empty());
  // Deleted: only where it wrote is recorded.
  ASSERT_TRUE(store_->WriteAndWait(DeleteFinishedJobTxn(idle)).ok());
  ASSERT_TRUE(store_->WriteAndWait(DeleteFinishedJobTxn(wrote)).ok());
  std::vector<DirClaim> left = Clashing("/fsx", "alice");
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(left[0].deleted);
  EXPECT_EQ(left[0].dir, "/fsx/b");
  EXPECT_TRUE(Clashing("/fsx", "bob").empty()) << "its owner may take it again";
}

TEST_F(DirClaimsStoreTest, APendingClaimRefusesNeitherTheSubmissionNorItsDryRun) {
  const int64_t bobs = Submit("bob", "/fsx/alice/ck");
  testing::SpecBuilder spec("t");
  SubmitJobInput in{spec.Tokenizer("")
                        .TrainPath("/data/train.jsonl")
                        .CheckpointDir("/fsx/alice/ck")
                        .WithDefaults(),
                    "alice", ""};
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckJobDirsFree(*store_, {in})));
  EXPECT_TRUE(absl::IsFailedPrecondition(store_->SubmitJobsAndWait({in}).status()));
  in.pending_claims.push_back(PendingClaim{bobs, "checkpoint.dir"});
  EXPECT_TRUE(CheckJobDirsFree(*store_, {in}).ok());
  EXPECT_TRUE(store_->SubmitJobsAndWait({in}).ok());
}

// A submission retried with its idempotency key returns its job: the claim it made the
// first time does not refuse it.
TEST_F(DirClaimsStoreTest, ARetriedSubmissionIsNotRefusedForItsOwnClaim) {
  testing::SpecBuilder spec("t");
  SubmitJobInput in{
      spec.Tokenizer("").TrainPath("/data/train.jsonl").CheckpointDir("/fsx/ck").WithDefaults(),
      "alice", "key-1"};
  ASSERT_TRUE(store_->SubmitJobsAndWait({in}).ok());
  EXPECT_EQ(*KnownSubmissions(*store_, {in}), std::vector<bool>{true});
  EXPECT_TRUE(CheckJobDirsFree(*store_, {in}).ok());
  in.idempotency_key = "key-2";
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckJobDirsFree(*store_, {in})));
}

TEST_F(DirClaimsStoreTest, AReleaseRemovesEveryClaimOnTheDirectoryWithAnEvent) {
  const int64_t live = Submit("bob", "/fsx/ck");
  const int64_t gone = Submit("carol", "/fsx/ck2");
  RecordCheckpoint(gone, "/fsx/ck2");
  ASSERT_TRUE(store_->CancelJobAndWait(gone, "carol", "").ok());
  ASSERT_TRUE(store_->WriteAndWait(DeleteFinishedJobTxn(gone)).ok());
  for (const auto& [dir, job, deleted] : std::vector<std::tuple<std::string, int64_t, bool>>{
           {"/fsx/ck", live, false}, {"/fsx/ck2", gone, true}}) {
    auto released = std::make_shared<std::vector<DirClaim>>();
    ASSERT_TRUE(store_->WriteAndWait(ReleaseDirClaimsTxn(dir, "root", released)).ok());
    ASSERT_EQ(released->size(), 1u);
    EXPECT_EQ((*released)[0].job_id, job);
    EXPECT_EQ((*released)[0].deleted, deleted);
    EXPECT_TRUE(Clashing(dir, "alice").empty());
    EXPECT_TRUE(absl::IsNotFound(store_->WriteAndWait(ReleaseDirClaimsTxn(dir, "root", released))));
  }
  absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(live, 0, 10);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->back().type(), "dir_released");
  EXPECT_EQ(events->back().reason(),
            "checkpoint.dir /fsx/ck released by root: it keeps no other job out any more");
  EXPECT_EQ(store_->GetJob(live)->state(), v1::QUEUED);
}

TEST_F(DirClaimsStoreTest, ADatabaseErrorCarriesNoSqlText) {
  absl::Status s = store_->Read([](sqlite::Connection& conn) {
    return conn.Prepare("SELECT secret_column FROM no_such_table WHERE x = 'hidden'").status();
  });
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  for (const char* text : {"SELECT", "secret_column", "no_such_table", "hidden"}) {
    EXPECT_FALSE(absl::StrContains(s.message(), text)) << s;
  }
  EXPECT_TRUE(absl::StrContains(s.message(), "logged by the coordinator")) << s;
  s = store_->Read([](sqlite::Connection& conn) { return conn.Exec("DROP TABLE no_such_table"); });
  EXPECT_FALSE(absl::StrContains(s.message(), "no_such_table")) << s;
}

}  // namespace
}  // namespace llamafleet
