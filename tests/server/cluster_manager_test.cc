// ClusterManager with a real SQLite store, a fake clock and fake worker links: the
// stranded restart (a worker re-registers without the dead attempt's task), a silent
// worker, slot accounting, report binding (only the assigned worker's reports count),
// checkpoint confinement and retention, resume candidates, and an elastic gang growing
// back at a checkpoint.
#include "server/cluster/cluster_manager.h"
#include "server/cluster/node_loss.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "jobspec/jobspec.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;

// The coordinator's end of a session, recording what it was told.
class FakeLink : public WorkerLink {
 public:
  void Send(v1::CoordinatorMessage message) override {
    absl::MutexLock lock(&mu_);
    sent_.push_back(std::move(message));
  }
  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    closed_ = status;
  }
  std::vector<v1::TaskSpec> Assignments() {
    absl::MutexLock lock(&mu_);
    std::vector<v1::TaskSpec> out;
    for (const auto& m : sent_) {
      if (m.has_assign()) out.push_back(m.assign().task());
    }
    return out;
  }
  std::vector<std::string> Cancels() {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& m : sent_) {
      if (m.has_cancel()) out.push_back(m.cancel().task_id());
    }
    return out;
  }
  std::vector<std::string> Kills() {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& m : sent_) {
      if (m.has_welcome()) out.assign(m.welcome().kill_task_ids().begin(), m.welcome().kill_task_ids().end());
    }
    return out;
  }
  std::optional<absl::Status> closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::CoordinatorMessage> sent_;
  std::optional<absl::Status> closed_;
};

class ClusterManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobStoreOptions so;
    so.path = dir_.path() + "/coordinator.db";
    so.synchronous_full = false;
    so.clock = &clock_;
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(so);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    ClusterOptions o;
    o.join_token = "t";
    o.clock = &clock_;
    o.heartbeat_timeout = absl::Seconds(10);
    o.missing_task_grace = absl::Seconds(3);
    o.cancel_grace = absl::Seconds(15);
    o.stop_report_slack = absl::Seconds(10);
    o.tick = absl::Milliseconds(20);
    o.checkpoint_root = dir_.path() + "/checkpoints";
    o.on_attempt_released = [this](int64_t job, int attempt) {
      absl::MutexLock lock(&released_mu_);
      released_.push_back({job, attempt});
    };
    absl::StatusOr<std::unique_ptr<ClusterManager>> m = ClusterManager::Start(store_.get(), o);
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = std::move(*m);
  }

  void TearDown() override {
    manager_.reset();
    store_.reset();
  }

  std::shared_ptr<FakeLink> Hello(const std::string& name, std::vector<std::string> running = {}) {
    auto link = std::make_shared<FakeLink>();
    v1::Hello h;
    h.set_worker_name(name);
    h.set_join_token("t");
    h.mutable_inventory()->set_cpu_ranks(1);
    h.mutable_inventory()->set_address("127.0.0.1");
    for (const std::string& t : running) h.add_running_task_ids(t);
    manager_->OnHello(link, h);
    manager_->Sync();
    return link;
  }

  int64_t Submit(const std::string& extra = "",
                 const std::string& resources = "{nodes: 2, gpus_per_node: 1}") {
    absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(absl::StrCat(
        "name: t\nmodel: {preset: tiny}\ndata: {train_path: /data/train.jsonl}\n",
        "resources: ", resources, "\n",
        "run_policy: {max_restarts: 3, restart_backoff_seconds: 1}\n", extra));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    v1::JobSpec spec = (*parsed)[0].spec;
    ApplyDefaults(&spec);
    absl::StatusOr<std::vector<SubmitJobResult>> r =
        store_->SubmitJobsAndWait({SubmitJobInput{spec, "alice", ""}});
    EXPECT_TRUE(r.ok()) << r.status();
    return std::stoll((*r)[0].job.id());
  }

  void Send(const std::string& worker, v1::WorkerMessage m) {
    manager_->OnWorkerMessage(worker, std::move(m));
    manager_->Sync();
  }
  void Report(const std::string& worker, const std::string& task, v1::TaskState state,
              int exit_code = 0) {
    v1::WorkerMessage m;
    m.mutable_task_status()->set_task_id(task);
    m.mutable_task_status()->set_state(state);
    if (state == v1::TASK_FAILED || state == v1::TASK_SUCCEEDED) {
      v1::RankExit* e = m.mutable_task_status()->add_exits();
      e->set_exit_code(exit_code);
      e->set_last_error("RuntimeError: gloo reduce-scatter: Connection reset by peer");
    }
    Send(worker, std::move(m));
  }
  void Heartbeat(const std::string& worker) {
    v1::WorkerMessage m;
    m.mutable_heartbeat();
    Send(worker, std::move(m));
  }
  // Moves the clock in steps shorter than the heartbeat timeout, the workers heartbeating
  // between steps (the loop's own ticks see every step).
  void AdvanceWithHeartbeats(absl::Duration d, const std::vector<std::string>& workers) {
    while (d > absl::ZeroDuration()) {
      const absl::Duration step = std::min(d, absl::Seconds(4));
      for (const std::string& w : workers) Heartbeat(w);
      clock_.Advance(step);
      for (const std::string& w : workers) Heartbeat(w);
      d -= step;
    }
  }
  void Checkpoint(const std::string& worker, const std::string& task, int64_t step,
                  const std::string& path) {
    v1::WorkerMessage m;
    m.mutable_checkpoint()->set_task_id(task);
    m.mutable_checkpoint()->set_step(step);
    m.mutable_checkpoint()->set_path(path);
    m.mutable_checkpoint()->set_manifest_sha256(absl::StrCat("sha-", step));
    Send(worker, std::move(m));
  }

  // Two workers, w0 and w1, and a two-node job whose tasks both report RUNNING.
  struct RunningGang {
    std::shared_ptr<FakeLink> w0, w1;
    int64_t id = 0;
    std::string t0, t1;
  };
  void StartRunningGang(RunningGang* g) {
    g->w0 = Hello("w0");
    g->w1 = Hello("w1");
    g->id = Submit();
    g->t0 = absl::StrCat(g->id, "-1-0");
    g->t1 = absl::StrCat(g->id, "-1-1");
    ASSERT_TRUE(Eventually([&] { return !g->w0->Assignments().empty() && !g->w1->Assignments().empty(); }));
    Report("w0", g->t0, v1::TASK_RUNNING);
    Report("w1", g->t1, v1::TASK_RUNNING);
    ASSERT_TRUE(Eventually([&] { return Job(g->id).state() == v1::RUNNING; }));
  }

  // Waits (for the store's writer and the loop, not for time to pass) until `done`.
  bool Eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 500; ++i) {
      manager_->TickNow();
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  v1::Job Job(int64_t id) { return *store_->GetJob(id); }
  int Allocated(const std::string& worker) {
    for (const v1::WorkerInfo& w : manager_->Workers()) {
      if (w.name() == worker) return w.gpus_allocated();
    }
    return -1;
  }
  std::vector<v1::Checkpoint> Checkpoints(int64_t job) { return *ListCheckpoints(*store_, job); }
  // A checkpoint in a default dir (<root>/<job id>), the dir marked as the trainer marks it.
  void MakeCheckpoint(const std::string& path) {
    fs::create_directories(path);
    std::ofstream(path + "/manifest.json") << "{}";
    const fs::path dir = fs::path(path).parent_path();
    std::ofstream(dir / ".llamafleet-job") << dir.filename().string() << "\n";
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<ClusterManager> manager_;
  absl::Mutex released_mu_;
  std::vector<std::pair<int64_t, int>> released_;
};

// The stranded restart, with the real manager and store: w1 is killed after the
// first checkpoint and comes back at once under the same name without the task; the
// dead attempt's task must not hold w1 forever, and the restart resumes from the
// recorded checkpoint on both workers.
TEST_F(ClusterManagerTest, WorkerRestartedUnderTheSameNameDoesNotStrandTheRestart) {
  RunningGang g;
  ASSERT_NO_FATAL_FAILURE(StartRunningGang(&g));
  const std::shared_ptr<FakeLink> w0 = g.w0, w1 = g.w1;
  const int64_t id = g.id;
  const std::string t0 = g.t0, t1 = g.t1;
  const std::string ckpt_dir = dir_.path() + "/checkpoints/" + std::to_string(id);
  MakeCheckpoint(ckpt_dir + "/step-5");
  Checkpoint("w0", t0, 5, ckpt_dir + "/step-5");
  ASSERT_TRUE(Eventually([&] { return Checkpoints(id).size() == 1; }));

  // kill -9 w1, restarted at once: its new hello arrives while the old session still
  // looks alive, and lists no task. Node 0's rank then fails (its peer reset).
  std::shared_ptr<FakeLink> w1b = Hello("w1");
  ASSERT_TRUE(w1->closed().has_value()) << "the replaced session is closed";
  Report("w0", t0, v1::TASK_FAILED, 1);
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::QUEUED; }));
  EXPECT_EQ(Allocated("w0"), 0) << "a failed task holds no slot";

  // Within the grace the task may still report; past it, it is released.
  clock_.Advance(absl::Seconds(2));
  manager_->TickNow();
  EXPECT_EQ(Allocated("w1"), 1);
  clock_.Advance(absl::Seconds(2));  // 4 s > missing_task_grace; and past the 1 s backoff
  ASSERT_TRUE(Eventually([&] { return w0->Assignments().size() == 2 && w1b->Assignments().size() == 1; }))
      << v1::JobState_Name(Job(id).state()) << ": " << Job(id).status_reason();
  {
    absl::MutexLock lock(&released_mu_);
    ASSERT_EQ(released_.size(), 1u);
    EXPECT_EQ(released_[0], std::make_pair(id, 1));
  }
  const v1::TaskSpec next = w1b->Assignments()[0];
  EXPECT_EQ(next.attempt(), 2);
  EXPECT_EQ(next.resume_from(), ckpt_dir + "/step-5");
  ASSERT_EQ(next.resume_candidates_size(), 1);
  EXPECT_EQ(next.resume_candidates(0).path(), ckpt_dir + "/step-5");
  EXPECT_EQ(next.resume_candidates(0).step(), 5);
  EXPECT_EQ(next.resume_candidates(0).manifest_sha256(), "sha-5");
  EXPECT_EQ(Job(id).restarts(), 1);

  // The second attempt completes.
  const std::string u0 = absl::StrCat(id, "-2-0"), u1 = absl::StrCat(id, "-2-1");
  Report("w0", u0, v1::TASK_RUNNING);
  Report("w1", u1, v1::TASK_RUNNING);
  Report("w0", u0, v1::TASK_SUCCEEDED);
  Report("w1", u1, v1::TASK_SUCCEEDED);
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::SUCCEEDED; }))
      << v1::JobState_Name(Job(id).state()) << ": " << Job(id).status_reason() << "\n" << [&] {
           std::string out;
           absl::StatusOr<std::vector<v1::Attempt>> all = ListAttempts(*store_, id);
           if (all.ok()) {
             for (const v1::Attempt& at : *all) out += at.DebugString();
           }
           return out;
         }();
  ASSERT_TRUE(Eventually([&] { return Allocated("w0") == 0 && Allocated("w1") == 0; }));
}

