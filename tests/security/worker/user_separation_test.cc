// Separation by the operating system, end to end with real processes: a coordinator with
// tokens for alice and bob, one path root writable by every identity (sticky, as shared
// storage is set up for per-owner identities), alice mapped to uid 2001 under users: and
// bob on a dynamic uid, and a root worker without --run-as. A /bin/sh stand-in trainer
// runs as whatever identity the worker gives it: in alice's job it writes her checkpoint
// and export; in bob's job it is hostile code that goes for her files, through his spec's
// data.train_path (a path inside her checkpoint dir that every path check lets through)
// and by name. The kernel refuses every read, write and delete (EACCES), whatever the path
// checks missed; the two users' directories belong to different uids, mode 0700.
#include <grpcpp/grpcpp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"
#include "worker/run_as.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::BinaryPath;
using testing::RunCommand;
using testing::ReadFile;
using testing::TempDir;

constexpr uint32_t kAliceUid = 2001;

// @ALICE@: alice's directory in the root. Alice's job (its checkpoint dir is @ALICE@/ck)
// writes a checkpoint and its export; any other job tries each attack on her files and
// writes what happened, one line each, to its own checkpoint dir's `report`.
constexpr char kTrainer[] = R"sh(#!/bin/sh
SPEC=""
while [ $# -gt 0 ]; do
  case "$1" in --spec) SPEC="$2"; shift ;; esac
  shift
done
CK=$(sed -n 's/.*"checkpoint":{[^}]*"dir":"\([^"]*\)".*/\1/p' "$SPEC")
DATA=$(sed -n 's/.*"train_path":"\([^"]*\)".*/\1/p' "$SPEC")
OUT=$(sed -n 's/.*"export_dir":"\([^"]*\)".*/\1/p' "$SPEC")
ALICE=@ALICE@
echo '{"type":"event","event":"started","total_steps":1}'
if [ "$CK" = "$ALICE/ck" ]; then
  mkdir "$CK/step-1" && echo "alice's weights" > "$CK/step-1/weights" && echo "alice's export" > "$OUT/model.safetensors"
  id -u > "$CK/uid"
  exit 0
fi
attempt() {
  name=$1; shift
  if err=$("$@" 2>&1 >/dev/null); then echo "$name: succeeded"; else echo "$name: failed: $err"; fi
}
{
  echo "uid=$(id -u)"
  attempt read-train-path cat "$DATA"
  attempt read-checkpoint cat "$ALICE/ck/step-1/weights"
  attempt list-checkpoints ls "$ALICE/ck"
  attempt plant touch "$ALICE/ck/step-1/planted"
  attempt overwrite sh -c "echo bob > '$ALICE/ck/step-1/weights'"
  attempt delete-checkpoint rm -r "$ALICE/ck/step-1"
  attempt read-export cat "$ALICE/out/model.safetensors"
  attempt delete-export rm -r "$ALICE/out"
  attempt delete-all rm -r "$ALICE"
  attempt rename mv "$ALICE" "$ALICE.bobs"
} > "$CK/report"
exit 0
)sh";

struct stat Stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

class UserSeparationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: a root worker switches to each owner's identity";
    // Every identity may pass the path to the root and the trainer; the root takes each
    // identity's own directories (sticky: none may rename or delete another's).
    fs::permissions(dir_.path(), fs::perms(0755));
    root_ = dir_.path() + "/root";
    fs::create_directories(root_);
    fs::permissions(root_, fs::perms(01777));
    trainer_ = dir_.path() + "/train.sh";
    std::ofstream(trainer_) << absl::StrReplaceAll(kTrainer, {{"@ALICE@", root_ + "/alice"}});
    fs::permissions(trainer_, fs::perms(0755));
    std::ofstream(root_ + "/data.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
    fs::permissions(root_ + "/data.jsonl", fs::perms(0644));
    const std::string data_dir = dir_.path() + "/coord";
    for (const std::string user : {"alice", "bob"}) {
      absl::StatusOr<testing::CommandResult> r = RunCommand(
          {BinaryPath("llamafleet-coordinator"), "token", "create", "--data-dir", data_dir, "--user", user, "--role", "user"});
      ASSERT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.status().ToString());
      tokens_[user] = std::string(absl::StripAsciiWhitespace(r->out));
    }
    const std::string config = dir_.path() + "/coordinator.yaml";
    std::ofstream(config) << "users:\n  alice: {uid: " << kAliceUid << ", gid: " << kAliceUid << "}\n";
    auto c = testing::StartCoordinator({.data_dir = data_dir,
                                        .auth = true,
                                        .join_token = "secret",
                                        .path_roots = {root_},
                                        .flags = {"--config", config},
                                        .log_path = dir_.path() + "/coordinator.log"});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(c->process);
    jobs_ = v1::JobService::NewStub(grpc::CreateChannel(c->address, grpc::InsecureChannelCredentials()));
    address_ = c->address;
  }

  // A root worker: without --run-as (each job as its owner's identity), or with it.
  void StartWorker(const std::string& run_as = "") {
    auto w = testing::StartWorker({.coordinator = address_,
                                   .name = "w1",
                                   .data_dir = dir_.path() + "/w1",
                                   .join_token = "secret",
                                   .trainer = trainer_,
                                   .heartbeat_interval = 0.3,
                                   .run_as = run_as,
                                   .per_owner = run_as.empty(),
                                   .log_path = dir_.path() + "/w1.log"});
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
  }

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "coordinator log:\n" << ReadFile(dir_.path() + "/coordinator.log") << "\nworker log:\n"
                << ReadFile(dir_.path() + "/w1.log");
    }
  }

  // Submits `yaml` as `user` and waits for the job to end.
  v1::Job Run(const std::string& user, const std::string& yaml) {
    absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(yaml);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (!parsed.ok()) return v1::Job();
    v1::SubmitJobRequest req;
    *req.mutable_spec() = (*parsed)[0].spec;
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + tokens_[user]);
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << user << ": " << s.error_message();
    v1::Job job;
    testing::WaitFor(
        [&] {
          v1::GetJobRequest get;
          get.set_job_id(resp.job().id());
          grpc::ClientContext c;
          c.AddMetadata("authorization", "Bearer " + tokens_[user]);
          job = v1::Job();
          (void)jobs_->GetJob(&c, get, &job);
          return job.state() == v1::SUCCEEDED || job.state() == v1::FAILED || job.state() == v1::CANCELLED;
        },
        absl::Seconds(60), absl::Milliseconds(100));
    return job;
  }

  std::string JobYaml(const std::string& name, const std::string& train_path, const std::string& rest) {
    return absl::StrCat("name: ", name, "\nmodel: {preset: tiny}\ndata: {train_path: ", train_path,
                        ", format: tokens}\nresources: {nodes: 1, gpus_per_node: 1}\n", rest);
  }

  TempDir dir_;
  std::string root_, trainer_, address_;
  std::map<std::string, std::string> tokens_;
  std::unique_ptr<testing::Subprocess> coordinator_, worker_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(UserSeparationTest, AnotherUsersTrainerGetsEaccesOnEveryFileOfHersWhateverThePathChecksLetThrough) {
  StartWorker();
  const std::string alice = root_ + "/alice";
  v1::Job hers = Run("alice", JobYaml("hers", root_ + "/data.jsonl",
                                      absl::StrCat("checkpoint: {dir: ", alice, "/ck}\noutput: {export_dir: ", alice,
                                                   "/out}\n")));
  ASSERT_EQ(hers.state(), v1::SUCCEEDED) << hers.status_reason();
  // Her trainer ran as her mapped uid; what the worker made for her job, and what her
  // trainer made in it, belong to her alone.
  EXPECT_EQ(ReadFile(alice + "/ck/uid"), absl::StrCat(kAliceUid, "\n"));
  for (const std::string& d : {alice, alice + "/ck", alice + "/out", alice + "/ck/step-1"}) {
    const struct stat st = Stat(d);
    EXPECT_EQ(st.st_uid, kAliceUid) << d;
    EXPECT_EQ(st.st_gid, kAliceUid) << d;
    EXPECT_EQ(st.st_mode & 07777, 0700u) << d;
  }
  EXPECT_EQ(Stat(alice + "/ck/step-1/weights").st_mode & 07777, 0600u) << "the trainer's umask is 077";

  // Bob's job names her checkpoint as its training data: inside the root, no link, not a
  // checkpoint read the coordinator guards; every path check lets it through.
  v1::Job his = Run("bob", JobYaml("his", alice + "/ck/step-1/weights", ""));
  ASSERT_EQ(his.state(), v1::SUCCEEDED) << his.status_reason();
  const std::string his_dir = absl::StrCat(root_, "/llamafleet/checkpoints/", his.id());
  const std::string report = ReadFile(his_dir + "/report");
  ASSERT_FALSE(report.empty()) << "no report in " << his_dir;
  std::map<std::string, std::string> outcome;
  for (absl::string_view line : absl::StrSplit(report, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(absl::ByAnyChar(":="), 1));
    outcome[kv.first] = kv.second;
  }
  uint32_t bob_uid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(outcome["uid"], &bob_uid)) << report;
  EXPECT_NE(bob_uid, kAliceUid);
  EXPECT_TRUE(bob_uid >= 61184 && bob_uid <= 65519) << "bob has no mapping: a dynamic uid, got " << bob_uid;
  // EACCES inside her 0700 directories; EPERM for her directory itself, which the sticky
  // root lets no one but her rename or remove.
  const std::vector<std::pair<std::string, std::string>> attacks = {
      {"read-train-path", "Permission denied"}, {"read-checkpoint", "Permission denied"},
      {"list-checkpoints", "Permission denied"}, {"plant", "Permission denied"},
      {"overwrite", "Permission denied"},       {"delete-checkpoint", "Permission denied"},
      {"read-export", "Permission denied"},     {"delete-export", "Permission denied"},
      {"delete-all", "Operation not permitted"}, {"rename", "Operation not permitted"}};
  for (const auto& [attack, refusal] : attacks) {
    ASSERT_TRUE(outcome.count(attack)) << attack << " missing from:\n" << report;
    EXPECT_TRUE(absl::StartsWith(outcome[attack], " failed: ")) << attack << ":" << outcome[attack];
    EXPECT_NE(outcome[attack].find(refusal), std::string::npos)
        << attack << ": not refused by the kernel:" << outcome[attack];
  }
  // His own checkpoint dir is his uid's, as private.
  const struct stat his_st = Stat(his_dir);
  EXPECT_EQ(his_st.st_uid, bob_uid);
  EXPECT_EQ(his_st.st_mode & 07777, 0700u);
  EXPECT_EQ(Stat(root_ + "/llamafleet/checkpoints").st_uid, 0u) << "the level above is the worker's";

  // Her files are as her job left them.
  EXPECT_EQ(ReadFile(alice + "/ck/step-1/weights"), "alice's weights\n");
  EXPECT_EQ(ReadFile(alice + "/out/model.safetensors"), "alice's export\n");
  EXPECT_FALSE(fs::exists(alice + "/ck/step-1/planted"));
  EXPECT_FALSE(fs::exists(alice + ".bobs"));
  EXPECT_NE(ReadFile(dir_.path() + "/w1.log").find("trainers: per-owner identities"), std::string::npos);
}

