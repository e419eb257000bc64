#ifndef LLAMAFLEET_STORAGE_ATTEMPT_END_PLAN_H_
#define LLAMAFLEET_STORAGE_ATTEMPT_END_PLAN_H_

// The policy of an attempt's end: how the attempt row closes and what its job does next
// (finish, requeue with or without a restart, backoff, excluded worker), decided by a pure
// function of the outcome and the job as the ending transaction reads it. No SQLite, no
// clock: EndAttemptTxn (storage/cluster_store.h) reads the job, asks PlanAttemptEnd, and
// applies the plan in the same transaction.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

// attempts.state as stored (the numbers are the schema's).
enum class AttemptState { kActive = 0, kSucceeded = 1, kFailed = 2, kStopped = 3 };

// How an attempt ended, and what the job does next.
enum class AttemptOutcome {
  kSucceeded,    // job → SUCCEEDED
  kRetryable,    // RESTARTING → QUEUED after backoff while restarts last, else FAILED
  kNodeFault,    // as kRetryable, and the worker is excluded from the job's next placement
  kPermanent,    // job → FAILED now (bad spec, bad data)
  kPreempted,    // PREEMPTING → QUEUED, restart budget untouched
  kStopped,      // the job was already ended (cancelled); only the attempt is closed
  kDeadline,     // active_deadline exceeded: job → FAILED
  kResized,      // an elastic gang stopped to grow: RUNNING → QUEUED at once, restart
                 // budget, backoff and preemption record untouched; not a failure
  kNodeDrained,  // a worker of the gang was drained, or hung inside a collective (a node
                 // fault, failure class node_fault): RESTARTING → QUEUED at once, restart
                 // budget and backoff untouched (the node's fault, not the job's); with
                 // excluded_worker set (a hang), that worker is left out of the next placement
};

// What the coordinator reports about the end of attempt `attempt`.
struct AttemptEndReport {
  int attempt = 0;
  AttemptOutcome outcome = AttemptOutcome::kSucceeded;
  std::string reason;           // human-readable; becomes the event's reason
  std::string excluded_worker;  // kNodeFault, kNodeDrained (a hung node); "" for none
};

// One state change of the job, with its event (Txn::Transition's arguments).
struct JobMove {
  std::string type;  // the event's type ("failed", "restarting", "requeued", ...)
  v1::JobState to = v1::JOB_STATE_UNSPECIFIED;
  std::string reason;
  std::optional<std::string> status_reason;  // nullopt: the reason
};

// What the ending transaction writes. Applied in this order: the attempt row, then (when
// `moves` is not empty) the job's columns, then the moves.
struct AttemptEndPlan {
  // The attempt row: its final state and failure class ("" for none).
  AttemptState attempt_state = AttemptState::kFailed;
  std::string failure_class;
  // The job's columns.
  bool mark_finished = false;     // finish_us = now (the job ends)
  bool record_preempted = false;  // last_preempted_us = now
  bool count_restart = false;     // restarts + 1
  // eligible_us = now + this (requeued jobs wait for it); nullopt leaves it.
  std::optional<absl::Duration> eligible_after;
  std::string exclude_worker;  // appended to excluded_workers; "" for none
  std::vector<JobMove> moves;  // empty: the job stays as it is
};

// The plan for `report` on `job` (as stored now) under its `policy`. The attempt row is
// planned from the outcome alone; the job moves only when it is not terminal and
// `report.attempt` is its current attempt (ending an attempt twice, or an older one,
// leaves it as it is). A kRetryable or kNodeFault end with `policy.max_restarts()` used
// fails the job; otherwise it counts a restart and waits `restart_backoff_seconds`.
AttemptEndPlan PlanAttemptEnd(const AttemptEndReport& report, const v1::Job& job,
                              const v1::RunPolicy& policy);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_ATTEMPT_END_PLAN_H_
