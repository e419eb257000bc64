// One process per worker name (server/cluster/worker_sessions.h), with the real manager and
// store (cluster_manager_fixture.h): a second process's hello while the name's session
// lives, the same process reconnecting, a new process after the old one left, a task its
// worker stops listing, and the verdicts themselves.
#include "absl/strings/match.h"
#include "server/cluster/worker_sessions.h"
#include "tests/server/cluster_manager_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cluster;  // NOLINT: the fixture's names

class WorkerSessionsTest : public ClusterManagerTest {
 protected:
  // Process "p0" of worker w0, and a one-node job whose task reports RUNNING there.
  void StartOneNodeJob(std::shared_ptr<FakeLink>* w0, int64_t* id, std::string* t0) {
    *w0 = Hello("w0", {}, "p0");
    *id = Submit("", "{nodes: 1, gpus_per_node: 1}");
    *t0 = absl::StrCat(*id, "-1-0");
    ASSERT_TRUE(Eventually([&] { return !(*w0)->Assignments().empty(); }));
    Report("w0", *t0, v1::TASK_RUNNING);
    ASSERT_TRUE(Eventually([&] { return Job(*id).state() == v1::RUNNING; }));
  }
};

TEST(HelloVerdictTest, VerdictsFollowTheInstanceAndWhetherTheSessionLives) {
  EXPECT_EQ(JudgeHello(nullptr, "a"), HelloVerdict::kFirst);
  LiveWorker w;
  EXPECT_EQ(JudgeHello(&w, "a"), HelloVerdict::kFirst)
      << "recovered after a restart: no instance known";
  w.instance = "a";
  w.instance_known = true;
  w.link = std::make_shared<FakeLink>();
  EXPECT_EQ(JudgeHello(&w, "a"), HelloVerdict::kReconnect);
  EXPECT_EQ(JudgeHello(&w, "b"), HelloVerdict::kRefused);
  EXPECT_EQ(JudgeHello(&w, ""), HelloVerdict::kRefused) << "no instance is another process";
  w.lost = true;
  EXPECT_EQ(JudgeHello(&w, "b"), HelloVerdict::kNewProcess);
  w.lost = false;
  w.link.reset();
  EXPECT_EQ(JudgeHello(&w, "b"), HelloVerdict::kNewProcess);
  EXPECT_EQ(JudgeHello(&w, "a"), HelloVerdict::kReconnect);
  w.instance = "";
  EXPECT_EQ(JudgeHello(&w, ""), HelloVerdict::kReconnect)
      << "a worker that sends no instance, as before";

  EXPECT_TRUE(ValidateInstanceId("0123abcd").ok());
  EXPECT_EQ(ValidateInstanceId(std::string(65, 'a')).message(),
            "hello.instance_id must be at most 64 characters");
  EXPECT_EQ(ValidateInstanceId("a\nb").message(), "hello.instance_id must be printable ASCII");
}

// A replayed credential: a hello under w1's name from another process while w1's session
// lives and lists nothing. Refused (ALREADY_EXISTS); w1's session, its running task and the
// job stay as they were, past the missing-task grace.
TEST_F(WorkerSessionsTest, ASecondProcessIsRefusedAndTheRunningAttemptKeepsItsTruth) {
  RunningGang g;
  ASSERT_NO_FATAL_FAILURE(StartRunningGang(&g, "p0", "p1"));
  const std::shared_ptr<FakeLink> w1 = g.w1;
  const int64_t id = g.id;

  std::shared_ptr<FakeLink> thief = Hello("w1", {}, "stolen");
  ASSERT_TRUE(thief->closed().has_value());
  EXPECT_EQ(thief->closed()->code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(thief->closed()->message(),
                                "worker name 'w1' already has a live session from another process"))
      << thief->closed()->message();
  EXPECT_TRUE(absl::StrContains(thief->closed()->message(), "worker forget w1"))
      << thief->closed()->message();
  EXPECT_FALSE(w1->closed().has_value()) << "the live session was touched";
  EXPECT_FALSE(thief->Held().has_value()) << "a refused hello gets no welcome";

  AdvanceWithHeartbeats(absl::Seconds(8), {"w0", "w1"});  // well past missing_task_grace (3 s)
  manager_->TickNow();
  EXPECT_EQ(Job(id).state(), v1::RUNNING) << Job(id).status_reason();
  EXPECT_EQ(Job(id).attempts(), 1);
  EXPECT_TRUE(w1->Cancels().empty());
  EXPECT_TRUE(manager_->IsAssigned(g.t1, "w1"));
}

