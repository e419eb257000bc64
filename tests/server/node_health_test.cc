// The pure rules of sick nodes, as tables: who is blamed when a gang fails after a node
// loss (node_loss.h).
#include <gtest/gtest.h>

#include "server/cluster/node_loss.h"

namespace llamafleet {
namespace {

AttemptTracker Gang() {
  AttemptTracker a;
  a.record.job_id = 1;
  a.record.attempt = 1;
  for (int r = 0; r < 3; ++r) {
    TaskRecord t;
    t.task_id = "1-1-" + std::to_string(r);
    t.node_rank = r;
    t.worker = "w" + std::to_string(r);
    a.record.tasks.push_back(t);
    a.task_states[t.task_id] = v1::TASK_RUNNING;
  }
  return a;
}

TaskReportEffect Failure(AttemptOutcome outcome) {
  TaskReportEffect e;
  e.applied = true;
  e.end = outcome;
  e.reason = "task 1-1-0 on w0 failed: UNAVAILABLE: connection closed by peer";
  return e;
}

TEST(NodeLoss, OnlyARetryableFailureInAGangWithOtherWorkersWaitsForAPeer) {
  const AttemptTracker gang = Gang();
  AttemptTracker single = Gang();
  single.record.tasks.resize(1);
  struct Row {
    const char* what;
    const AttemptTracker& attempt;
    std::optional<AttemptOutcome> end;
    bool held;
  } rows[] = {
      {"retryable in a gang", gang, AttemptOutcome::kRetryable, true},
      {"permanent: the job's own fault", gang, AttemptOutcome::kPermanent, false},
      {"node fault of the reporter itself", gang, AttemptOutcome::kNodeFault, false},
      {"success", gang, AttemptOutcome::kSucceeded, false},
      {"no end", gang, std::nullopt, false},
      {"retryable on a single node", single, AttemptOutcome::kRetryable, false},
  };
  for (const Row& row : rows) {
    TaskReportEffect e = Failure(AttemptOutcome::kRetryable);
    e.end = row.end;
    EXPECT_EQ(MayBePeerLoss(row.attempt, "w0", e), row.held) << row.what;
  }
}

TEST(NodeLoss, TheLostPeerIsTheFirstGoneWorkerWithATaskStillRunning) {
  struct Row {
    const char* what;
    std::set<std::string> gone;
    std::set<std::string> finished;  // workers whose task is terminal
    std::set<std::string> missing;   // workers whose new session does not list its task
    std::string blamed;
  } rows[] = {
      {"nobody gone", {}, {}, {}, ""},
      {"a peer's session ended", {"w2"}, {}, {}, "w2"},
      {"two gone: the lower node rank", {"w2", "w1"}, {}, {}, "w1"},
      {"the reporter itself gone: not a peer", {"w0"}, {}, {}, ""},
      {"a gone peer that had finished", {"w1"}, {"w1"}, {}, ""},
      {"a peer restarted without its task", {}, {}, {"w2"}, "w2"},
  };
  for (const Row& row : rows) {
    AttemptTracker a = Gang();
    for (const TaskRecord& t : a.record.tasks) {
      if (row.finished.count(t.worker)) a.task_states[t.task_id] = v1::TASK_SUCCEEDED;
      if (row.missing.count(t.worker)) a.MarkMissing(t.task_id, absl::UnixEpoch());
    }
    EXPECT_EQ(LostPeer(a, "w0", [&](const std::string& w) { return row.gone.count(w) > 0; }), row.blamed)
        << row.what;
  }
}

TEST(NodeLoss, BlamingAPeerMakesItANodeFaultExcludingThePeerAndNamingItFirst) {
  const TaskReportEffect e = BlameLostPeer(Failure(AttemptOutcome::kRetryable), "w2", "its session ended");
  EXPECT_EQ(e.end, AttemptOutcome::kNodeFault);
  EXPECT_EQ(e.excluded_worker, "w2");
  EXPECT_EQ(e.reason,
            "worker w2 lost (its session ended); task 1-1-0 on w0 failed: UNAVAILABLE: connection "
            "closed by peer");
}

}  // namespace
}  // namespace llamafleet
