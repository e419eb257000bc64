// The API attacks against a real coordinator (tests/security/security_api.h).
#include "tests/security/security_api.h"

namespace llamafleet {
namespace {

TEST_F(SecurityApiTest, EveryPathFieldOutsideTheRootIsRefusedNamingTheFieldAndTheRoots) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"output.export_dir", "output: {export_dir: /etc/cron.d}\n"},
      {"output.export_dir", absl::StrCat("output: {export_dir: ", root_, "/../escape}\n")},
      {"output.export_dir", "output: {export_dir: relative/dir}\n"},
      {"checkpoint.dir", "checkpoint: {dir: /tmp/elsewhere}\n"},
      {"checkpoint.resume", "checkpoint: {resume: /var/lib/other/step-10}\n"},
  };
  std::vector<std::tuple<std::string, std::string, v1::JobSpec>> specs;
  for (const auto& [field, yaml] : cases) specs.emplace_back(field, yaml, Spec(yaml));
  v1::JobSpec spec = Spec();
  spec.mutable_model()->set_tokenizer("/etc/shadow");
  specs.emplace_back("model.tokenizer", "tokenizer", spec);
  spec = Spec();
  spec.mutable_data()->set_eval_path("/x/eval.jsonl");
  specs.emplace_back("data.eval_path", "eval_path", spec);
  spec = Spec();
  spec.mutable_data()->set_train_path(root_ + "/../train.jsonl");
  specs.emplace_back("data.train_path", "train_path", spec);
  for (const auto& [field, yaml, job] : specs) {
    grpc::Status s = Submit("alice", job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << yaml;
    EXPECT_NE(s.error_message().find("spec." + field), std::string::npos) << s.error_message();
    EXPECT_NE(s.error_message().find(root_), std::string::npos) << "names the roots: " << s.error_message();
    std::vector<std::string> fields = Fields(s);
    EXPECT_NE(std::find(fields.begin(), fields.end(), "spec." + field), fields.end()) << yaml;
  }
  // model.path too (it excludes model.preset).
  spec = Spec();
  spec.mutable_model()->clear_preset();
  spec.mutable_model()->set_path("/root/.ssh");
  grpc::Status s = Submit("alice", spec);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.model.path"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Jobs().empty()) << "nothing stored";

  // Another owner's token cache is the workers' to hand out: no path may name it, to read
  // or to write (the worker checks again with links resolved).
  const std::string caches = root_ + "/llamafleet/token-cache";
  std::vector<std::pair<std::string, v1::JobSpec>> into_caches(3, {"", Spec()});
  into_caches[0].first = "data.train_path";
  into_caches[0].second.mutable_data()->set_train_path(caches + "/bob/k.tokens");
  into_caches[1].first = "model.tokenizer";
  into_caches[1].second.mutable_model()->set_tokenizer(root_ + "/x/../llamafleet/token-cache/bob/t");
  into_caches[2].first = "output.export_dir";
  into_caches[2].second.mutable_output()->set_export_dir(caches + "/bob");
  for (const auto& [field, job] : into_caches) {
    s = Submit("alice", job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(s.error_message().find("spec." + field + " must not be inside " + caches), std::string::npos)
        << s.error_message();
  }
  EXPECT_TRUE(Jobs().empty()) << "nothing stored";

  // Inside the root, '.' and '..' resolved: accepted, and stored as checked.
  std::string id;
  ASSERT_TRUE(Submit("alice", Spec(absl::StrCat("output: {export_dir: ", root_, "/a/../out/./x/}\n")), &id)
                  .ok());
  std::vector<v1::Job> jobs = Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].spec().output().export_dir(), root_ + "/out/x");
}

TEST_F(SecurityApiTest, WithoutARootNoJobIsAcceptedAndTheMessageSaysHowToConfigureOne) {
  Stop();
  std::ofstream(config_) << "queues: {research: {gpu_quota: 4}}\n";
  Start();
  grpc::Status s = Submit("alice", Spec());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.data.train_path"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("--path-root"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("paths.roots"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Jobs().empty());
}

