#ifndef LLAMAFLEET_SERVER_CLUSTER_ATTEMPT_TRACKER_H_
#define LLAMAFLEET_SERVER_CLUSTER_ATTEMPT_TRACKER_H_

// One active attempt of a job as the coordinator follows it: its tasks' states, which of
// them a worker stopped reporting, its progress, and what its task reports mean for the
// attempt (all running, ended with an outcome). Pure logic on plain data: no I/O, no
// clock of its own (callers pass `now`), no threads; the ClusterManager owns one per job
// on its strand and applies what the methods return (writes, cancels, releases).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/job_state.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "scheduler/scheduler.h"
#include "server/cluster/hang_rules.h"
#include "storage/cluster_store.h"

namespace llamafleet {

// The canonical status code (absl::StatusCode / grpc::StatusCode numbering) of one rank's
// exit: its typed exit record (RankExit.status_code). A rank without a record (0) from a
// worker older than the typed record may still carry "CODE: message" in last_error (the
// form such workers relay); that is read as the code, so a mixed-version fleet during a
// rolling upgrade classifies the same way. 0 (OK) when neither says anything.
int ExitStatusCode(const v1::RankExit& exit);

// How a failed task is classified, from the ranks' typed exit records:
//
//   what the ranks say                                        outcome
//   --------------------------------------------------------  -----------
//   no exits at all (the worker could not launch the task)    kNodeFault
//   every rank exited 126/127 (trainer not executable)        kNodeFault
//   a rank's code INVALID_ARGUMENT, FAILED_PRECONDITION,      kPermanent
//     PERMISSION_DENIED, OUT_OF_RANGE, UNIMPLEMENTED
//   a rank's code NOT_FOUND naming a path of the spec         kPermanent
//   a rank's code NOT_FOUND about a checkpoint (its message   kRetryable
//     names a resume candidate or the checkpoint dir)
//   killed by a signal (exit_code > 128), no record, or       kRetryable
//     UNAVAILABLE / INTERNAL / ABORTED / DEADLINE_EXCEEDED /
//     RESOURCE_EXHAUSTED / UNKNOWN / CANCELLED / DATA_LOSS
//
// A permanent code from any rank wins over everything else (the ranks of one task fail
// for one reason; the others only lost their peer). A missing checkpoint is never
// permanent by itself: the next attempt resumes from an older one or starts fresh.
struct FailureContext {
  std::set<std::string> checkpoint_paths;  // the task's resume candidates and checkpoint dir
};
AttemptOutcome ClassifyFailure(const v1::TaskStatus& status, const FailureContext& context = {});

// What a task report means for its attempt.
struct TaskReportEffect {
  bool applied = false;         // the task's state changed (false: unknown or already final)
  bool record_running = false;  // every task runs now: the job becomes RUNNING
  std::optional<AttemptOutcome> end;  // the attempt ends with this outcome
  std::string reason;
  std::string excluded_worker;  // kNodeFault: the worker left out of the next placement
};

struct AttemptTracker {
  AttemptRecord record;
  v1::JobSpec spec;
  std::map<std::string, v1::TaskState> task_states;  // by task id
  std::map<std::string, absl::Time> missing_since;   // tasks their worker did not report
  bool committed = false;         // StartAttempt is durable (tasks were sent)
  bool running_recorded = false;
  bool stopping = false;          // ended or being stopped: waiting for tasks to exit
  bool ended = false;             // EndAttempt written (or being written)
  // When stopping began: tasks not terminal by stop_deadline are released anyway.
  absl::Time stop_deadline = absl::InfiniteFuture();
  absl::Time last_progress;
  int64_t last_step = -1;
  int master_port = 0;
  // Recorded checkpoints to resume from, newest first (sent as TaskSpec.resume_candidates).
  std::vector<v1::Checkpoint> resume_candidates;
  // Scheduler inputs.
  absl::Time last_preempted = absl::InfinitePast();
  int64_t total_steps = 0;
  std::string stopped_early;      // rank 0's early-stop reason: the reason of the success
  int64_t first_step = -1;        // first step reported in this attempt, and when
  absl::Time first_step_time;
  absl::Time last_step_time;
  // The job's owner (TaskSpec.owner: the worker keeps a token cache per owner).
  std::string owner;
  // The trainer's start-up phases reported so far (each is taken once), and when every
  // rank was running (InfinitePast when unknown, e.g. after a coordinator restart).
  std::set<std::string> phases_reported;
  absl::Time trainers_started = absl::InfinitePast();
  // Tokenizing progress turned into events: when the last one was written, and the
  // datasets whose finished build was (a few at most; see HandleTokenizing).
  absl::Time last_tokenizing_event = absl::InfinitePast();
  std::set<std::string> tokenized_paths;
  // A task's retryable failure held back until `until` (node_loss.h): the attempt ends
  // with it then, or as a node fault of a peer found gone first. Unset: none held.
  struct HeldFailure {
    std::string worker;  // the worker that reported it
    TaskReportEffect effect;
    absl::Time until;
  };
  std::optional<HeldFailure> held_failure;
  // Every rank's latest progress and the step times, for hang detection (hang_rules.h).
  GangProgress gang;
  // Which of its ranks are slower than the others (straggler_rules.h).
  StragglerTracker stragglers;

  // Ranks in the gang (the sum of its tasks' ranks).
  int WorldSize() const;

  // The worker a task was assigned to ("" for a task of another attempt).
  std::string WorkerOf(const std::string& task_id) const;

  // Applies a task status from its own worker (callers check the binding) and says what
  // it means. Reports after the attempt began stopping only update the task's state.
  TaskReportEffect OnTaskStatus(const std::string& worker, const v1::TaskStatus& status);

  // A step report from rank 0: progress for stall detection and the step rate.
  void OnStep(int64_t step, int64_t total_steps, absl::Time now);

  // A worker's new session does not list `task_id`: it is gone unless a late status
  // shows up within the grace.
  void MarkMissing(const std::string& task_id, absl::Time now);
  // Tasks missing for at least `grace` at `now`, and (once stop_deadline has passed)
  // every task still not terminal: nobody will report them any more.
  std::vector<std::string> Abandoned(absl::Time now, absl::Duration grace) const;
  // Records that a task will never report again: it counts as failed from now on.
  void Abandon(const std::string& task_id);

  // Begins stopping: tasks get `grace` to exit plus `slack` to report (the first call's
  // deadline stays).
  void BeginStopping(absl::Time now, absl::Duration grace, absl::Duration slack);

  // Every task terminal, or on a worker `is_gone` says is gone: the attempt holds nothing.
  template <typename IsGone>
  bool AllTasksDone(IsGone is_gone) const {
    for (const TaskRecord& t : record.tasks) {
      auto it = task_states.find(t.task_id);
      if (it != task_states.end() && IsTerminalTask(it->second)) continue;
      if (!is_gone(t.worker)) return false;
    }
    return true;
  }

  // What the attempt holds: one allocation per task not yet terminal (a terminal task's
  // GPUs are free again even while the rest of its gang stops).
  std::vector<sched::Allocation> HeldAllocations() const;

  // When the attempt should end: now + remaining steps / observed step rate, capped by
  // the active deadline (started + active_deadline_seconds). Unknown (nullopt) before two
  // step reports and without a deadline.
  std::optional<absl::Time> ExpectedEnd(absl::Time now) const;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_ATTEMPT_TRACKER_H_
