#ifndef LLAMAFLEET_SCHEDULER_PLACEMENT_H_
#define LLAMAFLEET_SCHEDULER_PLACEMENT_H_

// Internal to the scheduler: packing a gang onto workers. Best fit: workers with the
// fewest free GPUs that still suffice are taken first (then class, then worker id), so
// large gangs keep whole nodes. A placement is appended to PassState::out and its GPUs
// taken; a job that does not fit changes nothing.

#include <vector>

#include "scheduler/pass_state.h"
#include "scheduler/scheduler.h"

namespace llamafleet::sched::internal {

// All `nodes` on available GPUs, or, for a job with an expected duration, on GPUs of
// reservations it ends before (EASY backfill). False when it does not fit.
bool Place(PassState& pass, const PendingJob& job, const Shape& shape);

// An elastic job that does not fit on `nodes`: the most free workers, at most `at_most`
// and at least `at_least`, best fit; never preemption or reserved GPUs. Returns the
// nodes placed (0: nothing changed).
int PlaceElastic(PassState& pass, const PendingJob& job, const Shape& shape, int at_most,
                 int at_least);

// Appends available workers with gpus_per_node free GPUs, best fit, until `chosen`
// holds n (fewer when there are not enough). Changes nothing.
void FillFree(const PassState& pass, const PendingJob& job, const Shape& shape, int n,
              std::vector<int>* chosen);

}  // namespace llamafleet::sched::internal

#endif  // LLAMAFLEET_SCHEDULER_PLACEMENT_H_
