// Deleting jobs, by ttl_after_finished and by DeleteJob, against a real coordinator
// (tests/security/security_api.h): only what the job made goes, through descriptors.
#include "tests/security/security_api.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

TEST_F(SecurityApiTest, ATtlDeletionRemovesLogsAndTheDefaultCheckpointDirAndNeverLendsItsId) {
  std::string kept, expired, newest;
  const std::string own_dir = root_ + "/alice/own-ckpt";
  ASSERT_TRUE(Submit("alice",
                     Spec(absl::StrCat("checkpoint: {dir: ", own_dir,
                                       "}\nrun_policy: {ttl_after_finished_seconds: 1}\n")),
                     &kept)
                  .ok());
  ASSERT_TRUE(Submit("alice", Spec("run_policy: {ttl_after_finished_seconds: 1}\n"), &expired).ok());
  ASSERT_GT(std::stoll(expired), std::stoll(kept));  // the newest id is the one deleted
  // What the jobs left behind: trainer logs the coordinator stored, checkpoint files.
  const std::string logs = absl::StrCat(data_dir_, "/logs/", expired);
  const std::string default_ckpt = absl::StrCat(root_, "/llamafleet/checkpoints/", expired);
  for (const std::string& d : {logs + "/attempt-1", default_ckpt + "/step-1", own_dir + "/step-1"}) {
    std::filesystem::create_directories(d);
    std::ofstream(d + "/file") << "secret of job " << expired;
  }
  // The job's trainer marks the directories it makes (common/job_dir_marker.h).
  std::ofstream(default_ckpt + "/.llamafleet-job") << expired << "\n";
  for (const std::string& id : {kept, expired}) {
    v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    v1::CancelJobResponse resp;
    ASSERT_TRUE(stub_->CancelJob(Context("alice").get(), cancel, &resp).ok());
  }
  absl::SleepFor(absl::Milliseconds(1100));  // past the 1 s TTL, on the coordinator's real clock
  // A starting coordinator sweeps expired jobs on its first tick.
  Stop();
  Start();
  grpc::Status s;
  testing::WaitFor(
      [&] {
        v1::GetJobRequest get;
        get.set_job_id(expired);
        v1::Job job;
        s = stub_->GetJob(Context("alice").get(), get, &job);
        return !s.ok();
      },
      absl::Seconds(20), absl::Milliseconds(100));
  ASSERT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  // Removed after the record (on the manager's thread): allow a moment.
  testing::WaitFor([&] { return !std::filesystem::exists(default_ckpt); }, absl::Milliseconds(2500),
                   absl::Milliseconds(50));
  EXPECT_FALSE(std::filesystem::exists(logs));
  EXPECT_FALSE(std::filesystem::exists(default_ckpt));
  EXPECT_TRUE(std::filesystem::exists(own_dir + "/step-1/file")) << "a dir the user named is theirs";
  // The next job gets a new id, and nothing of the deleted one.
  ASSERT_TRUE(Submit("bob", Spec(), &newest).ok());
  EXPECT_GT(std::stoll(newest), std::stoll(expired));
  v1::StreamJobLogsRequest req;
  req.set_job_id(expired);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + tokens_["bob"]);
  auto reader = stub_->StreamJobLogs(&ctx, req);
  v1::LogChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

