// The cluster end to end with real processes on loopback: a coordinator, CPU workers,
// and a /bin/sh stand-in for llamafleet-train that behaves like it at the interface the
// coordinator and workers see (rank environment, JSON metrics and checkpoint events,
// --resume, SIGTERM). What is tested is scheduling, supervision and failure handling.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/cluster_client.h"
#include "tests/testing/e2e_cluster.h"
#include "tests/testing/fake_trainer.h"
#include "tests/testing/process.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using testing::BinaryPath;
using testing::SpecBuilder;
using testing::RunCommand;
using testing::Subprocess;
using testing::TempDir;

// Live trainer ranks started from `trainer`.
int CountProcesses(const std::string& trainer) { return testing::CountTrainerProcesses(trainer); }

class ClusterTest : public testing::E2eClusterTest {
 protected:
  void SetUp() override {
    E2eClusterTest::SetUp();
    StartCoordinator();
  }

  // `listen`: the first start picks a free port; a restart reuses it (workers redial it).
  void StartCoordinator(const std::string& listen = "127.0.0.1:0") {
    E2eClusterTest::StartCoordinator({"--heartbeat-timeout", "3", "--cancel-grace", "2"}, listen);
  }

  void StartWorker(const std::string& name, std::map<std::string, std::string> env = {}) {
    if (env.empty()) env = worker_env_;
    E2eClusterTest::StartWorker(name, env);
  }

  void WaitForWorkers(size_t n) {
    if (!testing::WaitFor([&] { return client_->ReadyWorkers() >= n; }, absl::Seconds(20))) {
      FAIL() << "workers did not register";
    }
  }

  std::string Submit(const std::string& extra_yaml, int nodes = 2) {
    absl::StatusOr<std::string> id = client_->Submit(
        SpecBuilder("e2e").Tokenizer("/t.model").TrainPath("/d.jsonl").Nodes(nodes).Yaml(extra_yaml).Build());
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  v1::Job Get(const std::string& id) { return client_->Get(id); }

  v1::Job WaitFor(const std::string& id, v1::JobState state, absl::Duration timeout) {
    v1::Job job = client_->WaitFor(id, [&](const v1::Job& j) { return j.state() == state; }, timeout);
    if (job.state() != state) {
      ADD_FAILURE() << "job " << id << " is " << v1::JobState_Name(job.state()) << " ("
                    << job.status_reason() << "), not " << v1::JobState_Name(state);
    }
    return job;
  }

  int64_t WaitForStep(const std::string& id, int64_t step) {
    v1::Job job = client_->WaitFor(
        id, [&](const v1::Job& j) { return j.latest_metrics().step() >= step; }, absl::Seconds(30));
    if (job.latest_metrics().step() >= step) return job.latest_metrics().step();
    ADD_FAILURE() << "job " << id << " did not reach step " << step;
    return -1;
  }

  std::vector<v1::JobEvent> Events(const std::string& id) { return client_->Events(id); }
  std::vector<v1::Checkpoint> Checkpoints(const std::string& id) { return client_->Checkpoints(id); }
  std::vector<v1::Attempt> Attempts(const std::string& id) { return client_->Attempts(id); }

  std::string RankLog(const std::string& id, int attempt, int rank) {
    std::ifstream in(absl::StrCat(dir_.path(), "/coord/logs/", id, "/attempt-", attempt, "/rank-",
                                  rank, ".log"));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  void TearDown() override {
    E2eClusterTest::TearDown();
    EXPECT_EQ(CountProcesses(trainer_), 0) << "a trainer outlived its worker";
  }

  std::map<std::string, std::string> worker_env_;
};

TEST_F(ClusterTest, TwoNodeJobSucceedsWithCheckpointsAndMetricsRecorded) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  const std::string id = Submit("");
  v1::Job job = WaitFor(id, v1::SUCCEEDED, absl::Seconds(30));
  EXPECT_EQ(job.attempts(), 1);
  EXPECT_EQ(job.latest_metrics().step(), 30);
  EXPECT_EQ(job.latest_metrics().total_steps(), 30);
  ASSERT_EQ(job.workers_size(), 2);
  std::vector<v1::Checkpoint> ckpts = Checkpoints(id);
  ASSERT_GE(ckpts.size(), 2u);
  EXPECT_EQ(ckpts[0].step(), 30);  // newest first
  // Both ranks ran, with the gang's environment.
  EXPECT_NE(RankLog(id, 1, 0).find("rank 0/2 master 127.0.0.1:"), std::string::npos);
  EXPECT_NE(RankLog(id, 1, 1).find("rank 1/2 master 127.0.0.1:"), std::string::npos);
  std::vector<std::string> types;
  for (const v1::JobEvent& e : Events(id)) types.push_back(e.type());
  EXPECT_EQ(types, (std::vector<std::string>{"submitted", "scheduled", "running", "succeeded"}));
  std::vector<v1::Attempt> attempts = Attempts(id);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].attempt(), 1);
  EXPECT_EQ(attempts[0].state(), v1::ATTEMPT_SUCCEEDED);
  EXPECT_EQ(attempts[0].failure_class(), "");
  EXPECT_TRUE(attempts[0].has_end_time());
  EXPECT_EQ(attempts[0].resume_from(), "");
  ASSERT_EQ(attempts[0].tasks_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(attempts[0].tasks(i).node_rank(), i);
    EXPECT_EQ(attempts[0].tasks(i).worker(), job.workers(i));
    EXPECT_EQ(attempts[0].tasks(i).ranks(), 1);
    EXPECT_EQ(attempts[0].tasks(i).state(), v1::TASK_SUCCEEDED);
  }
}

