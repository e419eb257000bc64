// Sick and lost nodes end to end, with real coordinator and worker processes on loopback
// and a /bin/sh stand-in for llamafleet-train whose ranks watch each other the way a real
// gang's collectives do: when a peer rank's process is gone, the survivors fail (UNAVAILABLE,
// "connection closed by peer"), as gloo and NCCL make them.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/cluster_client.h"
#include "tests/testing/e2e_cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using testing::BinaryPath;
using testing::SpecBuilder;
using testing::Subprocess;
using testing::TempDir;

// The fake trainer runs 200 steps; its ranks watch their gang's peers (fake_trainer.h).
class NodeHealthTest : public testing::E2eClusterTest {
 protected:
  void SetUp() override {
    E2eClusterTest::SetUp();
    peers_ = dir_.path() + "/peers";
    std::filesystem::create_directories(peers_);
  }

  void StartCoordinator(std::vector<std::string> flags = {}) {
    flags.insert(flags.end(), {"--heartbeat-timeout", "10", "--cancel-grace", "2"});
    E2eClusterTest::StartCoordinator(flags);
  }

  void StartWorker(const std::string& name, std::vector<std::string> flags = {}) {
    E2eClusterTest::StartWorker(
        name, {{"LLAMAFLEET_FAKE_STEPS", "200"}, {"LLAMAFLEET_FAKE_PEER_DIR", peers_}}, flags);
  }

  std::map<std::string, v1::WorkerInfo> Workers() { return client_->Workers(); }

  // Waits until `name` is shown in `state`; false after `timeout`.
  bool WaitForWorkerState(const std::string& name, v1::WorkerState state, absl::Duration timeout) {
    return client_->WaitForWorkerState(name, state, timeout);
  }

