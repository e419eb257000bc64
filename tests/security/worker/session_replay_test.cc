// A worker's credential replayed from a second process, end to end with real coordinator
// and worker processes: the thief is a real llamafleet-worker started under the victim's
// name with a copy of its credential file. The victim's trainer is a /bin/sh stand-in that
// appends each step to a file, so a trainer nobody holds shows up as a file that keeps
// growing. One process per name (server/cluster/worker_sessions.h): the thief is refused
// while the victim's session lives; if it takes the name while the victim is away, the
// victim stops its trainer on its next hello (worker/session_hold.h), and either way the
// job ends as it would have: never FAILED as its own fault, no trainer left running.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_state.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/cluster_client.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::Subprocess;
using testing::TempDir;

// LLAMAFLEET_FAKE_STEPS steps of 0.1 s; each appended to DIR/<task>.steps, its pid in
// DIR/<task>.pid (DIR: LLAMAFLEET_FAKE_DIR).
constexpr char kStepTrainer[] = R"sh(#!/bin/sh
OUT="$LLAMAFLEET_FAKE_DIR/$LLAMAFLEET_TASK_ID"
STEPS=${LLAMAFLEET_FAKE_STEPS:-60}
echo $$ > "$OUT.pid"
echo "{\"type\":\"event\",\"event\":\"started\",\"total_steps\":$STEPS}"
step=0
while [ $step -lt $STEPS ]; do
  sleep 0.1 &
  wait $!
  step=$((step + 1))
  echo $step >> "$OUT.steps"
  echo "{\"type\":\"metrics\",\"step\":$step,\"loss\":1,\"lr\":0.001,\"tokens_per_s\":1000}"
done
exit 0
)sh";