TEST_F(ClusterTest, CpuRanksGetTheWorkersOwnCoresOrItsOmpNumThreads) {
  // w1 may run on one CPU (its affinity mask, inherited from the thread that forks it):
  // its rank gets one thread however many cores the machine has. w2's own
  // OMP_NUM_THREADS reaches its rank as it is.
  unsetenv("OMP_NUM_THREADS");
  cpu_set_t saved, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  StartWorker("w1");
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  StartWorker("w2", {{"OMP_NUM_THREADS", "3"}});
  WaitForWorkers(2);
  const std::string id = Submit("");
  v1::Job job = WaitFor(id, v1::SUCCEEDED, absl::Seconds(30));
  ASSERT_EQ(job.workers_size(), 2);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string expected = job.workers(rank) == "w1" ? "threads=1\n" : "threads=3\n";
    EXPECT_NE(RankLog(id, 1, rank).find(expected), std::string::npos) << job.workers(rank) << ": " << RankLog(id, 1, rank);
  }
}

TEST_F(ClusterTest, WorkerKilledMidJobRestartsTheGangFromTheNewestCheckpoint) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  // Long enough that the kill after step 12 lands mid-run: the tiny model trains ~100
  // steps a second once started, and start-up is most of a short job's time.
  const std::string id =
      Submit("training: {max_steps: 300}\nrun_policy: {restart_backoff_seconds: 1}\n");
  WaitFor(id, v1::RUNNING, absl::Seconds(20));
  WaitForStep(id, 12);  // a checkpoint at step 10 exists
  const std::string victim = Get(id).workers(1);
  workers_[victim]->Signal(SIGKILL);
  (void)workers_[victim]->Wait(absl::Seconds(10));
  workers_.erase(victim);
  StartWorker("w3");  // the lost node is excluded from the job's next placement
  v1::Job job = WaitFor(id, v1::SUCCEEDED, absl::Seconds(60));
  EXPECT_EQ(job.attempts(), 2);
  EXPECT_EQ(job.restarts(), 1);
  for (const std::string& w : job.workers()) EXPECT_NE(w, victim);
  const std::string log = RankLog(id, 2, 0);
  EXPECT_NE(log.find("resume=["), std::string::npos);
  EXPECT_EQ(log.find("resume=[]"), std::string::npos) << "attempt 2 did not resume: " << log;
  std::vector<std::string> types;
  for (const v1::JobEvent& e : Events(id)) types.push_back(e.type());
  EXPECT_NE(std::find(types.begin(), types.end(), "restarting"), types.end());
  bool node_fault = false;
  for (const v1::JobEvent& e : Events(id)) {
    node_fault |= e.reason().find(absl::StrCat("worker ", victim, " lost")) != std::string::npos;
  }
  EXPECT_TRUE(node_fault);
  // The history shows both attempts, newest first: the success on the new gang, and the
  // node fault with the lost worker among its tasks.
  std::vector<v1::Attempt> attempts = Attempts(id);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].attempt(), 2);
  EXPECT_EQ(attempts[0].state(), v1::ATTEMPT_SUCCEEDED);
  EXPECT_EQ(attempts[0].failure_class(), "");
  EXPECT_NE(attempts[0].resume_from(), "");
  ASSERT_EQ(attempts[0].tasks_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(attempts[0].tasks(i).worker(), job.workers(i));
    EXPECT_EQ(attempts[0].tasks(i).state(), v1::TASK_SUCCEEDED);
  }
  EXPECT_EQ(attempts[1].attempt(), 1);
  EXPECT_EQ(attempts[1].state(), v1::ATTEMPT_FAILED);
  EXPECT_EQ(attempts[1].failure_class(), "node_fault");
  EXPECT_NE(attempts[1].reason().find(absl::StrCat("worker ", victim, " lost")), std::string::npos)
      << attempts[1].reason();
  EXPECT_EQ(attempts[1].resume_from(), "");
  EXPECT_TRUE(attempts[1].has_end_time());
  EXPECT_LE(google::protobuf::util::TimeUtil::TimestampToMicroseconds(attempts[1].end_time()),
            google::protobuf::util::TimeUtil::TimestampToMicroseconds(attempts[0].start_time()));
  ASSERT_EQ(attempts[1].tasks_size(), 2);
  EXPECT_EQ(attempts[1].tasks(1).node_rank(), 1);
  EXPECT_EQ(attempts[1].tasks(1).worker(), victim);
  // The survivor either finished its ranks or was stopped with the gang (a race: the fake
  // trainer is short); the lost worker never reported a successful end.
  const v1::TaskState survivor = attempts[1].tasks(0).state();
  EXPECT_TRUE(survivor == v1::TASK_SUCCEEDED || survivor == v1::TASK_KILLED)
      << v1::TaskState_Name(survivor) << ": " << attempts[1].tasks(0).message();
  // The lost worker's task is recorded as failed with it, not left "running".
  EXPECT_EQ(attempts[1].tasks(1).state(), v1::TASK_FAILED) << v1::TaskState_Name(attempts[1].tasks(1).state());
  EXPECT_NE(attempts[1].tasks(1).message().find(absl::StrCat("worker ", victim, " lost")),
            std::string::npos)
      << attempts[1].tasks(1).message();
}