  std::string Submit(const std::string& extra_yaml = "") {
    absl::StatusOr<std::string> id = client_->Submit(
        SpecBuilder("e2e").Tokenizer("/t.model").TrainPath("/d.jsonl").Nodes(2).Yaml(extra_yaml).Build());
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  v1::Job Get(const std::string& id) { return client_->Get(id); }

  v1::Job WaitForStep(const std::string& id, int64_t step, absl::Duration timeout = absl::Seconds(30)) {
    auto done = [&](const v1::Job& j) { return j.state() == v1::RUNNING && j.latest_metrics().step() >= step; };
    v1::Job job = client_->WaitFor(id, done, timeout);
    if (!done(job)) {
      ADD_FAILURE() << "job " << id << " did not reach step " << step << ": "
                    << v1::JobState_Name(job.state()) << " " << job.status_reason();
    }
    return job;
  }

  // Waits until the job runs its attempt number `attempt`; the job as last read.
  v1::Job WaitForAttemptRunning(const std::string& id, int attempt, absl::Duration timeout) {
    return client_->WaitFor(
        id, [&](const v1::Job& j) { return j.attempts() == attempt && j.state() == v1::RUNNING; }, timeout);
  }

  // w1 and w2 (each with flags(name)) run a 2-node job that may not use a restart
  // (max_restarts 0, a 30 s backoff), past step 12, and w3 waits as a spare. Returns the
  // job and its node 1 worker, the victim ("" after a failure).
  std::pair<std::string, std::string> GangWithSpare(
      const std::function<std::vector<std::string>(const std::string&)>& flags = nullptr) {
    for (const char* w : {"w1", "w2"}) {
      StartWorker(w, flags ? flags(w) : std::vector<std::string>{});
      if (!WaitForWorkerState(w, v1::WORKER_READY, absl::Seconds(20))) return {"", ""};
    }
    const std::string id = Submit("run_policy: {max_restarts: 0, restart_backoff_seconds: 30}\n");
    const v1::Job running = WaitForStep(id, 12);
    StartWorker("w3");
    if (running.workers_size() != 2 || !WaitForWorkerState("w3", v1::WORKER_READY, absl::Seconds(20))) {
      ADD_FAILURE() << "no gang of two with a spare: " << running.DebugString();
      return {id, ""};
    }
    return {id, running.workers(1)};
  }

  std::vector<v1::Attempt> Attempts(const std::string& id) { return client_->Attempts(id); }
  std::vector<v1::JobEvent> Events(const std::string& id) { return client_->Events(id); }

  std::string peers_;
};

// One worker of a 2-node gang is killed: the survivor's ranks fail at once (their peer is
// gone), and that failure is the killed node's fault, said as such well before the
// heartbeat timeout (10 s); `workers` shows the killed worker DISCONNECTED at once.
TEST_F(NodeHealthTest, KilledWorkerIsBlamedAndShownDisconnectedAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  StartWorker("w1");
  StartWorker("w2");
  ASSERT_TRUE(WaitForWorkerState("w1", v1::WORKER_READY, absl::Seconds(20)));
  ASSERT_TRUE(WaitForWorkerState("w2", v1::WORKER_READY, absl::Seconds(20)));
  const std::string id = Submit("run_policy: {restart_backoff_seconds: 1}\n");
  const v1::Job running = WaitForStep(id, 12);
  ASSERT_EQ(running.workers_size(), 2);
  const std::string victim = running.workers(1), survivor = running.workers(0);
  const absl::Time killed = absl::Now();
  workers_[victim]->Signal(SIGKILL);
  EXPECT_TRUE(WaitForWorkerState(victim, v1::WORKER_DISCONNECTED, absl::Seconds(2)))
      << "the killed worker is not shown DISCONNECTED within 2 s";
  EXPECT_EQ(Workers()[survivor].state(), v1::WORKER_READY);

  // The first attempt ends as the victim's node fault, before the heartbeat timeout.
  v1::Attempt first;
  testing::WaitFor(
      [&] {
        std::vector<v1::Attempt> attempts = Attempts(id);
        if (attempts.empty() || attempts.back().state() == v1::ATTEMPT_ACTIVE) return false;
        first = attempts.back();
        return true;
      },
      killed + absl::Seconds(8) - absl::Now());
  ASSERT_EQ(first.attempt(), 1) << "attempt 1 did not end within 8 s of the kill";
  EXPECT_EQ(first.failure_class(), "node_fault") << first.reason();
  EXPECT_TRUE(absl::StartsWith(first.reason(), absl::StrCat("worker ", victim, " lost (its session ended)")))
      << first.reason();
  // The job is excluded from the victim: the restart runs on the survivor and a spare.
  StartWorker("w3");
  const v1::Job job = WaitForAttemptRunning(id, 2, absl::Seconds(40));
  ASSERT_EQ(job.attempts(), 2) << v1::JobState_Name(job.state()) << " " << job.status_reason();
  for (const std::string& w : job.workers()) EXPECT_NE(w, victim);
  bool excluded = false;
  for (const v1::JobEvent& e : Events(id)) {
    excluded |= absl::StrContains(e.reason(), absl::StrCat("excluding worker ", victim));
    EXPECT_FALSE(absl::StrContains(e.reason(), absl::StrCat("excluding worker ", survivor))) << e.reason();
  }
  EXPECT_TRUE(excluded);
  // And once the heartbeat timeout passes it is LOST.
  EXPECT_TRUE(WaitForWorkerState(victim, v1::WORKER_LOST, absl::Seconds(15)));
}

// An operator drains a worker of a running gang: `workers` shows it DRAINING with the
// reason at once, the gang restarts on the spare from its checkpoint without using a
// restart (max_restarts is 0: a counted restart would fail the job), and no later
// placement lands there until it is undrained.
TEST_F(NodeHealthTest, OperatorDrainMovesTheJobToTheSpareWithoutUsingARestart) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const auto [id, victim] = GangWithSpare();
  ASSERT_FALSE(victim.empty());
  absl::StatusOr<testing::CommandResult> drained =
      testing::RunCommand({BinaryPath("llamafleet-coordinator"), "worker", "drain", victim, "--reason",
                           "bad DIMM", "--data-dir", dir_.path() + "/coord"});
  ASSERT_TRUE(drained.ok()) << drained.status();
  ASSERT_EQ(drained->exit_code, 0) << drained->err;
  ASSERT_TRUE(WaitForWorkerState(victim, v1::WORKER_DRAINING, absl::Seconds(5)));
  const v1::WorkerInfo info = Workers()[victim];
  EXPECT_EQ(info.drain().reason(), "bad DIMM");
  EXPECT_EQ(info.drain().source(), "operator");
  EXPECT_TRUE(info.drain().has_since());
  // `llamafleet workers` says so, with the reason.
  absl::StatusOr<testing::CommandResult> table =
      testing::RunCommand({BinaryPath("llamafleet"), "--coordinator", address_, "workers"});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(absl::StrContains(table->out, "DRAINING (operator")) << table->out << table->err;
  EXPECT_TRUE(absl::StrContains(table->out, "bad DIMM")) << table->out;

