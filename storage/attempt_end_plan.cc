#include "storage/attempt_end_plan.h"

#include "absl/strings/str_cat.h"
#include "common/job_state.h"

namespace llamafleet {
namespace {

// The attempt row's final state and failure class, from the outcome alone.
void PlanAttemptRow(AttemptOutcome outcome, AttemptEndPlan* plan) {
  plan->attempt_state = AttemptState::kFailed;
  switch (outcome) {
    case AttemptOutcome::kSucceeded:
      plan->attempt_state = AttemptState::kSucceeded;
      break;
    case AttemptOutcome::kRetryable:
      plan->failure_class = "retryable";
      break;
    case AttemptOutcome::kNodeFault:
      plan->failure_class = "node_fault";
      break;
    case AttemptOutcome::kNodeDrained:
      plan->failure_class = "node_fault";
      break;
    case AttemptOutcome::kPermanent:
      plan->failure_class = "permanent";
      break;
    case AttemptOutcome::kDeadline:
      plan->failure_class = "deadline";
      break;
    case AttemptOutcome::kPreempted:
      plan->attempt_state = AttemptState::kStopped;
      plan->failure_class = "preempted";
      break;
    case AttemptOutcome::kStopped:
      plan->attempt_state = AttemptState::kStopped;
      break;
    case AttemptOutcome::kResized:
      plan->attempt_state = AttemptState::kStopped;
      break;
  }
}

void Finish(v1::JobState to, const std::string& type, std::string reason, AttemptEndPlan* plan) {
  plan->mark_finished = true;
  plan->moves.push_back({type, to, std::move(reason), std::nullopt});
}

std::string ExcludingNote(const std::string& worker) {
  return worker.empty() ? "" : absl::StrCat("; excluding worker ", worker);
}

// A drained or hung node: requeued at once, no restart used.
void PlanNodeDrained(const AttemptEndReport& report, const v1::Job& job,
                     const v1::RunPolicy& policy, AttemptEndPlan* plan) {
  const std::string& excluded = report.excluded_worker;
  plan->eligible_after = absl::ZeroDuration();
  plan->exclude_worker = excluded;
  plan->moves.push_back({"restarting", v1::RESTARTING, report.reason, std::nullopt});
  plan->moves.push_back(
      {"requeued", v1::QUEUED,
       absl::StrCat(excluded.empty() ? "node drained" : "node fault",
                    ": requeued at once without using a restart (", job.restarts(), " of ",
                    policy.max_restarts(), " used)", ExcludingNote(excluded),
                    "; resumes from the newest checkpoint"),
       "waiting to restart"});
}

// A failure that uses a restart: requeued after the backoff while restarts last.
void PlanRestart(const AttemptEndReport& report, const v1::Job& job, const v1::RunPolicy& policy,
                 AttemptEndPlan* plan) {
  if (job.restarts() >= policy.max_restarts()) {
    Finish(v1::FAILED, "failed",
           absl::StrCat(report.reason, "; no restarts left (", job.restarts(), " of ",
                        policy.max_restarts(), " used)"),
           plan);
    return;
  }
  std::string excluded;
  if (report.outcome == AttemptOutcome::kNodeFault) excluded = report.excluded_worker;
  plan->count_restart = true;
  plan->eligible_after = absl::Seconds(policy.restart_backoff_seconds());
  plan->exclude_worker = excluded;
  plan->moves.push_back({"restarting", v1::RESTARTING, report.reason, std::nullopt});
  plan->moves.push_back(
      {"requeued", v1::QUEUED,
       absl::StrCat("restart ", job.restarts() + 1, " of ", policy.max_restarts(), " after ",
                    policy.restart_backoff_seconds(), "s backoff", ExcludingNote(excluded),
                    "; resumes from the newest checkpoint"),
       "waiting to restart"});
}

}  // namespace

AttemptEndPlan PlanAttemptEnd(const AttemptEndReport& report, const v1::Job& job,
                              const v1::RunPolicy& policy) {
  AttemptEndPlan plan;
  PlanAttemptRow(report.outcome, &plan);
  if (IsTerminal(job.state()) || job.attempts() != report.attempt) return plan;
  switch (report.outcome) {
    case AttemptOutcome::kStopped:
      break;
    case AttemptOutcome::kSucceeded:
      Finish(v1::SUCCEEDED, "succeeded", report.reason, &plan);
      break;
    case AttemptOutcome::kPermanent:
    case AttemptOutcome::kDeadline:
      Finish(v1::FAILED, "failed", report.reason, &plan);
      break;
    case AttemptOutcome::kResized:
      if (job.state() != v1::RUNNING) break;
      plan.moves.push_back({"requeued", v1::QUEUED,
                            absl::StrCat(report.reason, "; requeued without using a restart"),
                            "waiting to be placed on more nodes"});
      break;
    case AttemptOutcome::kPreempted:
      plan.record_preempted = true;
      plan.moves.push_back(
          {"requeued", v1::QUEUED,
           absl::StrCat("preempted: ", report.reason, "; requeued without using a restart"),
           "waiting to be scheduled (preempted)"});
      break;
    case AttemptOutcome::kNodeDrained:
      PlanNodeDrained(report, job, policy, &plan);
      break;
    case AttemptOutcome::kRetryable:
    case AttemptOutcome::kNodeFault:
      PlanRestart(report, job, policy, &plan);
      break;
  }
  return plan;
}

}  // namespace llamafleet
