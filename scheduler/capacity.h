#ifndef LLAMAFLEET_SCHEDULER_CAPACITY_H_
#define LLAMAFLEET_SCHEDULER_CAPACITY_H_

// Internal to the scheduler: what is free, per worker, per worker class and per queue,
// and the bookkeeping that changes it (placements take GPUs, holds keep them from later
// jobs in the pass). Every change of a worker's free GPUs goes through SetFree, which
// keeps the per-class indexes and PassState::state_version in step.

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "scheduler/pass_state.h"
#include "scheduler/scheduler.h"

namespace llamafleet::sched::internal {

// Indexes the workers (by id; a duplicate id after the first is ignored) into classes.
void IndexWorkers(PassState& pass);
// Subtracts running jobs' allocations from their workers and counts their queues' use.
// After IndexWorkers.
void IndexRunning(PassState& pass);

// The queue's quota and use; a queue missing from the input has no quota.
QueueState& QueueFor(PassState& pass, const std::string& name);
// The job's selectors evaluated against every worker class, once per pass and shape.
Shape& ShapeFor(PassState& pass, const PendingJob& job);

void SetFree(PassState& pass, int idx, int free, int raw);
// Holds `gpus` of a worker's available GPUs for `job_id`: later jobs in the pass cannot
// take them. `until` bounds reservation holds (a job ending before it may use them);
// nullopt marks a hold nobody may use (capacity waiting for a preemption).
void Hold(PassState& pass, int idx, int gpus, int64_t job_id, std::optional<absl::Time> until);
// Gives `gpus` of a worker to `job` (from available GPUs first, then from reservation
// holds a job ending before them may use) and records when they come back.
void Take(PassState& pass, int idx, int gpus, const PendingJob& job);

// Matching workers not excluded for the job with at least g GPUs: available to the pass
// (CountFree), free ignoring holds (CountRaw), in total (CountCapacity).
int CountFree(const PassState& pass, const PendingJob& job, const Shape& shape, int g);
int CountRaw(const PassState& pass, const PendingJob& job, const Shape& shape, int g);
int CountCapacity(const PassState& pass, const PendingJob& job, const Shape& shape, int g);

}  // namespace llamafleet::sched::internal

#endif  // LLAMAFLEET_SCHEDULER_CAPACITY_H_