TEST_F(SecurityApiTest, ACheckpointDirAnotherJobUsesIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: gives directories to job identities";
  const std::string dir = root_ + "/team/ckpt-a";
  std::string first;
  ASSERT_TRUE(Submit("alice", Spec(absl::StrCat("checkpoint: {dir: ", dir, "}\n")), &first).ok());
  // Her worker makes it as her identity: from then on the claim keeps everyone out.
  ASSERT_TRUE(MakeOwnedBy(dir, "alice"));
  for (const std::string& taken : {dir, dir + "/", dir + "/step-10", root_ + "/team"}) {
    for (const std::string who : {"bob", "alice", "root"}) {  // the owner and admins too
      grpc::Status s = Submit(who, Spec(absl::StrCat("checkpoint: {dir: ", taken, "}\n")));
      EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << taken;
      EXPECT_NE(s.error_message().find("spec.checkpoint.dir"), std::string::npos) << s.error_message();
      EXPECT_NE(s.error_message().find("job " + first), std::string::npos) << s.error_message();
    }
  }
  // Two jobs of one batch cannot share one either; the batch is stored whole or not at all.
  v1::SubmitJobsRequest batch;
  for (int i = 0; i < 2; ++i) {
    *batch.add_jobs()->mutable_spec() = Spec(absl::StrCat("checkpoint: {dir: ", root_, "/shared}\n"));
  }
  v1::SubmitJobsResponse resp;
  grpc::Status s = stub_->SubmitJobs(Context("bob").get(), batch, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("jobs[1].spec.checkpoint.dir"), std::string::npos) << s.error_message();
  // llamafleet's own directory (default checkpoint dirs) is not for jobs to name.
  s = Submit("bob", Spec(absl::StrCat("checkpoint: {dir: ", root_, "/llamafleet/checkpoints/99}\n")));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.checkpoint.dir"), std::string::npos) << s.error_message();
  // Nothing but the first job was stored; a directory of its own is fine.
  EXPECT_EQ(Jobs().size(), 1u);
  EXPECT_TRUE(Submit("bob", Spec(absl::StrCat("checkpoint: {dir: ", root_, "/team/ckpt-b}\n"))).ok());
}

TEST_F(SecurityApiTest, AnotherJobsCheckpointsAreReadableOnlyByItsOwnerOrAnAdmin) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: gives directories to job identities";
  std::string explicit_job, default_job;
  ASSERT_TRUE(
      Submit("alice", Spec(absl::StrCat("checkpoint: {dir: ", root_, "/alice/ckpt}\n")), &explicit_job).ok());
  ASSERT_TRUE(MakeOwnedBy(root_ + "/alice/ckpt", "alice"));  // as her worker makes it
  ASSERT_TRUE(Submit("alice", Spec(), &default_job).ok());
  const std::string in_explicit = root_ + "/alice/ckpt/step-10";
  const std::string in_default = absl::StrCat(root_, "/llamafleet/checkpoints/", default_job, "/step-10");
  auto resume = [&](const std::string& path) {
    return Spec(absl::StrCat("checkpoint: {resume: ", path, "}\n"));
  };
  auto model = [&](const std::string& path) {
    v1::JobSpec spec = Spec();
    spec.mutable_model()->clear_preset();
    spec.mutable_model()->set_path(path);
    return spec;
  };
  for (const auto& [field, spec] : std::vector<std::pair<std::string, v1::JobSpec>>{
           {"checkpoint.resume", resume(in_explicit)},
           {"checkpoint.resume", resume(in_default)},
           {"model.path", model(in_explicit)},
           {"model.path", model(in_default)},
           {"model.path", model(root_ + "/llamafleet/checkpoints")}}) {
    grpc::Status s = Submit("bob", spec);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << spec.ShortDebugString();
    EXPECT_NE(s.error_message().find("spec." + field), std::string::npos) << s.error_message();
    std::vector<std::string> fields = Fields(s);
    EXPECT_NE(std::find(fields.begin(), fields.end(), "spec." + field), fields.end());
  }
  EXPECT_EQ(Jobs().size(), 2u) << "bob's submissions stored nothing";
  // The owner may, and so may an admin. (A finished job's checkpoints stay readable; the
  // cancel also keeps alice under the active-job limit.)
  v1::CancelJobRequest cancel;
  cancel.set_job_id(explicit_job);
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(stub_->CancelJob(Context("alice").get(), cancel, &cancelled).ok());
  EXPECT_TRUE(Submit("alice", resume(in_explicit)).ok());
  EXPECT_TRUE(Submit("alice", model(in_default)).ok());
  EXPECT_TRUE(Submit("root", resume(in_default)).ok());
}

