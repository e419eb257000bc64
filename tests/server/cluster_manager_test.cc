// ClusterManager with a real SQLite store, a fake clock and fake worker links
// (cluster_manager_fixture.h): the stranded restart (a worker re-registers without the dead
// attempt's task), a silent worker, slot accounting, report binding (only the assigned
// worker's reports count), checkpoint confinement and retention, resume candidates, and an
// elastic gang growing back at a checkpoint. Training reports: cluster_reports_test.cc.
#include "tests/server/cluster_manager_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cluster;  // NOLINT: the fixture's names

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
  const bool stopped = testing::WaitFor(
      [&] {
        manager_->Sync();
        return g.w0->Cancels() == std::vector<std::string>{g.t0} &&
               g.w1->Cancels() == std::vector<std::string>{g.t1};
      },
      absl::Seconds(2), absl::Milliseconds(10));
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


// Passes for new submissions are coalesced: a submitted job is still placed by
// the loop's own passes, promptly, with nobody calling TickNow and the fake clock still.
TEST_F(ClusterManagerTest, CoalescedPassesStillPlaceASubmittedJobPromptly) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  const absl::Time submitted = absl::Now();
  const int64_t id = Submit();
  testing::WaitFor([&] { return !w0->Assignments().empty(); }, absl::Seconds(10), absl::Milliseconds(2));
  ASSERT_EQ(w0->Assignments().size(), 1u);
  EXPECT_EQ(w0->Assignments()[0].task_id(), absl::StrCat(id, "-1-0"));
  // pass_interval is 20 ms; a loaded test machine gets a generous bound.
  EXPECT_LT(absl::Now() - submitted, absl::Seconds(2));
  // A burst of submissions with nothing free: each is explained by a pass soon after.
  std::vector<int64_t> burst;
  for (int i = 0; i < 20; ++i) burst.push_back(Submit());
  v1::PendingInfo info;
  testing::WaitFor([&] { return manager_->PendingInfoFor(burst.back(), &info); }, absl::Seconds(10),
                   absl::Milliseconds(2));
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
  absl::SleepFor(absl::Milliseconds(100));  // let the writer commit anything wrongly queued
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
  // Its grow decision taken before the clock moves past the cooldown.
  ASSERT_TRUE(Eventually([&] { return manager_->checkpoints_checked() == 1; }));
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


}  // namespace
}  // namespace llamafleet
