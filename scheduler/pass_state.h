#ifndef LLAMAFLEET_SCHEDULER_PASS_STATE_H_
#define LLAMAFLEET_SCHEDULER_PASS_STATE_H_

// Internal to the scheduler: the state of one scheduling pass, shared by its parts
// (capacity.h, placement.h, preemption.h, reservation.h, explanations.h) and the
// orchestrator in scheduler.cc. Built from the pass's input, updated as jobs are placed
// and capacity is held, dropped when the pass returns. Not part of the public contract.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "scheduler/scheduler.h"

namespace llamafleet::sched::internal {

using Labels = std::map<std::string, std::string>;

// Workers that look the same to every selector: same instance type, EFA count and labels.
// A job's selectors are evaluated once per class, not once per worker, and free capacity
// is indexed per class by free-GPU count, so "are there N workers with g free GPUs" costs
// O(classes x GPUs per worker), independent of the number of workers.
struct WorkerClass {
  const std::string* instance_type = nullptr;
  int efa = 0;
  int64_t gpu_memory = 0;  // 0 = unknown
  const Labels* labels = nullptr;
  int max_gpus = 0;
  std::vector<int> members;            // worker indices, ascending (= by worker id)
  std::vector<std::set<int>> by_free;  // [f]: workers with f GPUs available to the pass
  std::vector<int> raw_count;          // [f]: workers with f free GPUs, holds ignored
  std::vector<int> cap_count;          // [c]: workers with c GPUs in total
  std::vector<int> freeing;            // workers with unclaimed GPUs of preempting jobs
  std::vector<int64_t> holders;        // jobs holding capacity on members, in order
};

struct WorkerState {
  int cls = -1;  // -1: not schedulable
  int gpus = 0;
  int free = 0;  // available to the rest of the pass (holds subtracted)
  int raw = 0;   // free, holds not subtracted
  // GPUs held by reservations that a job ending before `res_until` may still use.
  int res_held = 0;
  absl::Time res_until = absl::InfiniteFuture();
  int freeing = 0;  // GPUs of preempting jobs not yet claimed by a pending job
  std::vector<std::pair<int, int>> jobs;  // (running index, GPUs here)
  // (expected end, GPUs) of everything running here; InfiniteFuture when unknown.
  std::vector<std::pair<absl::Time, int>> releases;
  bool releases_sorted = false;
  uint32_t stamp = 0;  // == PassState::stamp while a candidate of the job being considered
  int cand = -1;       // position among Preempt's workers missing GPUs, -1 otherwise
};

// What victim selection reads of a running job, packed (RunningJob is large).
struct RunState {
  int64_t job_id = 0;
  absl::Time started;
  int priority = 0;
  int total_gpus = 0;
  bool preempting = false;
  bool cooling = false;  // preempted within the cool-down
  bool claimed = false;  // chosen as a victim in this pass
};

struct QueueState {
  int64_t quota = 0;  // 0 = unlimited
  int64_t used = 0;   // GPUs held by running jobs and this pass's placements
};

// A preemption that found no victims for a job of some priority and size.
struct PreemptFailure {
  int priority;
  int nodes;
  int gpus;
  PendingCode code;
};

// What the pass knows about one set of job selectors (instance type, EFA, labels, memory).
struct Shape {
  std::vector<int> classes;       // ascending
  int64_t largest_too_small = 0;  // GPU memory of the biggest class excluded only by memory
  std::vector<PreemptFailure> preempt_failures;
  // Holders() text, valid while PassState::holds_version == holders_version.
  uint64_t holders_version = ~uint64_t{0};
  std::string holders_text;
  // Caches filled while the shape is read (mutable: they change no result).
  mutable std::unordered_map<uint64_t, std::string> needs;  // SizeKey -> Needs()
  struct Estimate {
    uint64_t version = 0;  // PassState::state_version it was computed at
    std::optional<absl::Time> start;
  };
  mutable std::unordered_map<uint64_t, Estimate> estimates;  // SizeKey ->
};

// Orders shapes by the job's selectors without copying them.
struct ShapeKey {
  const std::string* instance_type;
  int efa;
  const Labels* labels;
  int64_t memory = 0;  // workers: GPU memory; jobs: memory needed per GPU
  bool operator<(const ShapeKey& o) const {
    return std::tie(*instance_type, efa, *labels, memory) <
           std::tie(*o.instance_type, o.efa, *o.labels, o.memory);
  }
  bool operator==(const ShapeKey& o) const {
    return efa == o.efa && memory == o.memory && *instance_type == *o.instance_type &&
           *labels == *o.labels;
  }
};

struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    size_t h = std::hash<std::string>()(*k.instance_type) * 31 + static_cast<size_t>(k.efa);
    h = h * 31 + std::hash<int64_t>()(k.memory);
    for (const auto& [key, value] : *k.labels) {
      h = h * 131 + std::hash<std::string>()(key);
      h = h * 131 + std::hash<std::string>()(value);
    }
    return h;
  }
};