// Running and not a zombie.
bool Alive(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

class SessionReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trainer_ = dir_.path() + "/step-train.sh";
    std::ofstream(trainer_) << kStepTrainer;
    fs::permissions(trainer_, fs::perms::owner_all);
    fake_ = dir_.path() + "/fake";
    fs::create_directories(fake_);
  }

  void StartCoordinator(const std::string& heartbeat_timeout, std::vector<std::string> flags = {}) {
    flags.insert(flags.end(), {"--heartbeat-timeout", heartbeat_timeout, "--cancel-grace", "2"});
    auto c = testing::StartCoordinator({.data_dir = dir_.path() + "/coord",
                                        .join_token = "secret",
                                        .path_roots = {dir_.path(), "/"},
                                        .flags = flags,
                                        .log_path = dir_.path() + "/coordinator.log"});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(c->process);
    address_ = c->address;
    cluster_ = std::make_unique<testing::ClusterClient>(c->address);
  }

  // `process` names the log and data dir; `name` the worker it registers as.
  void StartWorker(const std::string& process, const std::string& name) {
    auto p = testing::StartWorker(
        {.coordinator = address_,
         .name = name,
         .data_dir = dir_.path() + "/" + process,
         .join_token = "secret",
         .trainer = trainer_,
         .heartbeat_interval = 0.3,
         .env = {{"LLAMAFLEET_FAKE_STEPS", "80"}, {"LLAMAFLEET_FAKE_DIR", fake_}},
         .log_path = dir_.path() + "/" + process + ".log"});
    ASSERT_TRUE(p.ok()) << p.status();
    processes_[process] = std::move(*p);
  }

  // The thief: a second process under the victim's worker name, with a copy of the
  // credential file from the victim process's data dir.
  void StartThief(const std::string& victim, const std::string& name) {
    fs::create_directories(dir_.path() + "/thief");
    fs::copy_file(dir_.path() + "/" + victim + "/worker-credential",
                  dir_.path() + "/thief/worker-credential");
    StartWorker("thief", name);
  }

  bool WaitForLog(const std::string& process, const std::string& text, absl::Duration timeout) {
    return testing::WaitFor(
        [&] { return absl::StrContains(ReadFile(dir_.path() + "/" + process + ".log"), text); }, timeout,
        absl::Milliseconds(50));
  }

  std::string Submit(const std::string& extra_yaml) {
    absl::StatusOr<std::string> id = cluster_->Submit(absl::StrCat(
        "name: replay\nmodel: {preset: tiny, tokenizer: /t.model}\ndata: {train_path: /d.jsonl}\n"
        "resources: {nodes: 1, gpus_per_node: 1}\n",
        extra_yaml));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }

  // A coordinator (its heartbeat timeout), the victim worker w1, and a one-node job with
  // `run_policy` training there past step 5: its id and its trainer's pid.
  void StartVictimJob(const std::string& heartbeat_timeout, const std::string& run_policy,
                      std::string* id, pid_t* trainer) {
    ASSERT_NO_FATAL_FAILURE(StartCoordinator(heartbeat_timeout));
    StartWorker("victim", "w1");
    ASSERT_TRUE(cluster_->WaitForWorkerState("w1", v1::WORKER_READY, absl::Seconds(20)));
    *id = Submit(run_policy);
    const v1::Job job = cluster_->WaitFor(
        *id, [](const v1::Job& j) { return j.latest_metrics().step() >= 5; }, absl::Seconds(30));
    ASSERT_EQ(job.state(), v1::RUNNING) << job.status_reason();
    *trainer = TrainerPid(*id, 1);
    ASSERT_GT(*trainer, 0);
  }

  // The task of the job's attempt `attempt` on its only node, as the trainer names its files.
  std::string TaskFile(const std::string& id, int attempt, const std::string& suffix) {
    return absl::StrCat(fake_, "/", id, "-", attempt, "-0", suffix);
  }

  pid_t TrainerPid(const std::string& id, int attempt) {
    const std::string path = TaskFile(id, attempt, ".pid");
    testing::WaitFor([&] { return !ReadFile(path).empty(); }, absl::Seconds(5), absl::Milliseconds(50));
    return static_cast<pid_t>(std::atoi(ReadFile(path).c_str()));
  }

  void TearDown() override {
    if (HasFailure()) {
      testing::PrintLogTails(dir_.path(), {"coordinator", "victim", "spare", "thief", "a", "b", "c"});
    }
    for (auto& [name, p] : processes_) p->Signal(SIGCONT);
    for (auto& [name, p] : processes_) p->Signal(SIGTERM);
    for (auto& [name, p] : processes_) (void)p->Wait(absl::Seconds(20));
    processes_.clear();
    coordinator_.reset();
  }

  TempDir dir_;
  std::string trainer_;
  std::string fake_;
  std::unique_ptr<Subprocess> coordinator_;
  std::string address_;
  std::unique_ptr<testing::ClusterClient> cluster_;
  std::map<std::string, std::unique_ptr<Subprocess>> processes_;
};

