// Worker credentials per join token and deleted jobs' dirs (schema 12): the names one token
// may mint are capped and forgetting one frees its place; names minted before the token was
// recorded count against every token; a deleted job's named checkpoint dir where it wrote is
// recorded with its owner; and a schema-10 database migrates keeping its credentials.
#include "storage/worker_credential_store.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "storage/cluster_store.h"
#include "storage/dir_claims.h"
#include "storage/job_reads.h"
#include "storage/schema.h"
#include "storage/sqlite.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

class WorkerCredentialStoreTest : public testing::StoreTest {
 protected:
  std::unique_ptr<JobStore> Open() {
    JobStoreOptions o = Options();
    o.synchronous_full = false;
    return StoreTest::Open(o);
  }

  // A finished job of `owner` with checkpoint.dir `dir` ("" = none) where it recorded a
  // checkpoint; its id.
  int64_t FinishedJob(JobStore* store, const std::string& owner, const std::string& dir) {
    const int64_t id = SubmitSpec(store, Spec().CheckpointDir(dir).Build(), owner);
    v1::CheckpointReport report;
    report.set_step(4);
    report.set_path(dir + "/step-4");
    EXPECT_TRUE(store->WriteAndWait(RecordCheckpointTxn(id, 1, report)).ok());
    EXPECT_TRUE(store->CancelJobAndWait(id, owner, "test").ok());
    return id;
  }

  // The job the suite submits: no tokenizer, data under /data.
  static testing::SpecBuilder Spec() { return testing::SpecBuilder("t").Tokenizer("").TrainPath("/data/train.jsonl"); }
};

TEST_F(WorkerCredentialStoreTest, OneJoinTokenMintsAtMostItsCapAndForgettingANameFreesItsPlace) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(InsertWorkerCredential(store.get(), "a", "sha-a", "token-1", 2).ok());
  ASSERT_TRUE(InsertWorkerCredential(store.get(), "b", "sha-b", "token-1", 2).ok());
  absl::Status s = InsertWorkerCredential(store.get(), "c", "sha-c", "token-1", 2);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(s.message(), "the join token has minted 2 worker names");
  EXPECT_FALSE(LookupWorkerCredential(store.get(), "c")->has_value()) << "nothing recorded";
  // Another token has places of its own; a taken name stays taken.
  EXPECT_TRUE(InsertWorkerCredential(store.get(), "c", "sha-c", "token-2", 2).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(InsertWorkerCredential(store.get(), "a", "x", "token-2", 2)));
  EXPECT_EQ(*CountWorkerCredentials(store.get(), "token-1"), 2);
  ASSERT_TRUE(ForgetWorkerCredential(store.get(), "a").ok());
  EXPECT_TRUE(InsertWorkerCredential(store.get(), "d", "sha-d", "token-1", 2).ok());
  EXPECT_TRUE(InsertWorkerCredential(store.get(), "e", "sha-e", "token-1", 0).ok()) << "0: no cap";
}

TEST_F(WorkerCredentialStoreTest, ADeletedJobsNamedCheckpointDirIsRecordedWithItsOwner) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  const int64_t named = FinishedJob(store.get(), "alice", "/fsx/alice/ck");
  const int64_t unnamed = FinishedJob(store.get(), "alice", "");
  ASSERT_TRUE(store->WriteAndWait(DeleteFinishedJobTxn(named)).ok());
  ASSERT_TRUE(store->WriteAndWait(DeleteJobTxn(unnamed)).ok());
  absl::StatusOr<std::vector<DirClaim>> owners =
      CheckpointClaimsOver(*store, "/fsx/alice/ck/step-4");
  ASSERT_TRUE(owners.ok()) << owners.status();
  ASSERT_EQ(owners->size(), 1u);
  EXPECT_EQ((*owners)[0].job_id, named);
  EXPECT_EQ((*owners)[0].owner, "alice");
  EXPECT_EQ((*owners)[0].dir, "/fsx/alice/ck");
  EXPECT_TRUE((*owners)[0].deleted);
  // Refused to another user at submission; its owner may take it again.
  const v1::JobSpec spec = Spec().CheckpointDir("/fsx/alice/ck/x").WithDefaults();
  absl::StatusOr<std::vector<SubmitJobResult>> bob =
      store->SubmitJobsAndWait({SubmitJobInput{spec, "bob", ""}});
  EXPECT_TRUE(absl::IsFailedPrecondition(bob.status())) << bob.status();
  EXPECT_TRUE(absl::StrContains(bob.status().message(),
                                absl::StrCat("is inside /fsx/alice/ck, the checkpoint "
                                             "directory of deleted job ",
                                             named)))
      << bob.status();
  EXPECT_TRUE(CheckJobDirsFree(*store, {SubmitJobInput{spec, "bob", ""}}).code() ==
              absl::StatusCode::kFailedPrecondition)
      << "a dry run refuses it the same way";
  EXPECT_TRUE(store->SubmitJobsAndWait({SubmitJobInput{spec, "alice", ""}}).ok());
}

// A schema-10 database (credentials without their token): migrated, its names kept, each
// counting against every token's cap.
TEST_F(WorkerCredentialStoreTest,
       MigrationToSchemaElevenKeepsCredentialsAndCountsThemForEveryToken) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(InsertWorkerCredential(store.get(), "old", "sha-old", "", 0).ok());
  store.reset();
  {
    absl::StatusOr<std::unique_ptr<sqlite::Connection>> conn =
        sqlite::Connection::Open(Path(), false, false);
    ASSERT_TRUE(conn.ok()) << conn.status();
    ASSERT_TRUE(
        (*conn)
            ->Exec("DROP TABLE deleted_job_dirs; DROP INDEX worker_credentials_by_join_token;"
                   "ALTER TABLE worker_credentials DROP COLUMN join_token_sha256;"
                   "ALTER TABLE jobs DROP COLUMN submitted_spec; ALTER TABLE jobs DROP COLUMN derived_from; ALTER TABLE job_evals DROP COLUMN eval_set;"
                   "PRAGMA user_version = 11;")
            .ok());
  }
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(**LookupWorkerCredential(store.get(), "old"), "sha-old");
  EXPECT_EQ(*CountWorkerCredentials(store.get(), "any-token"), 1);
  EXPECT_TRUE(
      absl::IsResourceExhausted(InsertWorkerCredential(store.get(), "new", "sha", "any-token", 1)));
  EXPECT_TRUE(InsertWorkerCredential(store.get(), "new", "sha", "any-token", 2).ok());
  const int64_t job = FinishedJob(store.get(), "alice", "/fsx/ck");
  ASSERT_TRUE(store->WriteAndWait(DeleteJobTxn(job)).ok());
  EXPECT_EQ(CheckpointClaimsOver(*store, "/fsx/ck")->size(), 1u);
  EXPECT_GE(CurrentSchemaVersion(), 12);
}

}  // namespace
}  // namespace llamafleet
