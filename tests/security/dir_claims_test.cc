// Claims on directories against a real coordinator (tests/security/security_api.h): a job
// may claim only a new directory or its identity's, a claim ends with a job that never
// wrote there, and only an admin releases one. Directories get alice's and bob's job
// identities (real uids), so these need root. Also: a listing that would build a huge
// SQL statement is refused up front, and no error carries SQL text.
#include "tests/security/security_api.h"

namespace llamafleet {
namespace {

#define SKIP_UNLESS_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: gives directories to job identities"

class DirClaimsTest : public SecurityApiTest {
 protected:
  v1::JobSpec ModelAt(const std::string& path) {
    v1::JobSpec spec = Spec();
    spec.mutable_model()->clear_preset();
    spec.mutable_model()->set_path(path);
    return spec;
  }

  void Cancel(const std::string& who, const std::string& id) {
    v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    v1::CancelJobResponse resp;
    ASSERT_TRUE(stub_->CancelJob(Context(who).get(), cancel, &resp).ok());
  }

  // `llamafleet release-dir PATH` as `who`.
  testing::CommandResult ReleaseDir(const std::string& who, const std::string& path) {
    absl::StatusOr<testing::CommandResult> r =
        RunCommand({BinaryPath("llamafleet"), "--coordinator", address_, "--token", tokens_[who],
                    "release-dir", path});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::CommandResult{};
  }
};

// The report: bob's job that can never run (64 nodes, no workers) names alice's directory,
// or the shared models, as its checkpoint.dir or output.export_dir. Refused, naming the
// field, the path and its owner, to admins too; so alice's jobs read her model and the
// shared one. A directory that does not exist yet may be named, but keeps nobody else out
// until it is made as the job's identity.
TEST_F(DirClaimsTest, ASquatOnAnotherUsersOrASharedDirectoryIsRefusedAndReadsThereStayOpen) {
  SKIP_UNLESS_ROOT();
  const std::string alices = root_ + "/alice", models = root_ + "/shared/models";
  ASSERT_TRUE(MakeOwnedBy(alices, "alice"));
  std::filesystem::create_directories(alices + "/models/llama");
  std::filesystem::create_directories(models + "/llama");  // the administrators' (root's)
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> squats = {
      {"bob", "checkpoint: {dir: " + models + "}\n", "spec.checkpoint.dir " + models, "uid 0"},
      {"bob", "output: {export_dir: " + models + "}\n", "spec.output.export_dir " + models,
       "uid 0"},
      {"bob", "checkpoint: {dir: " + alices + "}\n", "spec.checkpoint.dir " + alices, "uid 2001"},
      {"bob", "output: {export_dir: " + alices + "}\n", "spec.output.export_dir " + alices,
       "uid 2001"},
      {"root", "checkpoint: {dir: " + models + "}\n", "spec.checkpoint.dir " + models, "uid 0"}};
  for (const auto& [who, yaml, named, owner] : squats) {
    for (const bool dry_run : {true, false}) {
      v1::SubmitJobRequest req;
      *req.mutable_spec() = Spec(yaml);
      req.set_dry_run(dry_run);
      v1::SubmitJobResponse resp;
      grpc::Status s = stub_->SubmitJob(Context(who).get(), req, &resp);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
          << who << " " << yaml << dry_run;
      EXPECT_TRUE(absl::StrContains(s.error_message(), named)) << s.error_message();
      EXPECT_TRUE(absl::StrContains(s.error_message(), "belongs to " + owner)) << s.error_message();
    }
  }
  EXPECT_TRUE(Jobs().empty()) << "nothing claims them";
  EXPECT_TRUE(Submit("alice", ModelAt(alices + "/models/llama")).ok());
  EXPECT_TRUE(Submit("alice", ModelAt(models + "/llama")).ok());
  // A new directory in hers: bob may name it (his worker will fail to make it there), and
  // it keeps her out of nothing.
  const std::string fresh = alices + "/run-1";
  EXPECT_TRUE(Submit("bob", Spec("checkpoint: {dir: " + fresh + "}\n")).ok());
  grpc::Status s = Submit("alice", Spec("checkpoint: {dir: " + fresh + "}\n"));
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// A claim ends with its job unless the job wrote there: cancelled before writing, the
// directory is readable by others again; deleted before writing, nothing of the claim is
// kept; a job that recorded a checkpoint keeps its claim after it ended.
TEST_F(DirClaimsTest, AClaimEndsWithItsJobUnlessTheJobWroteThere) {
  SKIP_UNLESS_ROOT();
  const std::string scratch = root_ + "/scratch";  // shared, sticky, as path roots are
  std::filesystem::create_directories(scratch);
  std::filesystem::permissions(scratch,
                               std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  std::string cancelled, deleted, wrote;
  ASSERT_TRUE(Submit("alice", Spec("checkpoint: {dir: " + scratch + "/run}\n"), &cancelled).ok());
  ASSERT_TRUE(MakeOwnedBy(scratch + "/run", "alice"));  // as her worker makes it
  grpc::Status s = Submit("bob", ModelAt(scratch + "/run/step-1"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << "a real claim keeps bob's reads out";
  EXPECT_TRUE(absl::StrContains(s.error_message(), "checkpoint directory of job " + cancelled))
      << s.error_message();
  Cancel("alice", cancelled);
  s = Submit("bob", ModelAt(scratch + "/run/step-1"));
  EXPECT_TRUE(s.ok()) << "cancelled before it wrote: " << s.error_message();

  ASSERT_TRUE(Submit("alice", Spec("checkpoint: {dir: " + scratch + "/run-2}\n"), &deleted).ok());
  Cancel("alice", deleted);
  v1::DeleteJobRequest del;
  del.set_job_id(deleted);
  v1::DeleteJobResponse gone;
  ASSERT_TRUE(stub_->DeleteJob(Context("alice").get(), del, &gone).ok());
  s = Submit("bob", Spec("checkpoint: {dir: " + scratch + "/run-2}\n"));
  EXPECT_TRUE(s.ok()) << "deleted before it wrote: " << s.error_message();

  ASSERT_TRUE(Submit("alice", Spec("checkpoint: {dir: " + scratch + "/run-3}\n"), &wrote).ok());
  ASSERT_TRUE(MakeOwnedBy(scratch + "/run-3", "alice"));
  Cancel("alice", wrote);
  Stop();
  RecordCheckpoint(wrote, scratch + "/run-3/step-4");
  Start();
  s = Submit("bob", ModelAt(scratch + "/run-3/step-4"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << "it wrote there";
}

// Only an admin releases a claim (`llamafleet release-dir`), and the release is an event
// of the job naming the admin; afterwards the directory keeps nobody out.
TEST_F(DirClaimsTest, OnlyAnAdminReleasesAClaimAndTheJobRecordsIt) {
  SKIP_UNLESS_ROOT();
  const std::string dir = root_ + "/scratch/bob-ck";
  std::string id;
  ASSERT_TRUE(Submit("bob", Spec("checkpoint: {dir: " + dir + "}\n"), &id).ok());
  ASSERT_TRUE(MakeOwnedBy(dir, "bob"));  // as his worker makes it
  EXPECT_EQ(Submit("alice", ModelAt(dir + "/step-1")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  testing::CommandResult r = ReleaseDir("alice", dir);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "alice (role user) may not release")) << r.err;
  EXPECT_EQ(Submit("alice", ModelAt(dir + "/step-1")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED)
      << "a refused release changes nothing";

  r = ReleaseDir("root", dir + "/");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "checkpoint.dir of job " + id + " (bob) released")) << r.out;
  grpc::Status s = Submit("alice", ModelAt(dir + "/step-1"));
  EXPECT_TRUE(s.ok()) << s.error_message();
  v1::GetJobEventsRequest req;
  req.set_job_id(id);
  v1::GetJobEventsResponse events;
  ASSERT_TRUE(stub_->GetJobEvents(Context("bob").get(), req, &events).ok());
  ASSERT_GT(events.events_size(), 0);
  const v1::JobEvent& last = events.events(events.events_size() - 1);
  EXPECT_EQ(last.type(), "dir_released");
  EXPECT_TRUE(absl::StrContains(last.reason(), dir + " released by root")) << last.reason();
  EXPECT_EQ(last.to_state(), v1::QUEUED) << "its state is unchanged";

  r = ReleaseDir("root", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "no job claims " + dir)) << r.err;
}

// 100,000 label selectors: refused up front, naming the field and the bound, with no SQL
// text in the answer.
TEST_F(DirClaimsTest, ListingJobsWithTooManyLabelSelectorsIsRefusedWithoutSqlText) {
  v1::ListJobsRequest req;
  for (int i = 0; i < 100000; ++i) req.add_labels(absl::StrCat("k", i, "=v"));
  v1::ListJobsResponse resp;
  grpc::Status s = stub_->ListJobs(Context("alice").get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message().substr(0, 300);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "labels has 100000 selectors; at most 32"))
      << s.error_message().substr(0, 300);
  for (const char* sql : {"SELECT", "job_labels", "WHERE", "prepare '"}) {
    EXPECT_FALSE(absl::StrContains(s.error_message(), sql)) << sql;
  }
  req.mutable_labels()->DeleteSubrange(32, req.labels_size() - 32);
  EXPECT_TRUE(stub_->ListJobs(Context("alice").get(), req, &resp).ok()) << "32 are answered";
}

}  // namespace
}  // namespace llamafleet