  // Restarted at once (the 30 s backoff is not applied) on the others, no restart used.
  const v1::Job job = WaitForAttemptRunning(id, 2, absl::Seconds(20));
  ASSERT_EQ(job.attempts(), 2) << v1::JobState_Name(job.state()) << " " << job.status_reason();
  EXPECT_EQ(job.state(), v1::RUNNING) << job.status_reason();
  EXPECT_EQ(job.restarts(), 0);
  for (const std::string& w : job.workers()) EXPECT_NE(w, victim);
  std::vector<v1::Attempt> attempts = Attempts(id);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[1].failure_class(), "node_fault");
  EXPECT_TRUE(absl::StrContains(attempts[1].reason(), absl::StrCat("worker ", victim, " drained (operator): bad DIMM")))
      << attempts[1].reason();
  EXPECT_NE(attempts[0].resume_from(), "") << "the restart resumes from the checkpoint";

  // Undrained: ready again.
  absl::StatusOr<testing::CommandResult> undrained = testing::RunCommand(
      {BinaryPath("llamafleet-coordinator"), "worker", "undrain", victim, "--data-dir", dir_.path() + "/coord"});
  ASSERT_TRUE(undrained.ok());
  EXPECT_EQ(undrained->exit_code, 0) << undrained->err;
  EXPECT_TRUE(WaitForWorkerState(victim, v1::WORKER_READY, absl::Seconds(5)));
  EXPECT_FALSE(Workers()[victim].has_drain());
  // Errors name what is wrong.
  absl::StatusOr<testing::CommandResult> unknown = testing::RunCommand(
      {BinaryPath("llamafleet-coordinator"), "worker", "drain", "nosuch", "--reason", "x", "--data-dir",
       dir_.path() + "/coord"});
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unknown->err, "no worker named nosuch")) << unknown->err;
}

// A worker whose pre-flight fails is drained with the pre-flight's reason before anything
// is placed there; the job runs on the spare without using a restart; once the fault is
// gone a passing pre-flight after the cool-off brings the worker back.
TEST_F(NodeHealthTest, FailedPreflightDrainsTheWorkerAndTheJobRunsOnTheSpare) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator({"--drain-cooloff", "1"}));
  const std::string knob = dir_.path() + "/w2-is-sick";
  std::ofstream(knob) << "x";
  StartWorker("w1");
  StartWorker("w2", {"--preflight-fail-for-test", knob, "--preflight-interval", "0.5"});
  StartWorker("w3");
  ASSERT_TRUE(WaitForWorkerState("w2", v1::WORKER_DRAINING, absl::Seconds(20)));
  ASSERT_TRUE(WaitForWorkerState("w1", v1::WORKER_READY, absl::Seconds(20)));
  ASSERT_TRUE(WaitForWorkerState("w3", v1::WORKER_READY, absl::Seconds(20)));
  auto ws = Workers();
  EXPECT_EQ(ws["w2"].drain().source(), "preflight");
  EXPECT_TRUE(absl::StrContains(ws["w2"].drain().reason(), "pre-flight failed: injected")) << ws["w2"].drain().reason();
  EXPECT_FALSE(ws["w2"].preflight().passed());
  // A healthy CPU worker's pre-flight: GEMM and loopback passed, the GPU probe skipped.
  ASSERT_TRUE(ws["w1"].has_preflight());
  EXPECT_TRUE(ws["w1"].preflight().passed());
  ASSERT_GE(ws["w1"].preflight().checks_size(), 3);
  EXPECT_EQ(ws["w1"].preflight().checks(2).state(), v1::PreflightCheck::SKIPPED);
  EXPECT_EQ(ws["w1"].preflight().checks(2).detail(), "no GPU");

  const std::string id = Submit();
  const v1::Job job = WaitForStep(id, 3);
  EXPECT_EQ(job.attempts(), 1);
  EXPECT_EQ(job.restarts(), 0);
  for (const std::string& w : job.workers()) EXPECT_NE(w, "w2");

  // The fault is gone: the next pre-flight (every 0.5 s) passes after the 1 s cool-off.
  std::filesystem::remove(knob);
  EXPECT_TRUE(WaitForWorkerState("w2", v1::WORKER_READY, absl::Seconds(10)));
  EXPECT_FALSE(Workers()["w2"].has_drain());
}