TEST_F(ClusterTest, CoordinatorKilledMidJobAndRestartedFinishesTheJob) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  const std::string id = Submit("training: {max_steps: 40}\n");
  WaitForStep(id, 5);
  coordinator_->Signal(SIGKILL);
  (void)coordinator_->Wait(absl::Seconds(10));
  StartCoordinator(address_);  // same data dir and port; workers reconnect on their own
  v1::Job job = WaitFor(id, v1::SUCCEEDED, absl::Seconds(60));
  EXPECT_EQ(job.attempts(), 1) << "the running attempt was kept, not restarted";
  int scheduled = 0;
  for (const v1::JobEvent& e : Events(id)) scheduled += e.type() == "scheduled";
  EXPECT_EQ(scheduled, 1);
}

TEST_F(ClusterTest, CancelMidRunLeavesNoTrainerProcess) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  const std::string id = Submit("training: {max_steps: 600}\n");
  WaitForStep(id, 3);
  EXPECT_GE(CountProcesses(trainer_), 2);  // (a rank forking its sleep may count twice)
  absl::StatusOr<v1::Job> cancelled = client_->Cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  testing::WaitFor([&] { return CountProcesses(trainer_) == 0; }, absl::Seconds(10));  // grace 2 s
  EXPECT_EQ(CountProcesses(trainer_), 0);
  EXPECT_EQ(Get(id).state(), v1::CANCELLED);
}

TEST_F(ClusterTest, JobLargerThanTheClusterStaysQueuedWithItsReason) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  const std::string id = Submit("", /*nodes=*/5);
  v1::Job job = client_->WaitFor(
      id, [](const v1::Job& j) { return j.pending().code() == "LARGER_THAN_CLUSTER"; }, absl::Seconds(10));
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.pending().code(), "LARGER_THAN_CLUSTER") << job.pending().message();
  EXPECT_NE(job.pending().message().find("5"), std::string::npos) << job.pending().message();
  EXPECT_EQ(job.pending().queue_position(), 1);
}