// delete job --artifacts removes only what llamafleet made for the job: its records,
// logs, default checkpoint dir and an export carrying its marker. An export someone
// replaced, or turned into a link, is kept and the answer says why; only the owner or an
// admin may delete, and only once the job has finished.
TEST_F(SecurityApiTest, DeletingAJobRemovesOnlyWhatTheJobMade) {
  std::map<std::string, std::string> ids;  // name → id
  for (const std::string name : {"made", "replaced", "linked"}) {
    ASSERT_TRUE(Submit("alice", Spec(absl::StrCat("output: {export_dir: ", root_, "/alice/out-", name, "}\n")),
                       &ids[name])
                    .ok());
  }
  auto remove = [&](const std::string& who, const std::string& id, bool artifacts, v1::DeleteJobResponse* resp) {
    v1::DeleteJobRequest req;
    req.set_job_id(id);
    req.set_artifacts(artifacts);
    return stub_->DeleteJob(Context(who).get(), req, resp);
  };
  v1::DeleteJobResponse resp;
  grpc::Status queued = remove("alice", ids["made"], true, &resp);
  EXPECT_EQ(queued.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(queued.error_message(), "is QUEUED; cancel it first")) << queued.error_message();
  for (const auto& [name, id] : ids) {
    v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    v1::CancelJobResponse cancelled;
    ASSERT_TRUE(stub_->CancelJob(Context("alice").get(), cancel, &cancelled).ok());
  }
  EXPECT_EQ(remove("bob", ids["made"], true, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // What the trainer left: the default checkpoint dir and the export, each marked.
  const std::string made = ids["made"];
  const std::string ckpt = absl::StrCat(root_, "/llamafleet/checkpoints/", made);
  const std::string out = root_ + "/alice/out-made";
  const std::string logs = absl::StrCat(data_dir_, "/logs/", made, "/attempt-1");
  for (const std::string& d : {ckpt + "/step-2", out, logs}) {
    std::filesystem::create_directories(d);
    std::ofstream(d + "/file") << "of job " << made;
  }
  std::ofstream(ckpt + "/.llamafleet-job") << made << "\n";
  std::ofstream(out + "/.llamafleet-export") << made;
  // Replaced: a directory without the job's marker. Linked: a link to a marked directory.
  std::filesystem::create_directories(root_ + "/alice/out-replaced");
  std::ofstream(root_ + "/alice/out-replaced/precious") << "not the job's";
  std::filesystem::create_directories(root_ + "/alice/elsewhere");
  std::ofstream(root_ + "/alice/elsewhere/.llamafleet-export") << ids["linked"];
  std::filesystem::create_directory_symlink(root_ + "/alice/elsewhere", root_ + "/alice/out-linked");

  ASSERT_TRUE(remove("alice", made, true, &resp).ok());
  const std::string said = absl::StrJoin(resp.removed(), "\n");
  EXPECT_TRUE(absl::StrContains(said, "checkpoint dir " + ckpt + " removed")) << said;
  EXPECT_TRUE(absl::StrContains(said, "export dir " + out + " removed")) << said;
  EXPECT_FALSE(std::filesystem::exists(ckpt));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(data_dir_, "/logs/", made)));
  v1::GetJobRequest get;
  get.set_job_id(made);
  v1::Job job;
  EXPECT_EQ(stub_->GetJob(Context("alice").get(), get, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(remove("alice", made, true, &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  resp.Clear();
  ASSERT_TRUE(remove("alice", ids["replaced"], true, &resp).ok());
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(resp.removed(), "\n"), "has no .llamafleet-export"))
      << absl::StrJoin(resp.removed(), "\n");
  EXPECT_TRUE(std::filesystem::exists(root_ + "/alice/out-replaced/precious"));
  resp.Clear();
  ASSERT_TRUE(remove("root", ids["linked"], true, &resp).ok());  // an admin may delete anyone's
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(resp.removed(), "\n"), "kept")) << absl::StrJoin(resp.removed(), "\n");
  EXPECT_TRUE(std::filesystem::exists(root_ + "/alice/elsewhere/.llamafleet-export"));
  EXPECT_TRUE(std::filesystem::is_symlink(root_ + "/alice/out-linked"));
}