// The same process again (its connection broke without a reset): it supersedes its old
// session, and the welcome holds the task it lists.
TEST_F(WorkerSessionsTest, TheSameProcessReconnectingSupersedesItsOldSessionAndKeepsItsTasks) {
  std::shared_ptr<FakeLink> w0;
  int64_t id = 0;
  std::string t0;
  ASSERT_NO_FATAL_FAILURE(StartOneNodeJob(&w0, &id, &t0));

  std::shared_ptr<FakeLink> again = Hello("w0", {t0}, "p0");
  ASSERT_TRUE(w0->closed().has_value());
  EXPECT_EQ(w0->closed()->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(again->Held(), std::vector<std::string>{t0});
  EXPECT_TRUE(again->Kills().empty());
  AdvanceWithHeartbeats(absl::Seconds(8), {"w0"});
  manager_->TickNow();
  EXPECT_EQ(Job(id).state(), v1::RUNNING) << Job(id).status_reason();
  EXPECT_EQ(Job(id).attempts(), 1);
}

// A new process under the name once the old one's session ended: the old process's task
// is gone with it. Its attempt ends at once as a node fault that uses no restart, and a
// task the new hello lists (it cannot be its own) is not held.
TEST_F(WorkerSessionsTest, ANewProcessEndsThePreviousProcessesAttemptAsANodeFault) {
  std::shared_ptr<FakeLink> w0;
  int64_t id = 0;
  std::string t0;
  ASSERT_NO_FATAL_FAILURE(StartOneNodeJob(&w0, &id, &t0));
  manager_->OnDisconnected("w0", w0.get());
  manager_->Sync();

  std::shared_ptr<FakeLink> next = Hello("w0", {t0}, "p0-restarted");
  EXPECT_FALSE(next->closed().has_value());
  EXPECT_EQ(next->Held(), std::vector<std::string>{});
  EXPECT_EQ(next->Kills(), std::vector<std::string>{t0});
  ASSERT_TRUE(Eventually([&] { return Job(id).attempts() == 2 || Job(id).state() == v1::QUEUED; }))
      << v1::JobState_Name(Job(id).state()) << ": " << Job(id).status_reason();
  EXPECT_EQ(Job(id).restarts(), 0) << "a node fault uses no restart";
  absl::StatusOr<std::vector<v1::Attempt>> attempts = ListAttempts(*store_, id);
  ASSERT_TRUE(attempts.ok());
  const v1::Attempt& first = attempts->back();
  EXPECT_EQ(first.failure_class(), "node_fault") << first.reason();
  EXPECT_TRUE(absl::StrContains(first.reason(), "worker w0 registered from a new process"))
      << first.reason();
}

// The process that ran a task stops listing it and never reports its end: past the grace
// the task is released, and its attempt ends as its worker's node fault, using no restart.
TEST_F(WorkerSessionsTest, ATaskItsWorkerStopsListingIsANodeFaultNotTheJobs) {
  std::shared_ptr<FakeLink> w0;
  int64_t id = 0;
  std::string t0;
  ASSERT_NO_FATAL_FAILURE(StartOneNodeJob(&w0, &id, &t0));
  Hello("w0", {}, "p0");
  AdvanceWithHeartbeats(absl::Seconds(4), {"w0"});  // past missing_task_grace
  ASSERT_TRUE(Eventually([&] { return Job(id).state() != v1::RUNNING; }));
  EXPECT_NE(Job(id).state(), v1::FAILED) << Job(id).status_reason();
  EXPECT_EQ(Job(id).restarts(), 0);
  absl::StatusOr<std::vector<v1::Attempt>> attempts = ListAttempts(*store_, id);
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ(attempts->back().failure_class(), "node_fault") << attempts->back().reason();
}

}  // namespace
}  // namespace llamafleet
