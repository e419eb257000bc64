#ifndef LLAMAFLEET_SERVER_CLUSTER_CLUSTER_VIEW_H_
#define LLAMAFLEET_SERVER_CLUSTER_CLUSTER_VIEW_H_

// What threads other than the cluster loop read of the cluster (ListWorkers, ListQueues,
// metrics, a queued job's explanation, which worker a task is bound to). The loop owns
// the state; it rebuilds a PublishedCluster from it once per turn when something
// changed, and readers take the published copies under a short lock.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "scheduler/scheduler.h"
#include "server/cluster/attempt_tracker.h"
#include "server/cluster/worker_registry.h"

namespace llamafleet {

// What the cluster holds, as of the last scheduling pass (or worker coming or going).
struct QueueUsage {
  // Jobs with an attempt not yet ended (scheduled, running, preempting).
  int running_jobs = 0;
  // GPUs (CPU ranks on CPU workers) held by the queue's attempts, including ended ones
  // whose tasks are still stopping.
  int64_t gpus_allocated = 0;
};
struct ClusterUsage {
  std::map<std::string, QueueUsage> queues;  // only queues that hold something
  std::map<v1::WorkerState, int> workers;    // workers by state
  int64_t gpus_total = 0;      // on workers not lost: GPUs, or CPU ranks on CPU-only workers
  int64_t gpus_allocated = 0;  // of those, held by attempts
};

// What the job service reads of the cluster (thread-safe): where QUEUED jobs stand, from
// the last scheduling pass, and what the running attempts hold.
class ClusterView {
 public:
  virtual ~ClusterView() = default;
  virtual bool PendingInfoFor(int64_t job_id, v1::PendingInfo* info) const = 0;
  virtual ClusterUsage Usage() const = 0;
};

// The published copies. Set* run on the loop's strand; the readers on any thread.
class PublishedCluster {
 public:
  // The last pass's explanations of the jobs it left queued, as the scheduler made them:
  // PendingInfoFor turns one into a PendingInfo when asked (a pass over a deep queue
  // would otherwise build one message per queued job that nobody reads).
  void SetPending(std::map<int64_t, v1::PendingInfo> held_back, std::vector<sched::Pending> pending);
  // The workers and what the attempts hold of them. Inventories are shared, not copied:
  // the protos are made by Workers() when someone asks.
  void SetWorkers(const std::map<std::string, LiveWorker>& workers,
                  const std::map<std::string, WorkerDrainRecord>& drains,
                  const std::map<int64_t, AttemptTracker>& attempts);
  // task → worker for every task of an active attempt and the recently released ones.
  void SetAssignments(const std::map<int64_t, AttemptTracker>& attempts,
                      const std::deque<std::pair<std::string, std::string>>& recently_released);

  std::vector<v1::WorkerInfo> Workers() const;
  ClusterUsage Usage() const;
  bool PendingInfoFor(int64_t job_id, v1::PendingInfo* info) const;
  bool IsAssigned(const std::string& task_id, const std::string& worker) const;

 private:
  // A worker as Workers() shows it, without its inventory copied.
  struct Worker {
    std::string name;
    v1::WorkerState state = v1::WORKER_READY;
    std::optional<WorkerDrainRecord> drain;
    v1::PreflightResult preflight;
    v1::WorkerStraggler straggler;
    std::shared_ptr<const v1::Inventory> inventory;
    absl::Time last_heartbeat;
    std::vector<std::string> running_task_ids;
    int gpus_allocated = 0;
    std::vector<v1::GpuSample> gpus;
  };
  // Immutable once published; readers take a reference and look up without the lock.
  struct Pending {
    std::map<int64_t, v1::PendingInfo> held_back;  // in restart backoff
    std::vector<sched::Pending> pending;           // in scheduling order
    // job id → position in `pending`, built by the first lookup.
    mutable std::once_flag index_once;
    mutable std::unordered_map<int64_t, size_t> index;
    bool Find(int64_t job_id, v1::PendingInfo* info) const;
  };

  mutable std::mutex mu_;
  std::shared_ptr<const Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::vector<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  ClusterUsage usage_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> assignments_ ABSL_GUARDED_BY(mu_);  // task → worker
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_CLUSTER_VIEW_H_