TEST_F(SecurityApiTest, AYamlAliasBombWithoutATokenIsRefusedBeforeItsBodyIsRead) {
  const std::string bomb = AliasBomb();
  ASSERT_GE(bomb.size(), 150u << 10);
  for (int i = 0; i < 3; ++i) {
    HttpReply r = HttpPost(http_address_, "/api/v1/jobs", bomb, "application/yaml", "");
    EXPECT_EQ(r.status, 401) << r.body;
    EXPECT_LT(r.took, absl::Seconds(1));
    r = HttpPost(http_address_, "/api/v1/jobs:batch", bomb, "application/yaml", "not-a-token");
    EXPECT_EQ(r.status, 401) << r.body;
    EXPECT_LT(r.took, absl::Seconds(1));
  }
  // With a token it is parsed, and refused at the first anchor.
  HttpReply r = HttpPost(http_address_, "/api/v1/jobs", bomb, "application/yaml", tokens_["alice"]);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("anchors"), std::string::npos) << r.body;
  EXPECT_LT(r.took, absl::Seconds(1));
  const int64_t peak = PeakRss(coordinator_->pid());
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, 200 << 20) << "coordinator peak RSS " << peak;
  EXPECT_TRUE(Jobs().empty());
}

TEST_F(SecurityApiTest, ActiveJobsPerUserAreLimited) {
  std::vector<std::string> ids(kMaxActive);
  for (int i = 0; i < kMaxActive; ++i) ASSERT_TRUE(Submit("alice", Spec(), &ids[i]).ok());
  grpc::Status s = Submit("alice", Spec());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_active_jobs_per_user"), std::string::npos) << s.error_message();
  // Others are not affected by alice's jobs.
  EXPECT_TRUE(Submit("bob", Spec()).ok());
  // A finished job no longer counts.
  v1::CancelJobRequest cancel;
  cancel.set_job_id(ids[0]);
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(stub_->CancelJob(Context("alice").get(), cancel, &cancelled).ok());
  EXPECT_TRUE(Submit("alice", Spec()).ok());
  // A batch that would pass the limit is stored not at all.
  ASSERT_TRUE(stub_->CancelJob(Context("alice").get(), [&] {
                       v1::CancelJobRequest c;
                       c.set_job_id(ids[1]);
                       return c;
                     }(), &cancelled)
                  .ok());
  v1::SubmitJobsRequest batch;
  for (int i = 0; i < 2; ++i) *batch.add_jobs()->mutable_spec() = Spec();
  v1::SubmitJobsResponse resp;
  const size_t before = Jobs().size();
  s = stub_->SubmitJobs(Context("alice").get(), batch, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(Jobs().size(), before);
}

TEST_F(SecurityApiTest, OnlyConfiguredQueuesAndPrioritiesUpToTheRolesMaximum) {
  grpc::Status s = Submit("alice", Spec("queue: no-quota\n"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.queue"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("research"), std::string::npos) << "lists the queues";
  s = Submit("alice", Spec("priority: 1000\n"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.priority"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Jobs().empty());
  EXPECT_TRUE(Submit("alice", Spec("queue: research\npriority: 100\n")).ok());
  EXPECT_TRUE(Submit("alice", Spec("queue: default\n")).ok());
  EXPECT_TRUE(Submit("root", Spec("priority: 1000\n")).ok()) << "admins have no maximum here";
}

// Issue finding H1, at submission: bob links a directory of his to alice's recorded
// checkpoint directory and names the link. Refused, naming the field, in a dry run exactly
// as in a real submission; reading her checkpoint through the link is refused as reading
// it directly is.
TEST_F(SecurityApiTest, ALinkIntoAnotherUsersCheckpointDirIsRefusedAtSubmitAndInADryRun) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: gives directories to job identities";
  const std::string alices = root_ + "/alice/ck";
  ASSERT_TRUE(MakeOwnedBy(alices, "alice"));
  std::filesystem::create_directories(alices + "/step-2");
  std::string alice_job;
  ASSERT_TRUE(Submit("alice", Spec(absl::StrCat("checkpoint: {dir: ", alices, "}\n")), &alice_job).ok());
  std::filesystem::create_directories(root_ + "/bob2");
  std::filesystem::create_symlink(alices, root_ + "/bob2/ck2");
  for (const bool dry_run : {true, false}) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(absl::StrCat("checkpoint: {dir: ", root_, "/bob2/ck2, keep_last: 1}\n"));
    req.set_dry_run(dry_run);
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(Context("bob").get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << dry_run;
    EXPECT_NE(s.error_message().find("spec.checkpoint.dir"), std::string::npos) << s.error_message();
    EXPECT_NE(s.error_message().find("symbolic link"), std::string::npos) << s.error_message();
    const std::vector<std::string> fields = Fields(s);
    EXPECT_NE(std::find(fields.begin(), fields.end(), "spec.checkpoint.dir"), fields.end());
    // The same for an export dir below a link.
    *req.mutable_spec() = Spec(absl::StrCat("output: {export_dir: ", root_, "/bob2/ck2/export}\n"));
    s = stub_->SubmitJob(Context("bob").get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << dry_run;
    EXPECT_NE(s.error_message().find("spec.output.export_dir"), std::string::npos) << s.error_message();
    // Reading alice's checkpoint through the link: refused as reading it directly.
    *req.mutable_spec() = Spec(absl::StrCat("checkpoint: {resume: ", root_, "/bob2/ck2/step-2}\n"));
    s = stub_->SubmitJob(Context("bob").get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << dry_run;
    EXPECT_NE(s.error_message().find("job " + alice_job), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(Jobs().size(), 1u);
}

// An export dir that is another job's export, or inside its checkpoint dir (or a
// checkpoint dir inside another job's export), is refused at submission, naming the field
// and the job, in a dry run too: not after the job has queued.
TEST_F(SecurityApiTest, AnExportDirClashingWithAnotherJobsDirsIsRefusedAtSubmitAndInADryRun) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: gives directories to job identities";
  const std::string out = root_ + "/alice/out", ck = root_ + "/alice/ck";
  std::string first;
  ASSERT_TRUE(Submit("alice", Spec(absl::StrCat("checkpoint: {dir: ", ck, "}\noutput: {export_dir: ", out, "}\n")),
                     &first)
                  .ok());
  ASSERT_TRUE(MakeOwnedBy(ck, "alice") && MakeOwnedBy(out, "alice"));  // as her worker makes them
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"output: {export_dir: " + out + "}\n", "spec.output.export_dir"},
      {"output: {export_dir: " + out + "/sub}\n", "spec.output.export_dir"},
      {"output: {export_dir: " + ck + "/export}\n", "spec.output.export_dir"},
      {"output: {export_dir: " + root_ + "/alice}\n", "spec.output.export_dir"},
      {"checkpoint: {dir: " + out + "/ck}\n", "spec.checkpoint.dir"},
  };
  for (const auto& [extra, field] : cases) {
    for (const bool dry_run : {true, false}) {
      for (const std::string who : {"bob", "alice"}) {
        v1::SubmitJobRequest req;
        *req.mutable_spec() = Spec(extra);
        req.set_dry_run(dry_run);
        v1::SubmitJobResponse resp;
        grpc::Status s = stub_->SubmitJob(Context(who).get(), req, &resp);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << extra << dry_run;
        EXPECT_NE(s.error_message().find(field), std::string::npos) << s.error_message();
        EXPECT_NE(s.error_message().find("job " + first), std::string::npos) << s.error_message();
      }
    }
  }
  EXPECT_EQ(Jobs().size(), 1u);
  EXPECT_TRUE(Submit("bob", Spec(absl::StrCat("output: {export_dir: ", root_, "/bob/out}\n"))).ok());
}

// A dry run refuses a checkpoint dir another job has, as the real submission does.
TEST_F(SecurityApiTest, ADryRunRefusesATakenCheckpointDirAsASubmissionDoes) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: gives directories to job identities";
  const std::string dir = root_ + "/team/ck";
  std::string first;
  ASSERT_TRUE(Submit("alice", Spec(absl::StrCat("checkpoint: {dir: ", dir, "}\n")), &first).ok());
  ASSERT_TRUE(MakeOwnedBy(dir, "alice"));  // as her worker makes it
  for (const std::string& taken : {dir, dir + "/sub", root_ + "/team"}) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(absl::StrCat("checkpoint: {dir: ", taken, "}\n"));
    req.set_dry_run(true);
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(Context("bob").get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << taken;
    EXPECT_NE(s.error_message().find("spec.checkpoint.dir"), std::string::npos) << s.error_message();
    EXPECT_NE(s.error_message().find("job " + first), std::string::npos) << s.error_message();
  }
}

// Issue finding M1: someone else makes <root>/llamafleet first (with checkpoints/1 a link
// into his own directory), or makes it writable by all, or a link. The coordinator makes
// it itself when missing and refuses to start on anything but its own.
TEST_F(SecurityApiTest, TheCoordinatorRefusesToStartOnAReservedDirThatIsNotLlamafleets) {
  const std::string reserved = root_ + "/llamafleet";
  ASSERT_TRUE(std::filesystem::is_directory(reserved)) << "made at start";
  EXPECT_EQ(std::filesystem::status(reserved).permissions() & std::filesystem::perms::others_write,
            std::filesystem::perms::none);
  Stop();
  const std::string log = dir_.path() + "/coordinator.log";
  auto refused = [&](const std::string& expect) {
    auto c = ::llamafleet::testing::StartCoordinator(
        {.data_dir = data_dir_, .auth = true, .join_token = "secret",
         .flags = {"--config", config_, "--log-level", "warn"}, .log_path = log});
    EXPECT_FALSE(c.ok()) << "started on " << expect;
    const std::string text = ReadFile(log);
    EXPECT_NE(text.find(reserved), std::string::npos) << text;
    EXPECT_NE(text.find(expect), std::string::npos) << text;
  };
  std::filesystem::remove_all(reserved);
  std::filesystem::create_directories(root_ + "/mallory");
  std::filesystem::create_symlink(root_ + "/mallory", reserved);
  refused("symbolic link");
  std::filesystem::remove(reserved);
  std::filesystem::create_directories(reserved + "/checkpoints");
  std::filesystem::create_symlink(root_ + "/mallory", reserved + "/checkpoints/1");
  std::filesystem::permissions(reserved, std::filesystem::perms::all);
  refused("writable by group or others");
  if (geteuid() == 0) {
    std::filesystem::permissions(reserved, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                               std::filesystem::perms::group_exec |
                                               std::filesystem::perms::others_read |
                                               std::filesystem::perms::others_exec);
    ASSERT_EQ(::chown(reserved.c_str(), 4242, 4242), 0);
    refused("owned by uid 4242");
  }
  // Its own again: the coordinator starts.
  std::filesystem::remove_all(reserved);
  Start();
  EXPECT_TRUE(std::filesystem::is_directory(reserved));
}

TEST_F(SecurityApiTest, TheDatabaseIsReadableOnlyByItsOwner) {
  ASSERT_TRUE(Submit("alice", Spec()).ok());  // the WAL holds a write
  for (const std::string suffix : {"", "-wal", "-shm"}) {
    struct stat st;
    const std::string path = data_dir_ + "/coordinator.db" + suffix;
    ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << path;
  }
  // A database made with a looser mode (an older coordinator) is narrowed at start.
  Stop();
  chmod((data_dir_ + "/coordinator.db").c_str(), 0644);
  Start();
  struct stat st;
  ASSERT_EQ(stat((data_dir_ + "/coordinator.db").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(SecurityApiTest, TheCliPrintsUntrustedTextWithoutControlSequences) {
  std::string id;
  v1::JobSpec spec = Spec();
  (*spec.mutable_labels())["note"] = "\x1b]0;owned\x07 \xc2\x9b" "31m";
  ASSERT_TRUE(Submit("alice", spec, &id).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  cancel.set_reason("\x1b[2J\x1b[H\rfake prompt$ ");
  v1::CancelJobResponse resp;
  ASSERT_TRUE(stub_->CancelJob(Context("alice").get(), cancel, &resp).ok());
  for (std::vector<std::string> command : std::vector<std::vector<std::string>>{
           {"describe", "job", id}, {"get", "jobs", "-o", "wide"}, {"watch", id, "--history"},
           {"get", "job", id, "-o", "yaml"}}) {
    std::vector<std::string> argv = {BinaryPath("llamafleet"), "--coordinator", address_, "--token",
                                     tokens_["alice"]};
    argv.insert(argv.end(), command.begin(), command.end());
    absl::StatusOr<testing::CommandResult> r = RunCommand(argv);
    ASSERT_TRUE(r.ok());
    // The job was cancelled: `watch` says so with exit code 4.
    EXPECT_EQ(r->exit_code, command[0] == "watch" ? 4 : 0) << command[0] << ": " << r->err;
    const std::string all = r->out + r->err;
    EXPECT_EQ(all.find('\x1b'), std::string::npos) << command[0] << ": " << all;
    EXPECT_EQ(all.find('\r'), std::string::npos) << command[0];
    EXPECT_EQ(all.find('\x07'), std::string::npos) << command[0];
    EXPECT_EQ(all.find("\xc2\x9b"), std::string::npos) << command[0];
    if (command[0] == "describe" || command[0] == "watch") {
      EXPECT_NE(all.find("\\x1b"), std::string::npos) << command[0] << " shows the escape: " << all;
    }
  }
}

TEST_F(SecurityApiTest, UnauthenticatedGrpcCallsChangeNothing) {
  tokens_["nobody"] = "";
  grpc::Status s = Submit("nobody", Spec());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Jobs().empty());
}

}  // namespace
}  // namespace llamafleet