// A user's cancellation reaches the running gang through the store's committed events
// (JobStore::SubscribeBatches), not by waiting for a tick: the fake clock stands still
// and only Sync (no Tick) turns the loop.
TEST_F(ClusterManagerTest, ACancelledJobsGangIsStoppedByItsEventWithoutATick) {
  RunningGang g;
  ASSERT_NO_FATAL_FAILURE(StartRunningGang(&g));
  ASSERT_TRUE(store_->CancelJobAndWait(g.id, "alice", "changed my mind").ok());
  bool stopped = false;
  for (int i = 0; i < 200 && !stopped; ++i) {
    manager_->Sync();
    stopped = g.w0->Cancels() == std::vector<std::string>{g.t0} &&
              g.w1->Cancels() == std::vector<std::string>{g.t1};
    if (!stopped) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(stopped) << "cancels sent: w0 " << g.w0->Cancels().size() << ", w1 " << g.w1->Cancels().size();
}

TEST_F(ClusterManagerTest, SilentWorkerReleasesAStoppedTaskAfterItsStopDeadline) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  const int64_t id = Submit();
  const std::string t0 = absl::StrCat(id, "-1-0"), t1 = absl::StrCat(id, "-1-1");
  ASSERT_TRUE(Eventually([&] { return !w1->Assignments().empty(); }));
  Report("w0", t0, v1::TASK_RUNNING);
  Report("w1", t1, v1::TASK_RUNNING);
  Report("w0", t0, v1::TASK_FAILED, 1);
  // Held for a peer's loss to show (node_loss.h); w1 stays connected, so it is w0's own.
  clock_.Advance(kPeerLossSettle);
  manager_->TickNow();
  ASSERT_TRUE(Eventually([&] { return !w1->Cancels().empty(); })) << "the rest of the gang is stopped";
  EXPECT_EQ(Allocated("w0"), 0);
  // w1 keeps heartbeating but never reports t1 as stopped.
  AdvanceWithHeartbeats(absl::Seconds(20), {"w0", "w1"});
  manager_->TickNow();
  EXPECT_EQ(Allocated("w1"), 1) << "within cancel grace + slack";
  EXPECT_EQ(w1->Assignments().size(), 1u);
  AdvanceWithHeartbeats(absl::Seconds(6), {"w0", "w1"});  // past cancel grace (15 s) + slack (10 s)
  // Released: the restart gets both workers again.
  ASSERT_TRUE(Eventually([&] { return w1->Assignments().size() == 2; }))
      << v1::JobState_Name(Job(id).state()) << ": " << Job(id).status_reason();
  absl::StatusOr<std::vector<v1::Attempt>> attempts = ListAttempts(*store_, id);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 2u);
  const v1::Attempt& first = attempts->back();
  ASSERT_EQ(first.tasks_size(), 2);
  EXPECT_EQ(first.tasks(1).state(), v1::TASK_FAILED);
  EXPECT_NE(first.tasks(1).message().find("did not report stopping"), std::string::npos)
      << first.tasks(1).message();
  // A late report about the released task changes nothing.
  Report("w1", t1, v1::TASK_RUNNING);
  EXPECT_FALSE(manager_->IsAssigned(t1, "w1") && Allocated("w1") > 1);
  // Should the worker list it as running in a later session, it is told to kill it.
  std::shared_ptr<FakeLink> again = Hello("w1", {t1});
  EXPECT_EQ(again->Kills(), std::vector<std::string>{t1});
}

