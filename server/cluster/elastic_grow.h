#ifndef LLAMAFLEET_SERVER_CLUSTER_ELASTIC_GROW_H_
#define LLAMAFLEET_SERVER_CLUSTER_ELASTIC_GROW_H_

// Whether a running elastic gang should grow back to more nodes now. Pure: a
// function of its arguments, no I/O, no clock of its own; the ClusterManager calls it
// right after a checkpoint of the job was durably recorded and, on "grow", ends the
// attempt (AttemptOutcome::kResized) so that the next scheduling pass places the job
// again on more nodes, resuming from that checkpoint.
//
// The rules, in order (the first that fails says why not):
//   1. The job is elastic (min_nodes < nodes) and its attempt runs on fewer than
//      `nodes` nodes: it never grows beyond `nodes`.
//   2. Every rank has started and the attempt is not ending.
//   3. A checkpoint of this attempt was just recorded, and it is not the last step's (a
//      job about to finish is not restarted): the regrown gang resumes from it and loses
//      no steps.
//   4. The cooldown (resources.elastic_cooldown_seconds) has passed since the attempt
//      started: at most one resize per cooldown.
//   5. Growing would gain nodes without taking any from a job ahead. The decision replays
//      the scheduling pass that would follow the attempt's end: the job's attempt
//      removed from the running jobs, the job added to the pending ones (with its queue
//      position, i.e. its original queued_since), everything else as the last pass saw
//      it. It grows when that pass places it on more nodes than it has and places no other
//      job on a worker it holds now. So every rule of the scheduler against starving
//      rigid jobs holds (scheduler.h: an elastic job takes only GPUs free in the pass,
//      never ones held for a reservation or a preemption of a job ahead), a queued job
//      ahead that could use the freed or returned workers blocks the grow, and the grow
//      never preempts (a job placed in the pass made no preemption).

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "scheduler/scheduler.h"

namespace llamafleet {

struct GrowCheck {
  // The job as it would be queued again (its queued_since keeps its place in the order).
  sched::PendingJob job;
  // Its running attempt.
  int nodes_now = 0;
  std::vector<std::string> workers_now;  // by node rank
  absl::Time attempt_started;
  bool running = false;              // every rank started, not ending
  bool checkpoint_recorded = false;  // a checkpoint of this attempt was just recorded
  int64_t checkpoint_step = 0;       // its step
  int64_t total_steps = 0;           // the run's last step as the trainer reports it; 0 unknown
  absl::Duration cooldown = absl::Minutes(5);
};

struct GrowDecision {
  bool grow = false;
  int nodes_after = 0;                     // when growing
  std::vector<std::string> added_workers;  // when growing, sorted
  std::string why;                         // for logs and tests: why (not)
};

// Rules 1-4 alone (no scheduler input needed): why the job cannot grow now, or "" when
// only rule 5 is left to check. Lets the caller skip building the replay's input.
std::string GrowBlocked(const GrowCheck& check, absl::Time now);

// All five rules. `pending`, `workers`, `running`: the scheduler's input as the last pass would see it
// now (BuildSchedulerInput), with the job's own attempt among `running`.
GrowDecision DecideGrow(const GrowCheck& check, const std::vector<sched::PendingJob>& pending,
                        const std::vector<sched::Worker>& workers,
                        const std::vector<sched::RunningJob>& running,
                        const std::map<std::string, sched::QueueConfig>& queues,
                        const sched::Scheduler& scheduler, absl::Time now);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_ELASTIC_GROW_H_
