// The pure rules of sick nodes, as tables: who is blamed when a gang fails after a node
// loss (node_loss.h), when a pre-flight drains a node and when it (or a node drained for
// GPU health) comes back after the cool-off (node_health.h, on a fake clock), and how a
// read of the drains table differs from the last.
#include <gtest/gtest.h>

#include "common/clock.h"
#include "server/cluster/node_health.h"
#include "server/cluster/node_loss.h"
#include "server/worker_health_metrics.h"

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

v1::PreflightResult Preflight(bool passed) {
  v1::PreflightResult r;
  r.set_passed(passed);
  r.set_seconds(0.004);
  v1::PreflightCheck* c = r.add_checks();
  c->set_name("gemm");
  c->set_state(passed ? v1::PreflightCheck::PASSED : v1::PreflightCheck::FAILED);
  c->set_detail(passed ? "96x96 in 1 ms" : "result differs");
  v1::PreflightCheck* g = r.add_checks();
  g->set_name("gpu");
  g->set_state(v1::PreflightCheck::SKIPPED);
  g->set_detail("no GPU");
  return r;
}

TEST(NodeHealth, PreflightDrainsAndComesBackOnlyAfterTheCooloff) {
  const absl::Duration cooloff = absl::Minutes(5);
  FakeClock clock;
  const absl::Time drained_at = clock.Now();
  const WorkerDrainRecord by_preflight{"w1", "pre-flight failed: gemm", kDrainByPreflight, drained_at};
  const WorkerDrainRecord by_operator{"w1", "bad DIMM", kDrainByOperator, drained_at};
  const WorkerDrainRecord by_gpu_health{"w1", "GPU 0: XID 79 (GPU has fallen off the bus)", kDrainByGpuHealth,
                                        drained_at};
  struct Row {
    const char* what;
    std::optional<WorkerDrainRecord> drain;
    bool passed;
    absl::Duration after;  // since the drain
    HealthDecision::Action action;
  } rows[] = {
      {"healthy and passing", std::nullopt, true, absl::ZeroDuration(), HealthDecision::kNone},
      {"healthy and failing: drained", std::nullopt, false, absl::ZeroDuration(), HealthDecision::kDrain},
      {"drained by pre-flight, failing again", by_preflight, false, absl::Hours(1), HealthDecision::kNone},
      {"drained by pre-flight, passing within the cool-off", by_preflight, true, absl::Minutes(4),
       HealthDecision::kNone},
      {"drained by pre-flight, passing at the cool-off", by_preflight, true, absl::Minutes(5),
       HealthDecision::kUndrain},
      {"drained by pre-flight, passing after it", by_preflight, true, absl::Hours(2), HealthDecision::kUndrain},
      {"drained by an operator, passing long after", by_operator, true, absl::Hours(24), HealthDecision::kNone},
      {"drained by an operator, failing", by_operator, false, absl::ZeroDuration(), HealthDecision::kNone},
      {"drained for GPU health, failing between attempts", by_gpu_health, false, absl::Hours(1),
       HealthDecision::kNone},
      {"drained for GPU health, passing within the cool-off", by_gpu_health, true, absl::Minutes(4),
       HealthDecision::kNone},
      {"drained for GPU health, passing after the cool-off", by_gpu_health, true, absl::Minutes(5),
       HealthDecision::kUndrain},
  };
  for (const Row& row : rows) {
    clock.Set(drained_at + row.after);
    const HealthDecision d = DecidePreflight(row.drain, Preflight(row.passed), clock.Now(), cooloff);
    EXPECT_EQ(d.action, row.action) << row.what;
    if (d.action == HealthDecision::kDrain) {
      EXPECT_EQ(d.reason, "pre-flight failed: gemm: result differs") << row.what;
    }
  }
}

TEST(NodeHealth, PreflightSummarySaysWhatPassedFailedAndWasSkipped) {
  EXPECT_EQ(PreflightSummary(Preflight(true)), "passed in 0.004 s (gemm ok, gpu skipped: no GPU)");
  EXPECT_EQ(PreflightSummary(Preflight(false)), "failed: gemm: result differs");
  v1::PreflightResult hostile = Preflight(false);
  hostile.mutable_checks(0)->set_detail(std::string("a\nb\x1b[31m") + std::string(500, 'x'));
  const std::string s = PreflightSummary(hostile);
  EXPECT_EQ(s.find('\n'), std::string::npos);
  EXPECT_EQ(s.find('\x1b'), std::string::npos);
  EXPECT_LE(s.size(), 300u);
}

TEST(NodeHealth, DrainTableDiffsNameWhatChanged) {
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  const WorkerDrainRecord a{"a", "x", kDrainByOperator, t}, b{"b", "y", kDrainByPreflight, t};
  WorkerDrainRecord b2 = b;
  b2.reason = "z";
  DrainChanges c = DiffDrains({{"a", a}, {"b", b}}, {{"b", b2}});
  ASSERT_EQ(c.drained.size(), 1u);
  EXPECT_EQ(c.drained[0], b2);
  EXPECT_EQ(c.undrained, std::vector<std::string>{"a"});
  c = DiffDrains({{"a", a}}, {{"a", a}});
  EXPECT_TRUE(c.drained.empty());
  EXPECT_TRUE(c.undrained.empty());
}

TEST(NodeHealth, MetricsShowDrainsWithReasonAndTimeAndTheLastPreflight) {
  v1::WorkerInfo drained;
  drained.set_name("w2");
  drained.set_state(v1::WORKER_DRAINING);
  drained.mutable_drain()->set_reason("bad \"DIMM\"");
  drained.mutable_drain()->set_source("operator");
  drained.mutable_drain()->mutable_since()->set_seconds(1700000000);
  *drained.mutable_preflight() = Preflight(false);
  v1::WorkerInfo lost = drained;
  lost.set_name("w9");
  lost.set_state(v1::WORKER_LOST);
  metrics::Exposition out;
  CollectWorkerHealth({drained, lost}, &out);
  const std::string text = out.Text();
  EXPECT_NE(text.find("llamafleet_worker_drained{worker=\"w2\",source=\"operator\",reason=\"bad \\\"DIMM\\\"\"} 1700000000"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("llamafleet_worker_preflight_passed{worker=\"w2\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("llamafleet_worker_preflight_seconds{worker=\"w2\"} 0.004"), std::string::npos) << text;
  EXPECT_EQ(text.find("w9"), std::string::npos) << "a lost worker is left out";
}

}  // namespace
}  // namespace llamafleet