TEST_F(ClusterManagerTest, ReportsAreAcceptedOnlyFromTheAssignedWorker) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  std::shared_ptr<FakeLink> intruder = Hello("w9");
  const int64_t id = Submit();
  const std::string t0 = absl::StrCat(id, "-1-0"), t1 = absl::StrCat(id, "-1-1");
  ASSERT_TRUE(Eventually([&] { return !w0->Assignments().empty() && !w1->Assignments().empty(); }));
  EXPECT_TRUE(manager_->IsAssigned(t0, "w0"));
  EXPECT_FALSE(manager_->IsAssigned(t0, "w1"));
  EXPECT_FALSE(manager_->IsAssigned(t0, "w9"));
  Report("w0", t0, v1::TASK_RUNNING);
  Report("w1", t1, v1::TASK_RUNNING);
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::RUNNING; }));

  // Another worker (here w1 for w0's task, and w9 that runs nothing) cannot fail,
  // finish, checkpoint or report metrics for it.
  Report("w1", t0, v1::TASK_FAILED, 1);
  Report("w9", t0, v1::TASK_SUCCEEDED);
  Report("w9", t1, v1::TASK_SUCCEEDED);
  const std::string ckpt = dir_.path() + "/checkpoints/" + std::to_string(id) + "/step-3";
  MakeCheckpoint(ckpt);
  Checkpoint("w9", t0, 3, ckpt);
  v1::WorkerMessage metrics;
  metrics.mutable_metrics()->set_task_id(t0);
  metrics.mutable_metrics()->set_step(7);
  Send("w9", metrics);
  manager_->TickNow();
  absl::SleepFor(absl::Milliseconds(100));  // let the writer commit anything wrongly queued
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.attempts(), 1);
  EXPECT_TRUE(Checkpoints(id).empty());
  EXPECT_EQ(job.latest_metrics().step(), 0);

  // The assigned worker's reports count.
  Checkpoint("w0", t0, 3, ckpt);
  Send("w0", metrics);
  ASSERT_TRUE(Eventually([&] { return Checkpoints(id).size() == 1 && Job(id).latest_metrics().step() == 7; }));
}

