// ClusterManager and hangs inside collectives (cluster_manager_fixture.h, hang_rules.h):
// the ranks' progress from heartbeats, a gang that stops moving past the bound, the rank
// the others wait for blamed as a node fault that uses no restart and leaves its worker
// out of the next placement; stragglers (straggler_rules.h) flagged as an event and a
// worker field, and restarted without under the queue's restart-without.
#include "tests/server/cluster_manager_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cluster;  // NOLINT: the fixture's names

v1::WorkerMessage ProgressHeartbeat(const std::string& task, int rank, int64_t collectives, bool in,
                                    double age) {
  v1::WorkerMessage m;
  v1::RankProgress* p = m.mutable_heartbeat()->add_ranks();
  p->set_task_id(task);
  p->set_rank(rank);
  p->set_step(2);
  p->set_collectives(collectives);
  p->set_in_collective(in);
  p->set_age_seconds(age);
  return m;
}

// Rank 1 (on w1) goes silent while rank 0 waits in the all-reduce: past the 60 s floor the
// attempt ends as a node fault naming it; the job is requeued at once without a restart
// and runs next on w0 and the spare w2.
TEST_F(ClusterManagerTest, AHungRankIsANodeFaultThatExcludesItsWorker) {
  RunningGang g;
  StartRunningGang(&g);
  std::shared_ptr<FakeLink> w2 = Hello("w2");
  for (int64_t step = 1; step <= 2; ++step) {
    v1::WorkerMessage m;
    m.mutable_metrics()->set_task_id(g.t0);
    m.mutable_metrics()->set_step(step);
    Send("w0", m);
    clock_.Advance(absl::Seconds(1));
  }
  // A report for a task of another worker, or a rank the task does not run, is dropped.
  Send("w2", ProgressHeartbeat(g.t1, 1, 9, false, 0.1));
  Send("w0", ProgressHeartbeat(g.t0, 1, 9, false, 0.1));
  double silent = 0.5;
  for (int i = 0; i < 14; ++i) {  // 56 s: within the floor
    Send("w0", ProgressHeartbeat(g.t0, 0, 10, true, 0.3));
    Send("w1", ProgressHeartbeat(g.t1, 1, 9, false, silent));
    Heartbeat("w2");
    clock_.Advance(absl::Seconds(4));
    silent += 4;
    manager_->TickNow();
  }
  EXPECT_EQ(Job(g.id).state(), v1::RUNNING);
  for (int i = 0; i < 2; ++i) {
    Send("w0", ProgressHeartbeat(g.t0, 0, 10, true, 0.3));
    Send("w1", ProgressHeartbeat(g.t1, 1, 9, false, silent));
    Heartbeat("w2");
    clock_.Advance(absl::Seconds(4));
    silent += 4;
  }
  ASSERT_TRUE(Eventually([&] { return g.w0->Cancels().size() == 1 && g.w1->Cancels().size() == 1; }));
  Report("w0", g.t0, v1::TASK_KILLED);
  Report("w1", g.t1, v1::TASK_KILLED);
  ASSERT_TRUE(Eventually([&] { return w2->Assignments().size() == 1; }));
  EXPECT_EQ(g.w0->Assignments().size(), 2u);
  EXPECT_EQ(g.w1->Assignments().size(), 1u) << "the hung worker is left out";
  const v1::Job job = Job(g.id);
  EXPECT_EQ(job.restarts(), 0);
  absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(g.id, 0, 100);
  ASSERT_TRUE(events.ok());
  std::string restarting, requeued;
  for (const v1::JobEvent& e : *events) {
    if (e.type() == "restarting") restarting = e.reason();
    if (e.type() == "requeued") requeued = e.reason();
  }
  EXPECT_EQ(restarting.rfind("hung: no progress for 1m", 0), 0u) << restarting;
  EXPECT_NE(restarting.find("after step 2 (bound 1m); rank 1 on worker w1 stopped reporting progress"),
            std::string::npos)
      << restarting;
  EXPECT_NE(requeued.find("node fault: requeued at once without using a restart (0 of 3 used); excluding worker w1"),
            std::string::npos)
      << requeued;
}

