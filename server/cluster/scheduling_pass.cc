// A scheduling pass: the queue as stored (JobStore::SnapshotQueuedJobs), the workers and
// the attempts make the scheduler's input (scheduler_input.h); the scheduler decides; the
// pass applies its decisions (attempts started in one write, victims preempted, jobs past
// their deadline failed from the queue) and publishes its explanations. Strand-only.
#include "server/cluster/cluster_manager.h"

#include <chrono>
#include <set>

#include "absl/strings/numbers.h"
#include "jobspec/dependencies.h"
#include "storage/job_writes.h"

#include "server/metrics.h"
#include "spdlog/spdlog.h"

namespace llamafleet {

void ClusterManager::RunPass(std::optional<QueuedJobsSnapshot> queue) {
  const auto pass_start = std::chrono::steady_clock::now();
  const absl::Time now = options_.clock->Now();
  pass_.Began(now);
  if (!queue.has_value()) {
    absl::StatusOr<QueuedJobsSnapshot> queued = store_->SnapshotQueuedJobs();
    if (!queued.ok()) {
      spdlog::error("scheduling pass: cannot read the queue: {}", queued.status().ToString());
      pass_.Failed();
      return;
    }
    queue = *std::move(queued);
  }
  const SchedulerInput input =
      BuildSchedulerInput(*queue, workers_.Views(), attempts_, now, ParentStates(*queue));
  for (const auto& [id, reason] : input.deadline_passed) {
    // No active attempt to end: the job fails straight from the queue.
    Write(FailQueuedJobTxn(id, reason), [](absl::Status) {});
  }
  for (const auto& [id, reason] : input.dependency_failed) {
    spdlog::info("job {}: cancelled: {}", id, reason);
    Write(TransitionJobTxn(id, {v1::QUEUED}, v1::CANCELLED, "cancelled", reason,
                           std::make_shared<CancelJobResult>()),
          [](absl::Status) {});
  }
  sched::Decisions d =
      scheduler_.Schedule(input.pending, input.workers, input.running, options_.queues, now);

  // The attempts this pass starts, written in one transaction (each in a savepoint of its
  // own: one that fails leaves the others started).
  const std::set<std::string> unavailable = workers_.Unavailable();
  std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> starts;
  for (const sched::Placement& p : d.placements) {
    starts.push_back(StartAttempt(*input.jobs.at(p.job_id), p, unavailable, now));
  }
  WriteEach(std::move(starts));
  for (const sched::Preemption& p : d.preemptions) Preempt(p);

  const auto pass_end = std::chrono::steady_clock::now();
  pass_.Ran(*std::move(queue), workers_.version(), d.pending, input.held_by_attempt,
            input.awaited_jobs, pass_start, pass_end);
  published_.SetPending(input.held_back, std::move(d.pending));
  if (!d.placements.empty()) publish_assignments_ = true;
  publish_workers_ = true;
  if (options_.metrics != nullptr) {
    options_.metrics->RecordSchedulingPass(absl::FromChrono(pass_end - pass_start));
  }
}

std::map<int64_t, v1::JobState> ClusterManager::ParentStates(const QueuedJobsSnapshot& queue) {
  std::map<int64_t, v1::JobState> states;
  std::set<int64_t> wanted;
  for (const SchedulableJob& j : queue) {
    if (int64_t id; absl::SimpleAtoi(j.job.id(), &id)) states[id] = j.job.state();
    for (int64_t parent : ParentIds(j.job.spec())) wanted.insert(parent);
  }
  for (int64_t parent : wanted) {
    if (states.count(parent)) continue;
    absl::StatusOr<v1::Job> job = store_->GetJob(parent);
    if (job.ok()) {
      states[parent] = job->state();
    } else if (job.status().code() != absl::StatusCode::kNotFound) {
      // Unknown for now: the dependent waits (a parent is judged gone only when the
      // store says so).
      states[parent] = v1::JOB_STATE_UNSPECIFIED;
    }
  }
  for (auto it = states.begin(); it != states.end();) {
    it = wanted.count(it->first) ? std::next(it) : states.erase(it);
  }
  return states;
}

}  // namespace llamafleet