// Rank 0's evaluations: the latest one and the best eval loss stay on latest_metrics
// while training points come and go, each is an "eval" event, and only the assigned
// worker's finite figures count.
TEST_F(ClusterManagerTest, EvaluationsKeepTheLatestAndTheBestEvalLoss) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  std::shared_ptr<FakeLink> intruder = Hello("w9");
  const int64_t id = Submit();
  const std::string t0 = absl::StrCat(id, "-1-0"), t1 = absl::StrCat(id, "-1-1");
  ASSERT_TRUE(Eventually([&] { return !w0->Assignments().empty() && !w1->Assignments().empty(); }));
  Report("w0", t0, v1::TASK_RUNNING);
  Report("w1", t1, v1::TASK_RUNNING);
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::RUNNING; }));
  auto metrics = [&](int64_t step, double loss) {
    v1::WorkerMessage m;
    m.mutable_metrics()->set_task_id(t0);
    m.mutable_metrics()->set_step(step);
    m.mutable_metrics()->set_loss(loss);
    Send("w0", m);
  };
  auto eval = [&](const std::string& worker, int64_t step, double loss) {
    v1::WorkerMessage m;
    m.mutable_eval()->set_task_id(t0);
    m.mutable_eval()->set_step(step);
    m.mutable_eval()->set_loss(loss);
    m.mutable_eval()->set_perplexity(std::exp(loss));
    Send(worker, m);
  };
  metrics(10, 3.5);
  eval("w0", 10, 2.5);
  metrics(20, 3.0);
  ASSERT_TRUE(Eventually([&] { return Job(id).latest_metrics().step() == 20; }));
  v1::JobMetricsPoint latest = Job(id).latest_metrics();
  EXPECT_DOUBLE_EQ(latest.loss(), 3.0);
  EXPECT_DOUBLE_EQ(latest.eval_loss(), 2.5) << "a training point keeps the evaluation";
  EXPECT_EQ(latest.eval_step(), 10);
  EXPECT_DOUBLE_EQ(latest.best_eval_loss(), 2.5);
  eval("w0", 20, 2.75);              // worse: the latest changes, the best stays
  eval("w9", 20, 0.1);               // not its task
  eval("w0", 20, std::nan(""));      // not a number
  metrics(30, 2.9);
  ASSERT_TRUE(Eventually([&] { return Job(id).latest_metrics().step() == 30; }));
  latest = Job(id).latest_metrics();
  EXPECT_DOUBLE_EQ(latest.eval_loss(), 2.75);
  EXPECT_EQ(latest.eval_step(), 20);
  EXPECT_DOUBLE_EQ(latest.best_eval_loss(), 2.5);
  absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(id, 0, 100);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> evals;
  for (const v1::JobEvent& e : *events) {
    if (e.type() == "eval") evals.push_back(e.reason());
  }
  EXPECT_EQ(evals, (std::vector<std::string>{"eval loss 2.5000 (perplexity 12.18) after step 10",
                                             "eval loss 2.7500 (perplexity 15.64) after step 20"}));
}

// Passes for new submissions are coalesced: a submitted job is still placed by
// the loop's own passes, promptly, with nobody calling TickNow and the fake clock still.
TEST_F(ClusterManagerTest, CoalescedPassesStillPlaceASubmittedJobPromptly) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  const absl::Time submitted = absl::Now();
  const int64_t id = Submit();
  while (w0->Assignments().empty() && absl::Now() - submitted < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(w0->Assignments().size(), 1u);
  EXPECT_EQ(w0->Assignments()[0].task_id(), absl::StrCat(id, "-1-0"));
  // pass_interval is 20 ms; a loaded test machine gets a generous bound.
  EXPECT_LT(absl::Now() - submitted, absl::Seconds(2));
  // A burst of submissions with nothing free: each is explained by a pass soon after.
  std::vector<int64_t> burst;
  for (int i = 0; i < 20; ++i) burst.push_back(Submit());
  v1::PendingInfo info;
  const absl::Time start = absl::Now();
  while (!manager_->PendingInfoFor(burst.back(), &info) && absl::Now() - start < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_TRUE(manager_->PendingInfoFor(burst.back(), &info));
  EXPECT_EQ(info.queue_position(), 20);
}

// The pass keeps the scheduler's explanations as they are and PendingInfoFor builds a
// job's PendingInfo when asked: the same code, message and position as before.
TEST_F(ClusterManagerTest, PendingInfoIsMadeWhenAskedAndMatchesThePass) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  const int64_t running = Submit();
  ASSERT_TRUE(Eventually([&] { return !w0->Assignments().empty(); }));
  const int64_t second = Submit();
  const int64_t third = Submit();
  v1::PendingInfo info;
  ASSERT_TRUE(Eventually([&] { return manager_->PendingInfoFor(third, &info); }));
  EXPECT_FALSE(manager_->PendingInfoFor(running, &info)) << "placed: not pending";
  EXPECT_FALSE(manager_->PendingInfoFor(9999, &info)) << "no such job";
  ASSERT_TRUE(manager_->PendingInfoFor(second, &info));
  EXPECT_EQ(info.code(), "INSUFFICIENT_CAPACITY");
  EXPECT_EQ(info.queue_position(), 1);
  EXPECT_NE(info.message().find("needs 2 nodes with 1 free GPU"), std::string::npos) << info.message();
  EXPECT_NE(info.message().find("0 match"), std::string::npos) << info.message();
  ASSERT_TRUE(manager_->PendingInfoFor(third, &info));
  EXPECT_EQ(info.code(), "INSUFFICIENT_CAPACITY");
  EXPECT_EQ(info.queue_position(), 2);
  // Asked again (the index is built once per pass), the same answer.
  v1::PendingInfo again;
  ASSERT_TRUE(manager_->PendingInfoFor(third, &again));
  EXPECT_EQ(again.SerializeAsString(), info.SerializeAsString());
}