// Without progress reports (an older worker) only the stall detector applies.
TEST_F(ClusterManagerTest, NoProgressReportsNoHangVerdict) {
  RunningGang g;
  StartRunningGang(&g);
  v1::WorkerMessage m;
  m.mutable_metrics()->set_task_id(g.t0);
  m.mutable_metrics()->set_step(1);
  Send("w0", m);
  AdvanceWithHeartbeats(absl::Seconds(120), {"w0", "w1"});
  manager_->TickNow();
  EXPECT_EQ(Job(g.id).state(), v1::RUNNING);
  EXPECT_TRUE(g.w0->Cancels().empty());
}

class StragglerTest : public ClusterManagerTest {
 protected:
  void Configure(ClusterOptions* o) override {
    o->straggler.factor = 2;
    o->straggler.consecutive = 3;
    if (restart_without_) o->straggler_actions["default"] = StragglerAction::kRestartWithout;
  }
  v1::WorkerMessage Busy(const std::string& task, int rank, int64_t step, double busy) {
    v1::WorkerMessage m = ProgressHeartbeat(task, rank, step * 10, false, 0.2);
    m.mutable_heartbeat()->mutable_ranks(0)->set_step(step);
    m.mutable_heartbeat()->mutable_ranks(0)->set_busy_seconds(busy);
    return m;
  }
  // `rounds` rounds of one step each: rank 0 works 0.1 s a step, rank 1 `slow` s.
  void Rounds(const RunningGang& g, int rounds, double slow) {
    for (int i = 0; i < rounds; ++i) {
      ++step_;
      busy0_ += 0.1;
      busy1_ += slow;
      Send("w0", Busy(g.t0, 0, step_, busy0_));
      Send("w1", Busy(g.t1, 1, step_, busy1_));
    }
  }
  std::string StragglerEvent(int64_t id) {
    absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(id, 0, 100);
    for (const v1::JobEvent& e : *events) {
      if (e.type() == "straggler") return e.reason();
    }
    return "";
  }
  bool restart_without_ = false;
  int64_t step_ = 0;
  double busy0_ = 0, busy1_ = 0;
};

// Under the default policy (flag) a straggler is an event and a field of its worker; the
// attempt runs on.
TEST_F(StragglerTest, FlaggedRankIsAnEventAndAWorkerField) {
  RunningGang g;
  StartRunningGang(&g);
  Rounds(g, 1, 0.1);  // opens the first round
  Rounds(g, 2, 0.5);
  Rounds(g, 1, 0.1);  // resets: two slow rounds were not enough
  Rounds(g, 2, 0.5);
  EXPECT_EQ(StragglerEvent(g.id), "");
  Rounds(g, 1, 0.5);
  ASSERT_TRUE(Eventually([&] { return !StragglerEvent(g.id).empty(); }));
  EXPECT_EQ(StragglerEvent(g.id).rfind("straggler: rank 1 on worker w1 works 0.5 s a step, the others' median 0.1 s", 0),
            0u)
      << StragglerEvent(g.id);
  manager_->Sync();
  for (const v1::WorkerInfo& w : manager_->Workers()) {
    EXPECT_EQ(w.has_straggler(), w.name() == "w1") << w.name();
    if (w.name() == "w1") {
      EXPECT_EQ(w.straggler().job_id(), std::to_string(g.id));
      EXPECT_EQ(w.straggler().rank(), 1);
      EXPECT_EQ(w.straggler().action(), "flag");
    }
  }
  EXPECT_EQ(Job(g.id).state(), v1::RUNNING);
  EXPECT_TRUE(g.w0->Cancels().empty());
}

// Under restart-without the attempt ends as a node fault without the straggler's worker.
TEST_F(StragglerTest, RestartWithoutExcludesTheStragglersWorker) {
  restart_without_ = true;
  TearDown();
  SetUp();
  RunningGang g;
  StartRunningGang(&g);
  std::shared_ptr<FakeLink> w2 = Hello("w2");
  Rounds(g, 4, 0.6);
  ASSERT_TRUE(Eventually([&] { return g.w0->Cancels().size() == 1 && g.w1->Cancels().size() == 1; }));
  Report("w0", g.t0, v1::TASK_KILLED);
  Report("w1", g.t1, v1::TASK_KILLED);
  ASSERT_TRUE(Eventually([&] { return w2->Assignments().size() == 1; }));
  EXPECT_EQ(g.w1->Assignments().size(), 1u);
  EXPECT_EQ(Job(g.id).restarts(), 0);
}

}  // namespace
}  // namespace llamafleet
