#ifndef LLAMAFLEET_SCHEDULER_RESERVATION_H_
#define LLAMAFLEET_SCHEDULER_RESERVATION_H_

// Internal to the scheduler: when a blocked job could start, and the reservations that
// keep later jobs in the pass off the workers a starving job will start on.

#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "scheduler/pass_state.h"
#include "scheduler/scheduler.h"

namespace llamafleet::sched::internal {

// The `nodes` matching workers that will have `gpus_per_node` free soonest (appended to
// `chosen` when given), and when the last of them will (nullopt when some needed
// expected_end is unknown). Ties: fewer GPUs missing now, then worker id. Ignores jobs
// ahead of this one: a lower bound.
std::optional<absl::Time> EarliestStart(PassState& pass, const PendingJob& job, const Shape& shape,
                                        std::vector<int>* chosen);

// EarliestStart for a job without a reservation. Jobs of the same shape and size see
// the same answer until capacity changes, so it is computed once per (shape, size,
// state); at most Config::max_estimates computations per pass (nullopt beyond).
std::optional<absl::Time> CachedEarliestStart(PassState& pass, const PendingJob& job,
                                              const Shape& shape);

// Holds, on each reserved worker, the available GPUs the job will need at `start`:
// all of them up to gpus_per_node when the start is unknown; otherwise only what
// running jobs ending by `start` will not give back. A job ending before `start` may
// still use the held GPUs.
void Reserve(PassState& pass, const PendingJob& job, const std::vector<int>& workers,
             std::optional<absl::Time> start);

}  // namespace llamafleet::sched::internal

#endif  // LLAMAFLEET_SCHEDULER_RESERVATION_H_