TEST_F(ClusterManagerTest, CheckpointsOutsideTheJobDirAreIgnoredAndRetentionDeletesOnlyStepDirs) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  const std::string outside = dir_.path() + "/precious";
  fs::create_directories(outside);
  std::ofstream(outside + "/data.bin") << "keep me";
  const int64_t id = Submit("checkpoint: {keep_last: 1}\n");
  const std::string t0 = absl::StrCat(id, "-1-0");
  ASSERT_TRUE(Eventually([&] { return !w0->Assignments().empty(); }));
  const std::string dir = dir_.path() + "/checkpoints/" + std::to_string(id);
  // Reports naming a path outside the job's dir, or a symlink out of it, are ignored.
  Checkpoint("w0", t0, 1, outside);
  fs::create_directories(dir);
  fs::create_symlink(outside, dir + "/step-2");
  Checkpoint("w0", t0, 2, dir + "/step-2");
  Checkpoint("w0", t0, 3, dir + "/../" + std::to_string(id) + "x/step-3");
  manager_->TickNow();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(Checkpoints(id).empty());
  // The job's own: recorded, and keep_last 1 removes the older one's files and row.
  MakeCheckpoint(dir + "/step-4");
  Checkpoint("w0", t0, 4, dir + "/step-4");
  ASSERT_TRUE(Eventually([&] { return Checkpoints(id).size() == 1; }));
  MakeCheckpoint(dir + "/step-8");
  Checkpoint("w0", t0, 8, dir + "/step-8");
  ASSERT_TRUE(Eventually([&] {
    std::vector<v1::Checkpoint> c = Checkpoints(id);
    return c.size() == 1 && c[0].step() == 8 && !fs::exists(dir + "/step-4");
  }));
  EXPECT_TRUE(fs::exists(dir + "/step-8/manifest.json"));
  EXPECT_TRUE(fs::exists(outside + "/data.bin"));
  EXPECT_TRUE(fs::is_symlink(dir + "/step-2"));
}