// (nodes, gpus_per_node): the key of a job's size within its shape.
inline uint64_t SizeKey(const PendingJob& job) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(job.nodes)) << 32) |
         static_cast<uint32_t>(job.gpus_per_node);
}

struct PassState {
  PassState(const Config& config, const std::vector<const PendingJob*>& pending,
            const std::vector<Worker>& workers, const std::vector<RunningJob>& running,
            const std::map<std::string, QueueConfig>& queues, absl::Time now)
      : config(config),
        pending(pending),
        workers(workers),
        running(running),
        queues(queues),
        now(now) {}

  // Constant for the pass.
  const Config& config;
  const std::vector<const PendingJob*>& pending;
  const std::vector<Worker>& workers;
  const std::vector<RunningJob>& running;
  const std::map<std::string, QueueConfig>& queues;
  const absl::Time now;

  // Built by IndexWorkers/IndexRunning (capacity.h), then updated as the pass places and
  // holds. Worker indices are positions in worker-id order.
  std::vector<const Worker*> order;  // worker index -> worker
  std::unordered_map<std::string, int> index;
  std::vector<WorkerState> state;
  std::vector<WorkerClass> classes;
  std::vector<RunState> run;
  std::vector<absl::InlinedVector<std::pair<int, int>, 2>> run_allocs;  // (worker, GPUs)
  std::unordered_map<ShapeKey, Shape, ShapeKeyHash> shapes;
  std::unordered_map<std::string, QueueState> queue_state;
  int min_victim_priority = 0;  // lowest priority of a running job not already stopping
  bool any_reservation = false;
  int reservations = 0;        // made this pass, at most Config::max_reservations
  int estimates = 0;           // computed this pass, at most Config::max_estimates
  uint64_t state_version = 1;  // bumped on every change of a worker's free GPUs
  uint64_t holds_version = 0;  // bumped when a job first holds capacity in a class
  uint32_t stamp = 0;          // marks the workers Preempt considers for the current job
  // Set by Preempt when the job should report a preemption reason; reset per job.
  std::optional<PendingCode> last_preempt_code;
  // Reused buffers.
  std::string scratch_text;                        // Holders() for a job that holds
  std::string scratch_needs;                       // Needs() for jobs with exclusions
  std::vector<std::pair<int, int>> scratch_cand;   // a worker's victim candidates
  std::vector<std::pair<int, int>> scratch_freed;  // GPUs freed per worker by victims

  Decisions out;
  std::vector<const std::string*> pending_queue;  // parallel to out.pending

  bool Excluded(const PendingJob& job, int idx) const {
    return !job.excluded_workers.empty() && job.excluded_workers.count(order[idx]->id) > 0;
  }
};

}  // namespace llamafleet::sched::internal

#endif  // LLAMAFLEET_SCHEDULER_PASS_STATE_H_
