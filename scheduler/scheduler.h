#ifndef LLAMAFLEET_SCHEDULER_SCHEDULER_H_
#define LLAMAFLEET_SCHEDULER_SCHEDULER_H_

// The scheduler: a pure function of (pending queue, workers, running jobs, quotas, now)
// to decisions. No I/O, no threads, no clock of its own: the caller passes `now` and
// applies the decisions (turns placements into attempts, asks victims to checkpoint and
// stop). Same input, same output.
//
// One pass, in scheduling order (priority descending, then FIFO by queued_since, then
// job id):
//   1. A job whose selectors (instance type, EFA, labels, and GPU memory holding its
//      memory estimate) match no schedulable worker: kNoMatchingWorkers. A job
//      needing more nodes than there are matching workers big enough (in total GPUs,
//      free or not): kLargerThanCluster. A job that would push its queue past its GPU
//      quota: kQuotaExceeded. None of these take or hold capacity.
//   2. Gang placement, all or nothing: `nodes` distinct schedulable workers, each with
//      `gpus_per_node` free GPUs, the instance type, at least `efa_per_node` EFA
//      devices and every requested label, none of them excluded. Best fit: workers with
//      the fewest free GPUs that still suffice are taken first, so large gangs keep
//      whole nodes. A job that does not fit does not stop later jobs (backfill).
//   3. A job that does not fit, in this order:
//      a. GPUs already being freed by jobs marked `preempting` count as free for it
//         (claimed in scheduling order): kWaitingForPreemption, no new victims.
//      b. Preemption (Config::preemption): a small set of strictly lower-priority
//         running jobs, none preempted within Config::preemption_cooldown and none
//         already stopping, that frees a whole gang for it; none is chosen unless the
//         job then fits. Cost order: fewer GPUs lost (a victim's whole gang counts),
//         then lower priority, then most recently started, then job id. The set is
//         exact per worker (every subset of up to 8 eligible jobs), greedy across
//         workers by marginal cost (a multi-node victim already taken counts as free
//         everywhere it runs), then pruned until no victim can be dropped. Set cover is
//         NP-hard, so this is minimal, not always minimum. kWaitingForPreemption, or
//         kPreemptionCooldown when only jobs inside their cool-down could make room.
//      c. A job waiting longer than Config::reservation_after gets a reservation: the
//         `nodes` matching workers that will have `gpus_per_node` free soonest
//         (from running jobs' expected_end; workers closer to enough free GPUs first
//         when that is unknown). On each reserved worker, later jobs in the pass may not
//         take the GPUs the reserved job will need at its estimated start; only a job
//         whose expected_duration ends before that start may use them (EASY backfill).
//      Capacity held for a job in (a)-(c) is not available to any later job in the pass;
//      a later job that would fit without those holds gets kBlockedByReservation.
//      Holds live for one pass; the next pass recomputes them from its input. Two
//      reservations sharing a worker each hold what they need, but the second's estimate
//      does not subtract GPUs the first will take when they free up.
//   Elastic jobs (min_nodes < nodes): the capacity check of (1) uses min_nodes. A job that
//      does not fit on `nodes` in (2) (or whose quota leaves less than `nodes`) starts
//      on as many free workers as there are, down to min_nodes. Rules against starving
//      rigid jobs: only GPUs free in this pass are taken (never ones held for a
//      reservation or a preemption of a job ahead in the order), an elastic job never
//      preempts or reserves for fewer than `nodes`, and it never takes more than
//      `nodes`. A job that cannot start even on min_nodes continues with (3) as a rigid
//      job of `nodes` nodes.
//   4. Every job left pending gets a code, a message in the form "needs 3 nodes with 8
//      free GPUs and instance type p5.48xlarge; 2 match", its 1-based position among
//      the pending jobs of its queue, and an estimated start where expected_end values
//      allow one (always for reserved jobs; for other blocked jobs, computed once per
//      job shape and size while capacity is unchanged, up to Config::max_estimates
//      computations per pass). Without a reservation the estimate is the earliest time
//      the job could start, ignoring jobs ahead of it: a lower bound.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace llamafleet::sched {

// A registered worker. `gpus` is its GPU count, or its configured CPU ranks.
struct Worker {
  std::string id;
  std::string instance_type;
  std::map<std::string, std::string> labels;
  int gpus = 0;
  int efa = 0;              // EFA devices
  bool schedulable = true;  // alive and not draining
  int64_t gpu_memory_bytes = 0;  // memory of its smallest GPU; 0 = unknown or a CPU worker
};