TEST_F(UserSeparationTest, AJobNamingADirectoryInsideAnotherUsersIsRefusedBeforeItsTrainerStarts) {
  StartWorker();
  const std::string alice = root_ + "/alice";
  v1::Job hers = Run("alice", JobYaml("hers", root_ + "/data.jsonl", absl::StrCat("checkpoint: {dir: ", alice, "/ck}\n")));
  ASSERT_EQ(hers.state(), v1::SUCCEEDED) << hers.status_reason();
  // A new directory inside hers, for his checkpoints and for his export: his identity may
  // make neither, so the worker makes neither for him.
  for (const std::string& rest : {absl::StrCat("checkpoint: {dir: ", alice, "/bobs-ck}\n"),
                                  absl::StrCat("output: {export_dir: ", alice, "/bobs-export}\n")}) {
    v1::Job his = Run("bob", JobYaml("his", root_ + "/data.jsonl", rest));
    EXPECT_EQ(his.state(), v1::FAILED) << rest;
    EXPECT_NE(his.status_reason().find("Permission denied"), std::string::npos) << his.status_reason();
  }
  EXPECT_FALSE(fs::exists(alice + "/bobs-ck"));
  EXPECT_FALSE(fs::exists(alice + "/bobs-export"));
}

// --run-as keeps the single-identity mode: every job as that one user, whatever identity
// the coordinator names, and the trainers make their directories as before.
TEST_F(UserSeparationTest, RunAsRunsEveryJobAsOneUser) {
  const struct passwd* pw = getpwnam(worker::kDefaultTrainerUser);
  ASSERT_NE(pw, nullptr) << "user llamafleet is missing: run deploy/local/install-deps.sh";
  StartWorker(worker::kDefaultTrainerUser);
  const std::string alice = root_ + "/alice";
  fs::create_directories(alice + "/ck");
  ASSERT_EQ(::chown((alice + "/ck").c_str(), pw->pw_uid, pw->pw_gid), 0);
  v1::Job hers = Run("alice", JobYaml("hers", root_ + "/data.jsonl", absl::StrCat("checkpoint: {dir: ", alice, "/ck}\n")));
  ASSERT_EQ(hers.state(), v1::SUCCEEDED) << hers.status_reason();
  EXPECT_EQ(ReadFile(alice + "/ck/uid"), absl::StrCat(pw->pw_uid, "\n"));
  EXPECT_NE(ReadFile(dir_.path() + "/w1.log").find("single identity (--run-as): every job's trainers run as user llamafleet"),
            std::string::npos);
}

}  // namespace
}  // namespace llamafleet
