// The pass, as the algorithm in scheduler.h reads: index the input, then every pending
// job in scheduling order through the steps numbered there. The parts keep the state of
// the pass in a PassState (pass_state.h): capacity.h counts and changes free GPUs,
// placement.h packs gangs, preemption.h picks victims, reservation.h holds capacity for
// starving jobs and estimates starts, explanations.h words the pending reasons.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include "scheduler/capacity.h"
#include "scheduler/explanations.h"
#include "scheduler/pass_state.h"
#include "scheduler/placement.h"
#include "scheduler/preemption.h"
#include "scheduler/reservation.h"

namespace llamafleet::sched {
namespace {

using internal::PassState;
using internal::QueueState;
using internal::Shape;

// Step 3 for a job that does not fit (or, elastic, not even on min_nodes): capacity being
// freed for it, then preemption, then a reservation once it starves; otherwise the
// reason it waits.
void Blocked(PassState& pass, const PendingJob& job, Shape& shape) {
  const int n = job.nodes;
  const int g = job.gpus_per_node;
  pass.last_preempt_code.reset();
  if (internal::WaitForPreempting(pass, job, shape)) return;
  if (pass.config.preemption && job.priority > pass.min_victim_priority &&
      internal::Preempt(pass, job, shape)) {
    return;
  }
  std::optional<absl::Time> estimate;
  std::string reserved;
  const bool starving = pass.now - job.queued_since > pass.config.reservation_after;
  if (starving && pass.reservations < pass.config.max_reservations) {
    ++pass.reservations;
    std::vector<int> workers;
    estimate = internal::EarliestStart(pass, job, shape, &workers);
    internal::Reserve(pass, job, workers, estimate);
    reserved = internal::ReservedText(job);
  } else {
    estimate = internal::CachedEarliestStart(pass, job, shape);
  }
  if (!pass.last_preempt_code && internal::CountRaw(pass, job, shape, g) >= n) {
    // It would fit but for capacity held for jobs ahead of it.
    internal::AddPending(pass, job, PendingCode::kBlockedByReservation,
                         internal::HeldText(pass, job, shape, reserved), estimate);
    return;
  }
  PendingCode code = pass.last_preempt_code.value_or(PendingCode::kInsufficientCapacity);
  internal::AddPending(pass, job, code, internal::NoCapacityText(pass, job, shape, code, reserved),
                       estimate);
}

// One job, steps 1 to 3 (each pending outcome records its reason, step 4).
void Consider(PassState& pass, const PendingJob& job) {
  const int n = job.nodes;
  const int g = job.gpus_per_node;
  if (n < 1 || g < 1) {
    internal::AddPending(pass, job, PendingCode::kNoMatchingWorkers,
                         internal::InvalidSizeText(job));
    return;
  }
  // 1. Selectors, size against the cluster, quota.
  Shape& shape = internal::ShapeFor(pass, job);
  if (shape.classes.empty()) {
    internal::AddPending(pass, job, PendingCode::kNoMatchingWorkers,
                         internal::NoMatchText(pass, job, shape));
    return;
  }
  // Elastic: the gang may start on as few as min_nodes (see scheduler.h).
  const int min_n = job.min_nodes > 0 ? std::min(job.min_nodes, n) : n;
  int capacity = internal::CountCapacity(pass, job, shape, g);
  if (capacity < min_n) {
    internal::AddPending(pass, job, PendingCode::kLargerThanCluster,
                         internal::LargerThanClusterText(pass, job, shape, capacity));
    return;
  }
  const int64_t want = static_cast<int64_t>(n) * g;
  QueueState& queue = internal::QueueFor(pass, job.queue);
  const int64_t quota = queue.quota;
  int64_t& used = queue.used;
  if (min_n < n && quota > 0 && used + want > quota && used + int64_t{min_n} * g <= quota) {
    // An elastic job shrinks to what its quota leaves, down to min_nodes.
    const int k = static_cast<int>((quota - used) / g);
    if (int placed = internal::PlaceElastic(pass, job, shape, k, min_n); placed > 0) {
      used += static_cast<int64_t>(placed) * g;
      return;
    }
    Blocked(pass, job, shape);
    return;
  }
  if (quota > 0 && used + want > quota) {
    internal::AddPending(pass, job, PendingCode::kQuotaExceeded,
                         internal::QuotaText(job, quota, used, want));
    return;
  }
  // 2. The whole gang, else (elastic) as many nodes as are free.
  if (internal::Place(pass, job, shape)) {
    used += want;
    return;
  }
  if (min_n < n) {
    if (int placed = internal::PlaceElastic(pass, job, shape, n - 1, min_n); placed > 0) {
      used += static_cast<int64_t>(placed) * g;
      return;
    }
  }
  // 3. It does not fit.
  Blocked(pass, job, shape);
}

Decisions Run(PassState& pass) {
  internal::IndexWorkers(pass);
  internal::IndexRunning(pass);
  // Scheduling order: priority descending, then FIFO, then job id. Sorts compact keys,
  // not the (large) jobs themselves.
  struct Key {
    int priority;
    absl::Time queued_since;
    int64_t job_id;
    int index;
  };
  const std::vector<const PendingJob*>& pending = pass.pending;
  std::vector<Key> order;
  order.reserve(pending.size());
  for (size_t i = 0; i < pending.size(); ++i) {
    const PendingJob& j = *pending[i];
    order.push_back(Key{j.priority, j.queued_since, j.job_id, static_cast<int>(i)});
  }
  std::sort(order.begin(), order.end(), [](const Key& x, const Key& y) {
    if (x.priority != y.priority) return x.priority > y.priority;
    if (x.queued_since != y.queued_since) return x.queued_since < y.queued_since;
    return x.job_id < y.job_id;
  });
  pass.out.pending.reserve(pending.size());
  pass.pending_queue.reserve(pending.size());
  // Jobs are visited in scheduling order, i.e. all over memory: fetch ahead.
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i + kAhead < order.size()) {
      const char* next = reinterpret_cast<const char*>(pending[order[i + kAhead].index]);
      __builtin_prefetch(next);
      __builtin_prefetch(next + 64);
      __builtin_prefetch(next + 128);
    }
    Consider(pass, *pending[order[i].index]);
  }
  // 4. Queue positions: scheduling order among what is still pending, per queue.
  std::unordered_map<std::string, int> position;
  for (size_t i = 0; i < pass.out.pending.size(); ++i) {
    pass.out.pending[i].queue_position = ++position[*pass.pending_queue[i]];
  }
  return std::move(pass.out);
}

}  // namespace

Scheduler::Scheduler(Config config) : config_(std::move(config)) {}

Decisions Scheduler::Schedule(const std::vector<PendingJob>& pending,
                              const std::vector<Worker>& workers,
                              const std::vector<RunningJob>& running,
                              const std::map<std::string, QueueConfig>& queues,
                              absl::Time now) const {
  std::vector<const PendingJob*> jobs;
  jobs.reserve(pending.size());
  for (const PendingJob& j : pending) jobs.push_back(&j);
  return Schedule(jobs, workers, running, queues, now);
}

Decisions Scheduler::Schedule(const std::vector<const PendingJob*>& pending,
                              const std::vector<Worker>& workers,
                              const std::vector<RunningJob>& running,
                              const std::map<std::string, QueueConfig>& queues,
                              absl::Time now) const {
  PassState pass(config_, pending, workers, running, queues, now);
  return Run(pass);
}

}  // namespace llamafleet::sched