// `gpus` GPUs (or CPU ranks) of one worker given to one node of a job.
struct Allocation {
  std::string worker_id;
  int gpus = 0;
};

struct RunningJob {
  int64_t job_id = 0;
  std::string queue;
  int priority = 0;
  std::vector<Allocation> allocations;  // index = node_rank
  absl::Time started;
  absl::Time last_preempted = absl::InfinitePast();
  std::optional<absl::Time> expected_end;  // unknown when absent
  bool preempting = false;                 // already asked to checkpoint and stop
};

struct PendingJob {
  int64_t job_id = 0;
  std::string queue;
  int priority = 0;  // higher runs first
  absl::Time queued_since;
  int nodes = 1;
  int gpus_per_node = 1;
  int efa_per_node = 0;
  std::string instance_type;  // empty = any
  std::map<std::string, std::string> node_labels;
  std::set<std::string> excluded_workers;  // node faults from earlier attempts
  absl::Time last_preempted = absl::InfinitePast();
  std::optional<absl::Duration> expected_duration;  // enables backfill into reservations
  // Memory one rank needs (memory_estimate.h); workers whose GPUs report less do not
  // match. 0 = no requirement. Workers without a GPU memory figure are not checked.
  int64_t memory_per_gpu_bytes = 0;
  // Elastic jobs: the gang may start on fewer nodes, down to min_nodes (0 = nodes: rigid).
  int min_nodes = 0;
};

struct QueueConfig {
  int64_t gpu_quota = 0;  // GPUs the queue's running jobs may hold together; 0 = unlimited
};

struct Config {
  // A pending job older than this gets a reservation that backfill may not take.
  absl::Duration reservation_after = absl::Minutes(30);
  // A running job preempted less than this long ago is not a preemption victim.
  absl::Duration preemption_cooldown = absl::Minutes(10);
  bool preemption = true;
  // Reservations made per pass (the oldest-in-order starving jobs get them first). Bounds
  // the pass's cost; a starving job beyond the cap gets its reservation once those ahead
  // of it have started.
  int max_reservations = 32;
  // Estimated-start computations per pass for blocked jobs without a reservation (jobs
  // of the same shape and size share one while capacity is unchanged).
  int max_estimates = 256;
};

struct Placement {
  int64_t job_id = 0;
  std::vector<Allocation> allocations;  // index = node_rank
};

// Ask `victim_job_id` to checkpoint and stop so that `for_job_id` can run.
struct Preemption {
  int64_t victim_job_id = 0;
  int64_t for_job_id = 0;
};

enum class PendingCode {
  kInsufficientCapacity,
  kNoMatchingWorkers,
  kQuotaExceeded,
  kBlockedByReservation,
  kWaitingForPreemption,
  kPreemptionCooldown,
  kLargerThanCluster,
};

// "INSUFFICIENT_CAPACITY", ... (stable names for logs, the API and the CLI).
const char* PendingCodeName(PendingCode code);

struct Pending {
  int64_t job_id = 0;
  PendingCode code = PendingCode::kInsufficientCapacity;
  std::string message;
  int queue_position = 0;  // 1-based among this pass's pending jobs of the same queue
  std::optional<absl::Time> estimated_start;
};

struct Decisions {
  std::vector<Placement> placements;    // in scheduling order
  std::vector<Preemption> preemptions;  // grouped by for_job_id, in scheduling order
  std::vector<Pending> pending;         // in scheduling order
};

class Scheduler {
 public:
  explicit Scheduler(Config config);

  // One scheduling pass. Pure: reads only its arguments, keeps no state between calls.
  // Running jobs' allocations on unknown workers are ignored; GPUs over-allocated on a
  // worker count as zero free. A queue missing from `queues` has no quota. Every pending
  // job appears exactly once, either in placements or in pending.
  Decisions Schedule(const std::vector<PendingJob>& pending, const std::vector<Worker>& workers,
                     const std::vector<RunningJob>& running,
                     const std::map<std::string, QueueConfig>& queues, absl::Time now) const;
  // The same over jobs held elsewhere (the coordinator keeps them converted across passes).
  Decisions Schedule(const std::vector<const PendingJob*>& pending,
                     const std::vector<Worker>& workers, const std::vector<RunningJob>& running,
                     const std::map<std::string, QueueConfig>& queues, absl::Time now) const;

  const Config& config() const { return config_; }

 private:
  const Config config_;
};

}  // namespace llamafleet::sched

#endif  // LLAMAFLEET_SCHEDULER_SCHEDULER_H_