// An elastic gang (nodes 3, min_nodes 2) started on the two workers there were
// grows back when a third registers: not before its cooldown, only right after a
// recorded checkpoint, without using a restart or waiting a backoff, resuming from that
// checkpoint; the attempts record the size and why it changed.
TEST_F(ClusterManagerTest, ElasticGangGrowsBackAtACheckpointAfterItsCooldown) {
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  std::shared_ptr<FakeLink> w2 = Hello("w2");
  const int64_t id = Submit("training: {global_batch_size: 12, micro_batch_size: 2}\n",
                            "{nodes: 3, min_nodes: 2, gpus_per_node: 1, elastic_cooldown_seconds: 60}");
  const std::string t0 = absl::StrCat(id, "-1-0"), t1 = absl::StrCat(id, "-1-1");
  ASSERT_TRUE(Eventually([&] { return !w1->Assignments().empty() && !w2->Assignments().empty(); }));
  EXPECT_EQ(w1->Assignments()[0].nnodes(), 2);
  Report("w1", t0, v1::TASK_RUNNING);
  Report("w2", t1, v1::TASK_RUNNING);
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::RUNNING; }));
  std::shared_ptr<FakeLink> w3 = Hello("w3");
  manager_->TickNow();
  EXPECT_TRUE(w3->Assignments().empty()) << "a running gang grows only at a checkpoint";

  // A checkpoint inside the cooldown (60 s from the attempt's start): it stays on two.
  const std::string dir = dir_.path() + "/checkpoints/" + std::to_string(id);
  MakeCheckpoint(dir + "/step-4");
  Checkpoint("w1", t0, 4, dir + "/step-4");
  ASSERT_TRUE(Eventually([&] { return Checkpoints(id).size() == 1; }));
  for (int i = 0; i < 5; ++i) manager_->TickNow();
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  EXPECT_TRUE(w1->Cancels().empty());

  // Past the cooldown, nothing happens until the next checkpoint.
  AdvanceWithHeartbeats(absl::Seconds(61), {"w1", "w2", "w3"});
  manager_->TickNow();
  EXPECT_TRUE(w1->Cancels().empty());
  MakeCheckpoint(dir + "/step-8");
  Checkpoint("w1", t0, 8, dir + "/step-8");
  ASSERT_TRUE(Eventually([&] { return !w1->Cancels().empty() && !w2->Cancels().empty(); }))
      << v1::JobState_Name(Job(id).state()) << ": " << Job(id).status_reason();
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::QUEUED; }));
  Report("w1", t0, v1::TASK_KILLED);
  Report("w2", t1, v1::TASK_KILLED);
  // Placed again at once (no restart backoff), on three nodes, from the checkpoint.
  ASSERT_TRUE(Eventually([&] { return !w3->Assignments().empty(); }))
      << v1::JobState_Name(Job(id).state()) << ": " << Job(id).status_reason();
  const v1::TaskSpec next = w3->Assignments()[0];
  EXPECT_EQ(next.attempt(), 2);
  EXPECT_EQ(next.nnodes(), 3);
  EXPECT_EQ(next.resume_from(), dir + "/step-8");
  const v1::Job job = Job(id);
  EXPECT_EQ(job.restarts(), 0) << "a grow is not a failure";
  EXPECT_EQ(job.workers_size(), 3);

  absl::StatusOr<std::vector<v1::Attempt>> attempts = ListAttempts(*store_, id);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 2u);
  const v1::Attempt& grown = (*attempts)[0];
  const v1::Attempt& first = (*attempts)[1];
  EXPECT_EQ(first.nodes(), 2);
  EXPECT_EQ(first.resize_reason(), "elastic: started on 2 of 3 nodes (min_nodes 2)");
  EXPECT_EQ(first.state(), v1::ATTEMPT_STOPPED);
  EXPECT_EQ(first.failure_class(), "") << "not counted as a failure or a preemption";
  EXPECT_NE(first.reason().find("resizing 2 \u2192 3 nodes: capacity returned (w3); stopping after checkpoint step 8"),
            std::string::npos)
      << first.reason();
  EXPECT_EQ(grown.nodes(), 3);
  EXPECT_EQ(grown.resize_reason(), "resized 2 \u2192 3 nodes: capacity returned (w3)");
  absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(id, 0, 100);
  ASSERT_TRUE(events.ok());
  bool scheduled_event = false;
  for (const v1::JobEvent& e : *events) {
    scheduled_event |= e.type() == "scheduled" &&
                       e.reason().find("resized 2 \u2192 3 nodes: capacity returned (w3); attempt 2 placed on") == 0;
  }
  EXPECT_TRUE(scheduled_event);

  // At `nodes` it never grows again.
  Report("w1", absl::StrCat(id, "-2-0"), v1::TASK_RUNNING);
  Report("w2", absl::StrCat(id, "-2-1"), v1::TASK_RUNNING);
  Report("w3", absl::StrCat(id, "-2-2"), v1::TASK_RUNNING);
  std::shared_ptr<FakeLink> w4 = Hello("w4");
  AdvanceWithHeartbeats(absl::Seconds(61), {"w1", "w2", "w3", "w4"});
  MakeCheckpoint(dir + "/step-12");
  Checkpoint("w1", absl::StrCat(id, "-2-0"), 12, dir + "/step-12");
  ASSERT_TRUE(Eventually([&] { return Checkpoints(id).size() == 3; }));
  for (int i = 0; i < 5; ++i) manager_->TickNow();
  EXPECT_EQ(Job(id).state(), v1::RUNNING);
  EXPECT_TRUE(w4->Assignments().empty());
}

}  // namespace
}  // namespace llamafleet

