#ifndef LLAMAFLEET_SERVER_CLUSTER_PASS_POLICY_H_
#define LLAMAFLEET_SERVER_CLUSTER_PASS_POLICY_H_

// When the cluster loop runs a scheduling pass. Used only on the loop's strand (not
// thread-safe); times that bound how often passes run are on the steady clock, the
// periodic pass on the cluster's Clock.
//
//   - Wanted now (capacity freed that a queued job could use, an attempt that failed to
//     start): a pass at the next turn of the loop.
//   - Wanted soon (new submissions, a worker registered): coalesced, at most one per
//     pass_interval or the last pass's duration, if longer, so a stream of commits is not
//     one pass each and passes take at most half of the loop.
//   - A wish for soon is dropped when the pass could see nothing new: the workers are the
//     last pass's and the queue is the last pass's but for jobs that pass started (a
//     submission is announced twice, by the job service's Poke and by its commit's event).
//   - Otherwise a pass every 2 s, which keeps the queue's explanations current.
//
// Freed capacity is worth a pass at once only to a queued job that could use it: one the
// last pass left waiting for capacity, the job whose attempt freed it, queued again (its
// attempt kept it out of that pass), or a job of a sweep whose throttle that attempt held.
// Jobs no worker matches, or larger than the cluster, stay so however many GPUs are free.

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/time/time.h"
#include "scheduler/scheduler.h"
#include "server/cluster/attempt_tracker.h"
#include "storage/queued_jobs.h"

namespace llamafleet {

class PassPolicy {
 public:
  using SteadyTime = std::chrono::steady_clock::time_point;
  using SteadyDuration = std::chrono::steady_clock::duration;

  explicit PassPolicy(absl::Duration pass_interval);

  void WantNow() { wanted_now_ = true; }
  void WantSoon() { wanted_soon_ = true; }
  // The attempt of `job_id` ended or released its slots: a pass at once if a queued job
  // waits for capacity, or waits for this job (a sweep's throttle).
  void CapacityFreed(int64_t job_id);
  // `job_id` reached a terminal state: a pass at once if the last pass held a job back
  // waiting for it (depends_on, a sweep's throttle).
  void JobEnded(int64_t job_id);

  // How long the loop may wait for work before a pass is due (at most `tick`).
  SteadyDuration Wait(SteadyDuration tick, SteadyTime now) const;
  // Whether a wanted pass is due at this turn of the loop.
  bool Due(SteadyTime now) const;
  // Whether a wish for soon may depend on the queue alone: one is pending, none for now,
  // and the workers (by `workers_version`) are the last pass's. Then the caller reads the
  // queue and asks Run with it.
  bool ShouldCompareQueue(uint64_t workers_version) const;
  // Whether the tick at `now` runs a pass. `queue`, when given (ShouldCompareQueue), is
  // the queue now: a wish for soon it shows nothing new for is dropped.
  bool Run(absl::Time now, const QueuedJobsSnapshot* queue,
           const std::map<int64_t, AttemptTracker>& attempts);

  // A pass begins at `now`: the wishes it answers are cleared.
  void Began(absl::Time now);
  // The pass could not read the queue: whether a job waits for capacity is not known.
  void Failed() { waits_for_capacity_ = true; }
  // The pass over `queue` and the workers of `workers_version` ran from `start` to `end`;
  // `pending` are the jobs it left queued, `held_by_attempt` those it left out while their
  // previous attempt was active, `awaited_jobs` the jobs others wait for (both in id
  // order).
  void Ran(QueuedJobsSnapshot queue, uint64_t workers_version,
           const std::vector<sched::Pending>& pending, std::vector<int64_t> held_by_attempt,
           std::vector<int64_t> awaited_jobs, SteadyTime start, SteadyTime end);

 private:
  const SteadyDuration interval_;
  std::vector<int64_t> awaited_;
  bool wanted_now_ = true;  // the first turn of the loop passes
  bool wanted_soon_ = false;
  SteadyTime next_allowed_;
  absl::Time last_pass_ = absl::InfinitePast();
  // The last pass's inputs, to tell whether a wish for soon has anything new to see.
  bool ran_ = false;
  QueuedJobsSnapshot last_queue_;
  uint64_t last_workers_version_ = 0;
  // Whether the last pass left a job waiting for capacity (any explanation but "no
  // matching workers" and "larger than the cluster").
  bool waits_for_capacity_ = true;
  std::vector<int64_t> held_by_attempt_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_PASS_POLICY_H_