TEST_F(ClusterTest, StalledRankIsDetectedByTheStallTimeout) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  const std::string id =
      Submit("training: {max_steps: 600}\nrun_policy: {stall_timeout_seconds: 2, max_restarts: 0}\n");
  WaitForStep(id, 3);
  // Freeze every trainer process (rank 0 stops reporting progress).
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int pid;
    if (cmdline.find(trainer_ + std::string("\0train", 6)) != std::string::npos &&
        absl::SimpleAtoi(entry.path().filename().string(), &pid)) {
      kill(pid, SIGSTOP);
    }
  }
  v1::Job job = WaitFor(id, v1::FAILED, absl::Seconds(20));
  EXPECT_NE(job.status_reason().find("stalled"), std::string::npos) << job.status_reason();
}

TEST_F(ClusterTest, HigherPriorityJobPreemptsWithCheckpointAndVictimRequeues) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  const std::string low = Submit("priority: 0\ntraining: {max_steps: 600}\n");
  WaitForStep(low, 3);
  const std::string high = Submit("priority: 100\ntraining: {max_steps: 10}\n");
  WaitFor(high, v1::SUCCEEDED, absl::Seconds(40));
  v1::Job victim = Get(low);
  EXPECT_EQ(victim.restarts(), 0) << "preemption must not use the restart budget";
  std::vector<std::string> types;
  for (const v1::JobEvent& e : Events(low)) types.push_back(e.type());
  EXPECT_NE(std::find(types.begin(), types.end(), "preempting"), types.end());
  EXPECT_NE(std::find(types.begin(), types.end(), "requeued"), types.end());
  // It checkpointed on SIGTERM, and its next attempt resumes from that checkpoint.
  WaitFor(low, v1::RUNNING, absl::Seconds(30));
  EXPECT_EQ(Get(low).attempts(), 2);
  EXPECT_FALSE(Checkpoints(low).empty());
}

TEST_F(ClusterTest, BadDataFailsAtOnceWithoutRestarts) {
  StartWorker("w1", {{"LLAMAFLEET_FAKE_FAIL", "permanent"}});
  StartWorker("w2", {{"LLAMAFLEET_FAKE_FAIL", "permanent"}});
  WaitForWorkers(2);
  const std::string id = Submit("run_policy: {max_restarts: 3, restart_backoff_seconds: 0}\n");
  v1::Job job = WaitFor(id, v1::FAILED, absl::Seconds(20));
  EXPECT_EQ(job.attempts(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.status_reason().find("INVALID_ARGUMENT: data.train_path: no such file"),
            std::string::npos)
      << job.status_reason();
}

TEST_F(ClusterTest, ActiveDeadlineFailsTheJob) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  const std::string id =
      Submit("training: {max_steps: 600}\nrun_policy: {active_deadline_seconds: 1}\n");
  v1::Job job = WaitFor(id, v1::FAILED, absl::Seconds(20));
  EXPECT_NE(job.status_reason().find("active_deadline_seconds (1) exceeded"), std::string::npos)
      << job.status_reason();
}

TEST_F(ClusterTest, RetentionKeepsTheNewestCheckpointsFilesFirst) {
  StartWorker("w1");
  StartWorker("w2");
  WaitForWorkers(2);
  const std::string id = Submit("checkpoint: {keep_last: 1}\n");
  WaitFor(id, v1::SUCCEEDED, absl::Seconds(30));
  std::vector<v1::Checkpoint> ckpts;
  testing::WaitFor([&] { return (ckpts = Checkpoints(id)).size() <= 1; }, absl::Seconds(10));
  ASSERT_EQ(ckpts.size(), 1u);
  EXPECT_EQ(ckpts[0].step(), 30);
  EXPECT_TRUE(std::filesystem::exists(ckpts[0].path()));
  const std::string older = ckpts[0].path().substr(0, ckpts[0].path().rfind('-') + 1) + "10";
  EXPECT_FALSE(std::filesystem::exists(older)) << older;
}

TEST_F(ClusterTest, WorkerWithABadJoinTokenIsRefused) {
  absl::StatusOr<testing::CommandResult> r = RunCommand(
      {BinaryPath("llamafleet-worker"), "--coordinator", address_, "--join-token", "wrong",
       "--data-dir", dir_.path() + "/bad", "--cpu-ranks", "1", "--trainer", trainer_,
       "--run-as", std::to_string(geteuid())});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("bad join token"), std::string::npos) << r->err;
}

}  // namespace
}  // namespace llamafleet