// The victim is connected and training when the thief says hello with its credential: the
// thief is refused, naming the name's live session, and the victim's session, trainer and
// job go on untouched: one attempt, no restart, SUCCEEDED, no trainer left behind.
TEST_F(SessionReplayTest, ASecondProcessWithACopiedCredentialIsRefusedAndTheJobRunsOn) {
  std::string id;
  pid_t trainer = 0;
  ASSERT_NO_FATAL_FAILURE(StartVictimJob("10", "run_policy: {max_restarts: 0}\n", &id, &trainer));

  StartThief("victim", "w1");
  ASSERT_TRUE(
      WaitForLog("thief", "already has a live session from another process", absl::Seconds(20)));
  EXPECT_TRUE(
      WaitForLog("coordinator", "refused a second session for worker w1", absl::Seconds(5)));
  EXPECT_FALSE(absl::StrContains(ReadFile(dir_.path() + "/thief.log"), "registered with"));
  // Let the thief retry a few times (its backoff starts at 250 ms) while the job trains.
  absl::SleepFor(absl::Seconds(2));
  EXPECT_FALSE(absl::StrContains(ReadFile(dir_.path() + "/victim.log"), "session with"))
      << "the victim's session was disturbed";
  EXPECT_TRUE(Alive(trainer));
  // A forged report right behind a replayed hello: the session is refused, and nothing it
  // sent counts.
  {
    std::string credential = ReadFile(dir_.path() + "/victim/worker-credential");
    credential = credential.substr(credential.find('\n') + 1);
    credential.pop_back();
    auto stub = v1::WorkerService::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    auto session = stub->Session(&ctx);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_name("w1");
    hello.mutable_hello()->set_join_token("secret");
    hello.mutable_hello()->set_credential(credential);
    hello.mutable_hello()->set_instance_id("forged");
    v1::WorkerMessage forged;
    forged.mutable_task_status()->set_task_id(absl::StrCat(id, "-1-0"));
    forged.mutable_task_status()->set_state(v1::TASK_FAILED);
    forged.mutable_task_status()->add_exits()->set_exit_code(1);
    session->Write(hello);
    session->Write(forged);
    v1::CoordinatorMessage answer;
    EXPECT_FALSE(session->Read(&answer));
    const grpc::Status refused = session->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::ALREADY_EXISTS) << refused.error_message();
  }
  absl::SleepFor(absl::Milliseconds(500));  // time for a wrong restart to show: none may
  v1::Job job = cluster_->Get(id);
  EXPECT_EQ(job.state(), v1::RUNNING) << job.status_reason();
  EXPECT_EQ(job.attempts(), 1);
  processes_["thief"]->Signal(SIGKILL);

  job = cluster_->WaitFor(
      id, [](const v1::Job& j) { return IsTerminal(j.state()); }, absl::Seconds(30));
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.status_reason();
  EXPECT_EQ(job.attempts(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_TRUE(absl::EndsWith(ReadFile(TaskFile(id, 1, ".steps")), "\n79\n80\n"))
      << "every step ran once";
  EXPECT_FALSE(Alive(trainer));
}

// The thief takes the name while the victim is away (stopped past the heartbeat timeout,
// its trainer still running and writing): the attempt ends as the victim's node fault and
// the job moves to the spare. When the victim comes back its hello is refused, and it
// stops the trainer no session holds: the trainer is gone, its step file stops growing,
// and the job SUCCEEDS on the spare.
TEST_F(SessionReplayTest, AThiefHoldingTheNameLeavesNoOrphanTrainerAndTheJobRestartsAsANodeFault) {
  std::string id;
  pid_t trainer = 0;
  ASSERT_NO_FATAL_FAILURE(StartVictimJob(
      "2", "run_policy: {max_restarts: 2, restart_backoff_seconds: 1}\n", &id, &trainer));
  StartWorker("spare", "w2");
  ASSERT_TRUE(cluster_->WaitForWorkerState("w2", v1::WORKER_READY, absl::Seconds(20)));

  processes_["victim"]->Signal(SIGSTOP);  // the worker only: its trainer goes on writing
  ASSERT_TRUE(cluster_->WaitForWorkerState("w1", v1::WORKER_LOST, absl::Seconds(10)));
  StartThief("victim", "w1");
  ASSERT_TRUE(WaitForLog("thief", "registered with", absl::Seconds(20)));
  // The job runs on again on the spare (w1 is excluded after its node fault).
  v1::Job job = cluster_->WaitFor(
      id, [](const v1::Job& j) { return j.attempts() == 2 && j.state() == v1::RUNNING; },
      absl::Seconds(20));
  ASSERT_EQ(job.attempts(), 2) << v1::JobState_Name(job.state()) << " " << job.status_reason();
  ASSERT_EQ(job.workers_size(), 1);
  EXPECT_EQ(job.workers(0), "w2");
  EXPECT_TRUE(Alive(trainer)) << "the stopped worker's trainer runs on, unheld";

  processes_["victim"]->Signal(SIGCONT);
  ASSERT_TRUE(
      WaitForLog("victim", "already has a live session from another process", absl::Seconds(20)));
  testing::WaitFor([&] { return !Alive(trainer); }, absl::Seconds(5), absl::Milliseconds(50));
  EXPECT_FALSE(Alive(trainer)) << "a trainer no session holds is still running";
  EXPECT_TRUE(WaitForLog("victim", "no session holds it", absl::Seconds(1)));
  const size_t written = ReadFile(TaskFile(id, 1, ".steps")).size();
  absl::SleepFor(absl::Milliseconds(500));  // time for an orphan to write: none may
  EXPECT_EQ(ReadFile(TaskFile(id, 1, ".steps")).size(), written) << "the orphan keeps writing";

  job = cluster_->WaitFor(
      id, [](const v1::Job& j) { return IsTerminal(j.state()); }, absl::Seconds(30));
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.status_reason();
  const std::vector<v1::Attempt> attempts = cluster_->Attempts(id);
  ASSERT_EQ(attempts.size(), 2u);
  // Newest first.
  EXPECT_EQ(attempts[1].failure_class(), "node_fault") << attempts[1].reason();
  EXPECT_TRUE(absl::StrContains(attempts[1].reason(), "worker w1")) << attempts[1].reason();
  EXPECT_FALSE(Alive(TrainerPid(id, 2)));
}

// A join token mints at most --max-worker-identities names: the third new name is refused
// naming the cap and the fix (the worker keeps retrying), a known name still joins, and
// once an admin forgets a name the waiting worker gets its place.
TEST_F(SessionReplayTest, AJoinTokenMintsAtMostItsCapOfWorkerNamesAndForgettingOneFreesAPlace) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator("10", {"--max-worker-identities", "2"}));
  StartWorker("a", "w1");
  ASSERT_TRUE(cluster_->WaitForWorkerState("w1", v1::WORKER_READY, absl::Seconds(20)));
  StartWorker("b", "w2");
  ASSERT_TRUE(cluster_->WaitForWorkerState("w2", v1::WORKER_READY, absl::Seconds(20)));
  StartWorker("c", "w3");
  ASSERT_TRUE(
      WaitForLog("c", "is new, and the join token has minted 2 worker names", absl::Seconds(20)));
  const std::string log = ReadFile(dir_.path() + "/c.log");
  EXPECT_TRUE(absl::StrContains(log, "RESOURCE_EXHAUSTED")) << log;
  EXPECT_TRUE(absl::StrContains(log, "--max-worker-identities 2")) << log;
  EXPECT_TRUE(absl::StrContains(log, "llamafleet-coordinator worker forget NAME")) << log;
  EXPECT_FALSE(fs::exists(dir_.path() + "/c/worker-credential"));
  // A name that joined before still may: the cap is on new names.
  processes_["b"]->Signal(SIGTERM);
  ASSERT_TRUE(processes_["b"]->Wait(absl::Seconds(20)).ok());
  StartWorker("b", "w2");
  ASSERT_TRUE(WaitForLog("b", "registered with", absl::Seconds(20)));

  processes_["a"]->Signal(SIGTERM);
  ASSERT_TRUE(processes_["a"]->Wait(absl::Seconds(20)).ok());
  absl::StatusOr<testing::CommandResult> forget =
      testing::RunCommand({testing::BinaryPath("llamafleet-coordinator"), "worker", "forget", "w1",
                           "--data-dir", dir_.path() + "/coord"});
  ASSERT_TRUE(forget.ok());
  EXPECT_EQ(forget->exit_code, 0) << forget->err;
  EXPECT_TRUE(cluster_->WaitForWorkerState("w3", v1::WORKER_READY, absl::Seconds(20)))
      << "the waiting worker joins";
}

}  // namespace
}  // namespace llamafleet
