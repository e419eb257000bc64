// PlanAttemptEnd as a table: for each outcome and job, the attempt row's state and failure
// class, the job's column changes and its moves. No database: the plan is pure.

#include "storage/attempt_end_plan.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace llamafleet {
namespace {

v1::Job JobAt(v1::JobState state, int attempts, int restarts) {
  v1::Job job;
  job.set_id("7");
  job.set_state(state);
  job.set_attempts(attempts);
  job.set_restarts(restarts);
  return job;
}

v1::RunPolicy Policy(int max_restarts, int backoff_seconds) {
  v1::RunPolicy policy;
  policy.set_max_restarts(max_restarts);
  policy.set_restart_backoff_seconds(backoff_seconds);
  return policy;
}

// The moves as "type:STATE:reason|status" ("-" for a status that is the reason).
std::vector<std::string> Moves(const AttemptEndPlan& plan) {
  std::vector<std::string> out;
  for (const JobMove& m : plan.moves) {
    out.push_back(m.type + ":" + v1::JobState_Name(m.to) + ":" + m.reason + "|" +
                  m.status_reason.value_or("-"));
  }
  return out;
}

struct Row {
  std::string name;
  AttemptOutcome outcome;
  std::string excluded;  // the report's excluded worker
  v1::Job job;
  // Expected.
  AttemptState attempt_state;
  std::string failure_class;
  bool finished;
  bool preempted;
  bool restart;
  std::optional<absl::Duration> eligible_after;
  std::string exclude;
  std::vector<std::string> moves;
};

TEST(PlanAttemptEndTest, EachOutcomeClosesTheAttemptAndMovesTheJobAsThePolicySays) {
  const v1::Job running = JobAt(v1::RUNNING, 2, 1);
  const v1::Job exhausted = JobAt(v1::RUNNING, 2, 3);
  const v1::Job preempting = JobAt(v1::PREEMPTING, 2, 1);
  const v1::Job scheduled = JobAt(v1::SCHEDULED, 2, 1);
  const std::vector<Row> rows = {
      {"succeeded",
       AttemptOutcome::kSucceeded,
       "",
       running,
       AttemptState::kSucceeded,
       "",
       true,
       false,
       false,
       std::nullopt,
       "",
       {"succeeded:SUCCEEDED:why|-"}},
      {"permanent",
       AttemptOutcome::kPermanent,
       "",
       running,
       AttemptState::kFailed,
       "permanent",
       true,
       false,
       false,
       std::nullopt,
       "",
       {"failed:FAILED:why|-"}},
      {"deadline",
       AttemptOutcome::kDeadline,
       "",
       running,
       AttemptState::kFailed,
       "deadline",
       true,
       false,
       false,
       std::nullopt,
       "",
       {"failed:FAILED:why|-"}},
      {"stopped",
       AttemptOutcome::kStopped,
       "",
       running,
       AttemptState::kStopped,
       "",
       false,
       false,
       false,
       std::nullopt,
       "",
       {}},
      {"retryable with restarts left",
       AttemptOutcome::kRetryable,
       "w1",
       running,
       AttemptState::kFailed,
       "retryable",
       false,
       false,
       true,
       absl::Seconds(30),
       "",
       {"restarting:RESTARTING:why|-",
        "requeued:QUEUED:restart 2 of 3 after 30s backoff; resumes from the newest "
        "checkpoint|waiting to restart"}},
      {"node fault with restarts left",
       AttemptOutcome::kNodeFault,
       "w1",
       running,
       AttemptState::kFailed,
       "node_fault",
       false,
       false,
       true,
       absl::Seconds(30),
       "w1",
       {"restarting:RESTARTING:why|-",
        "requeued:QUEUED:restart 2 of 3 after 30s backoff; excluding worker w1; resumes "
        "from the newest checkpoint|waiting to restart"}},
      {"retryable with no restarts left",
       AttemptOutcome::kRetryable,
       "",
       exhausted,
       AttemptState::kFailed,
       "retryable",
       true,
       false,
       false,
       std::nullopt,
       "",
       {"failed:FAILED:why; no restarts left (3 of 3 used)|-"}},
      {"node fault with no restarts left",
       AttemptOutcome::kNodeFault,
       "w1",
       exhausted,
       AttemptState::kFailed,
       "node_fault",
       true,
       false,
       false,
       std::nullopt,
       "",
       {"failed:FAILED:why; no restarts left (3 of 3 used)|-"}},
      {"node drained",
       AttemptOutcome::kNodeDrained,
       "",
       exhausted,
       AttemptState::kFailed,
       "node_fault",
       false,
       false,
       false,
       absl::ZeroDuration(),
       "",
       {"restarting:RESTARTING:why|-",
        "requeued:QUEUED:node drained: requeued at once without using a restart (3 of 3 "
        "used); resumes from the newest checkpoint|waiting to restart"}},
      {"hung node",
       AttemptOutcome::kNodeDrained,
       "w2",
       running,
       AttemptState::kFailed,
       "node_fault",
       false,
       false,
       false,
       absl::ZeroDuration(),
       "w2",
       {"restarting:RESTARTING:why|-",
        "requeued:QUEUED:node fault: requeued at once without using a restart (1 of 3 "
        "used); excluding worker w2; resumes from the newest checkpoint|waiting to "
        "restart"}},
      {"preempted",
       AttemptOutcome::kPreempted,
       "",
       preempting,
       AttemptState::kStopped,
       "preempted",
       false,
       true,
       false,
       std::nullopt,
       "",
       {"requeued:QUEUED:preempted: why; requeued without using a restart|waiting to be "
        "scheduled (preempted)"}},
      {"resized while running",
       AttemptOutcome::kResized,
       "",
       running,
       AttemptState::kStopped,
       "",
       false,
       false,
       false,
       std::nullopt,
       "",
       {"requeued:QUEUED:why; requeued without using a restart|waiting to be placed on "
        "more nodes"}},
      {"resized before running",
       AttemptOutcome::kResized,
       "",
       scheduled,
       AttemptState::kStopped,
       "",
       false,
       false,
       false,
       std::nullopt,
       "",
       {}},
      // The job already ended, or moved on to a later attempt: only the attempt closes.
      {"cancelled job",
       AttemptOutcome::kRetryable,
       "",
       JobAt(v1::CANCELLED, 2, 1),
       AttemptState::kFailed,
       "retryable",
       false,
       false,
       false,
       std::nullopt,
       "",
       {}},
      {"older attempt",
       AttemptOutcome::kSucceeded,
       "",
       JobAt(v1::RUNNING, 3, 1),
       AttemptState::kSucceeded,
       "",
       false,
       false,
       false,
       std::nullopt,
       "",
       {}},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const AttemptEndPlan plan =
        PlanAttemptEnd({2, row.outcome, "why", row.excluded}, row.job, Policy(3, 30));
    EXPECT_EQ(plan.attempt_state, row.attempt_state);
    EXPECT_EQ(plan.failure_class, row.failure_class);
    EXPECT_EQ(plan.mark_finished, row.finished);
    EXPECT_EQ(plan.record_preempted, row.preempted);
    EXPECT_EQ(plan.count_restart, row.restart);
    EXPECT_EQ(plan.eligible_after, row.eligible_after);
    EXPECT_EQ(plan.exclude_worker, row.exclude);
    EXPECT_EQ(Moves(plan), row.moves);
  }
}

}  // namespace
}  // namespace llamafleet