namespace llamafleet {
namespace {

// A worker's start-up phases and tokenizing progress: only known phase names with sane
// times become the attempt's phases and events, each once; progress becomes at most one
// event per attempt every few seconds, plus each dataset's 100%. The task names its owner.
TEST_F(ClusterManagerTest, StartupPhasesAndTokenizingProgressFromAWorkerAreBounded) {
  RunningGang g;
  StartRunningGang(&g);
  ASSERT_FALSE(g.w0->Assignments().empty());
  EXPECT_EQ(g.w0->Assignments()[0].owner(), "alice") << "each owner gets a token cache of their own";
  auto phase = [&](const std::string& worker, const std::string& name, double seconds, const std::string& detail) {
    v1::WorkerMessage m;
    m.mutable_phase()->set_task_id(g.t0);
    m.mutable_phase()->set_phase(name);
    m.mutable_phase()->set_seconds(seconds);
    m.mutable_phase()->set_since_start(seconds);
    m.mutable_phase()->set_detail(detail);
    Send(worker, std::move(m));
  };
  clock_.Advance(absl::Seconds(2));  // the report comes later than the phase was done
  phase("w0", "made_up", 1, "");
  phase("w0", "rendezvous", -1, "");
  phase("w0", "rendezvous", std::nan(""), "");
  phase("w0", "placed", 1, "");  // the coordinator's own phase, not a worker's to report
  phase("w9", "first_step", 1, "");
  phase("w0", "data_ready", 0.5, "token cache \x1b[2Jhit");
  phase("w0", "data_ready", 9, "again");
  auto progress = [&](const std::string& path, int64_t done, int64_t total) {
    v1::WorkerMessage m;
    m.mutable_tokenizing()->set_task_id(g.t0);
    m.mutable_tokenizing()->set_path(path);
    m.mutable_tokenizing()->set_done_bytes(done);
    m.mutable_tokenizing()->set_total_bytes(total);
    Send("w0", std::move(m));
  };
  for (int i = 1; i <= 20; ++i) progress("/d/train.jsonl", i * 100'000'000, 3'000'000'000);  // one burst
  progress("/d/train.jsonl", 3'100'000'000, 3'000'000'000);                                  // nonsense
  progress("/d/train.jsonl", 3'000'000'000, 3'000'000'000);
  progress("/d/train.jsonl", 3'000'000'000, 3'000'000'000);  // the same 100% again
  clock_.Advance(absl::Seconds(4));
  progress("/d/eval.jsonl", 1'000'000, 2'000'000);

  auto events_of = [&](const std::string& type) {
    std::vector<std::string> out;
    const absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(g.id, 0, 1000);
    for (const v1::JobEvent& e : *events) {
      if (e.type() == type) out.push_back(e.reason());
    }
    return out;
  };
  ASSERT_TRUE(Eventually([&] { return events_of("tokenizing").size() >= 3; }));
  absl::SleepFor(absl::Milliseconds(100));  // let the writer commit anything wrongly queued
  EXPECT_EQ(events_of("tokenizing"),
            (std::vector<std::string>{"attempt 1: tokenizing train.jsonl 3% (0.1 of 3.0 GB)",
                                      "attempt 1: tokenizing train.jsonl 100% (3.0 of 3.0 GB)",
                                      "attempt 1: tokenizing eval.jsonl 50% (1.0 of 2.0 MB)"}));
  const std::vector<std::string> startup = events_of("startup");
  ASSERT_EQ(startup.size(), 1u) << absl::StrJoin(startup, "\n");
  EXPECT_EQ(startup[0], "attempt 1 start-up: data_ready in 0.50 s (0.50 s since the trainer started), "
                        "token cache ?[2Jhit");
  absl::StatusOr<std::vector<v1::Attempt>> attempts = ListAttempts(*store_, g.id);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  std::vector<std::string> names;
  for (const v1::AttemptPhase& p : (*attempts)[0].phases()) names.push_back(p.name());
  EXPECT_EQ(names, (std::vector<std::string>{"placed", "trainers_started", "data_ready"}));
  EXPECT_EQ((*attempts)[0].phases(2).detail(), "token cache ?[2Jhit");
  EXPECT_DOUBLE_EQ((*attempts)[0].phases(2).seconds(), 0.5);
  using google::protobuf::util::TimeUtil;
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds((*attempts)[0].phases(2).time()) -
                TimeUtil::TimestampToMicroseconds((*attempts)[0].phases(1).time()),
            500'000)
      << "done 0.5 s after the trainers started, by the trainer's clock";
}

}  // namespace
}  // namespace llamafleet