// A deleted job's named checkpoint dir where it wrote checkpoints (they outlive the record)
// stays its owner's: after DeleteJob, and after a TTL deletion across a restart, another
// user can neither take it (as written, inside, above or through a link, in a dry run too)
// nor read from it (as written or through a link); its owner may name it again.
TEST_F(SecurityApiTest, ADeletedJobsNamedCheckpointDirIsNeitherClaimableNorReadableByAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: gives directories to job identities";
  const std::string deleted_now = root_ + "/alice/ck-deleted", expired = root_ + "/alice/ck-expired";
  std::string by_request, by_ttl;
  ASSERT_TRUE(Submit("alice", Spec(absl::StrCat("checkpoint: {dir: ", deleted_now, "}\n")), &by_request).ok());
  ASSERT_TRUE(Submit("alice",
                     Spec(absl::StrCat("checkpoint: {dir: ", expired, "}\nrun_policy: {ttl_after_finished_seconds: 1}\n")),
                     &by_ttl)
                  .ok());
  for (const std::string& d : {deleted_now, expired}) {
    ASSERT_TRUE(MakeOwnedBy(d, "alice"));  // as her worker makes it
    std::filesystem::create_directories(d + "/step-4");
  }
  for (const std::string& id : {by_request, by_ttl}) {
    v1::CancelJobRequest cancel;
    cancel.set_job_id(id);
    v1::CancelJobResponse resp;
    ASSERT_TRUE(stub_->CancelJob(Context("alice").get(), cancel, &resp).ok());
  }
  // Each wrote a checkpoint there (what a worker reports).
  Stop();
  RecordCheckpoint(by_request, deleted_now + "/step-4");
  RecordCheckpoint(by_ttl, expired + "/step-4");
  Start();
  v1::DeleteJobRequest del;
  del.set_job_id(by_request);
  v1::DeleteJobResponse deleted;
  ASSERT_TRUE(stub_->DeleteJob(Context("alice").get(), del, &deleted).ok());
  absl::SleepFor(absl::Milliseconds(1100));  // past the 1 s TTL, on the coordinator's real clock
  Stop();  // a starting coordinator sweeps expired jobs on its first tick
  Start();
  testing::WaitFor([&] { return Jobs().empty(); }, absl::Seconds(20), absl::Milliseconds(100));
  ASSERT_TRUE(Jobs().empty()) << "both records are deleted";

  std::filesystem::create_directories(root_ + "/bob");
  std::filesystem::create_symlink(expired, root_ + "/bob/link");
  for (const auto& [dir, job] : std::vector<std::pair<std::string, std::string>>{{deleted_now, by_request},
                                                                                 {expired, by_ttl}}) {
    for (const bool dry_run : {true, false}) {
      for (const std::string& claim : {dir, dir + "/sub", root_ + "/alice"}) {
        v1::SubmitJobRequest req;
        *req.mutable_spec() = Spec(absl::StrCat("checkpoint: {dir: ", claim, "}\n"));
        req.set_dry_run(dry_run);
        v1::SubmitJobResponse resp;
        grpc::Status s = stub_->SubmitJob(Context("bob").get(), req, &resp);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << claim << " dry_run " << dry_run;
        EXPECT_TRUE(absl::StrContains(s.error_message(), "spec.checkpoint.dir")) << s.error_message();
        // (Above both dirs, either may be named.)
        EXPECT_TRUE(absl::StrContains(s.error_message(), claim == root_ + "/alice"
                                                             ? std::string("the checkpoint directory of deleted job ")
                                                             : "the checkpoint directory of deleted job " + job))
            << s.error_message();
        if (claim == root_ + "/alice") continue;
        // An export there would write among its checkpoints: the same.
        *req.mutable_spec() = Spec(absl::StrCat("output: {export_dir: ", claim, "/out}\n"));
        s = stub_->SubmitJob(Context("bob").get(), req, &resp);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << claim;
        EXPECT_TRUE(absl::StrContains(s.error_message(), "spec.output.export_dir")) << s.error_message();
      }
    }
    for (const std::string& read : {dir + "/step-4", root_ + "/bob/link/step-4"}) {
      if (read != dir + "/step-4" && dir != expired) continue;  // the link leads into `expired`
      grpc::Status s = Submit("bob", Spec(absl::StrCat("checkpoint: {resume: ", read, "}\n")));
      EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << read;
      EXPECT_TRUE(absl::StrContains(s.error_message(), absl::StrCat("deleted job ", job, ", owned by alice")))
          << s.error_message();
    }
  }
  EXPECT_TRUE(Jobs().empty()) << "bob's attempts stored nothing";
  // Its owner may take it again, and read from it.
  std::string again;
  EXPECT_TRUE(Submit("alice", Spec(absl::StrCat("checkpoint: {dir: ", deleted_now, ", resume: ", deleted_now,
                                                "/step-4}\n")),
                     &again)
                  .ok());
  // The coordinator kept the records across its restart; the new job holds the dir now.
  grpc::Status s = Submit("bob", Spec(absl::StrCat("checkpoint: {dir: ", deleted_now, "}\n")));
  EXPECT_TRUE(absl::StrContains(s.error_message(), "job " + again)) << s.error_message();
}

}  // namespace
}  // namespace llamafleet
