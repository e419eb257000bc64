#ifndef LLAMAFLEET_SCHEDULER_PREEMPTION_H_
#define LLAMAFLEET_SCHEDULER_PREEMPTION_H_

// Internal to the scheduler: making room for a job that does not fit by stopping
// lower-priority running jobs. Both functions either record the job as pending with
// kWaitingForPreemption (holding the gang's capacity for it) and return true, or change
// nothing the next job could see and return false.

#include "scheduler/pass_state.h"
#include "scheduler/scheduler.h"

namespace llamafleet::sched::internal {

// GPUs being freed by jobs already asked to stop count as free: a job they would make
// fit claims them (so no more victims are picked for it) and waits.
bool WaitForPreempting(PassState& pass, const PendingJob& job, const Shape& shape);

// Chooses victims (scheduler.h, 3b) and appends them to PassState::out.preemptions. When
// it fails only because of victims' cool-downs it sets PassState::last_preempt_code to
// kPreemptionCooldown. Failures are remembered per shape: a job of the same shape, no
// higher priority and no larger size fails without a search.
bool Preempt(PassState& pass, const PendingJob& job, Shape& shape);

}  // namespace llamafleet::sched::internal

#endif  // LLAMAFLEET_SCHEDULER_PREEMPTION_H_