// A worker's GPU health samples while its job runs (CPU workers with the test-only fake):
// a throttled GPU is shown but keeps the worker; a fatal XID drains it at once (source
// gpu-health, the reason naming the GPU and the XID), the gang restarts on the spare from
// its checkpoint without using a restart (max_restarts 0), and once the cool-off has
// passed a passing pre-flight brings the worker back.
TEST_F(NodeHealthTest, FatalGpuEventDrainsTheWorkerAndTheJobMovesWithoutUsingARestart) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator({"--drain-cooloff", "2"}));
  auto fake = [&](const std::string& w) { return dir_.path() + "/" + w + "-gpu"; };
  const auto [id, victim] = GangWithSpare([&](const std::string& w) {
    return std::vector<std::string>{"--gpu-health-fake-for-test", fake(w), "--preflight-interval", "0.5"};
  });
  ASSERT_FALSE(victim.empty());
  EXPECT_EQ(Workers()["w3"].gpus_size(), 0) << "a CPU worker without the fake reports no GPU samples";

  // Throttled: shown (its sample, the workers table), not drained.
  std::ofstream(fake(victim)) << "throttle hw_thermal gpu 0\n";
  testing::WaitFor([&] { return Workers()[victim].gpus_size() != 0; }, absl::Seconds(5));
  ASSERT_EQ(Workers()[victim].gpus_size(), 1);
  EXPECT_EQ(Workers()[victim].gpus(0).clock_throttle_reasons(), 0x40u);
  absl::StatusOr<testing::CommandResult> table =
      testing::RunCommand({BinaryPath("llamafleet"), "--coordinator", address_, "workers"});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(absl::StrContains(table->out, "READY (GPU 0 throttled: hw_thermal)")) << table->out << table->err;
  absl::SleepFor(absl::Seconds(1));  // time for a wrong drain to show: none may
  EXPECT_EQ(Workers()[victim].state(), v1::WORKER_READY);
  EXPECT_EQ(Get(id).attempts(), 1);

  // A fatal XID: drained at once, the job moves to the spare.
  std::ofstream(fake(victim)) << "throttle hw_thermal gpu 0\nxid 79 gpu 0\n";
  ASSERT_TRUE(WaitForWorkerState(victim, v1::WORKER_DRAINING, absl::Seconds(5)));
  const v1::WorkerInfo info = Workers()[victim];
  EXPECT_EQ(info.drain().source(), "gpu-health");
  EXPECT_EQ(info.drain().reason(), "GPU 0: XID 79 (GPU has fallen off the bus)");
  const v1::Job job = WaitForAttemptRunning(id, 2, absl::Seconds(20));
  ASSERT_EQ(job.attempts(), 2) << v1::JobState_Name(job.state()) << " " << job.status_reason();
  EXPECT_EQ(job.restarts(), 0);
  for (const std::string& w : job.workers()) EXPECT_NE(w, victim);
  std::vector<v1::Attempt> attempts = Attempts(id);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[1].failure_class(), "node_fault");
  EXPECT_TRUE(absl::StrContains(attempts[1].reason(),
                                absl::StrCat("worker ", victim, " drained (gpu-health): GPU 0: XID 79")))
      << attempts[1].reason();
  EXPECT_NE(attempts[0].resume_from(), "") << "the restart resumes from the checkpoint";

  // The XID stays counted (no new event); a passing pre-flight after the 2 s cool-off
  // undrains the worker.
  EXPECT_TRUE(WaitForWorkerState(victim, v1::WORKER_READY, absl::Seconds(10)));
  EXPECT_FALSE(Workers()[victim].has_drain());
}

}  // namespace
}  // namespace llamafleet
