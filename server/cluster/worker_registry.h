#ifndef LLAMAFLEET_SERVER_CLUSTER_WORKER_REGISTRY_H_
#define LLAMAFLEET_SERVER_CLUSTER_WORKER_REGISTRY_H_

// The workers the coordinator knows: their sessions, inventories, heartbeats and
// liveness. Owned by the cluster loop and used only on its strand (not thread-safe). A
// worker is known from its first hello (or from a recovered attempt that placed tasks on
// it) until the coordinator stops; it is connected while it has a session, and lost once
// it stays silent past the heartbeat timeout (until its next hello).

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "llamafleet/v1/worker.pb.h"
#include "server/cluster/gpu_health_rules.h"
#include "server/cluster/scheduler_input.h"
#include "storage/worker_drain_store.h"

namespace llamafleet {

// The coordinator's end of one worker session. Thread-safe; after Detach() it drops
// everything.
class WorkerLink {
 public:
  virtual ~WorkerLink() = default;
  virtual void Send(v1::CoordinatorMessage message) = 0;
  // Ends the session with `status` (e.g. UNAUTHENTICATED, or replaced by a newer one).
  virtual void Close(const absl::Status& status) = 0;
};

struct LiveWorker {
  std::string name;
  v1::Inventory inventory;
  std::shared_ptr<WorkerLink> link;  // null while disconnected
  absl::Time last_heartbeat;
  std::vector<v1::GpuSample> gpus;
  bool lost = false;
  // A copy of `inventory` that published snapshots share (made at each hello); null for
  // a recovered worker that has not said hello yet.
  std::shared_ptr<const v1::Inventory> shared_inventory;
  // The last pre-flight it reported (sequence 0: none yet from this process).
  v1::PreflightResult preflight;
  // The last straggler flag of a rank on it (job_id empty: none since this process started).
  v1::WorkerStraggler straggler;
  // What was seen of its GPUs' health (gpu_health_rules.h), kept across its sessions.
  GpuHealthState gpu_health;
  // Hello.instance_id of the process that said hello last; instance_known is false until a
  // hello since this coordinator started (worker_sessions.h).
  std::string instance;
  bool instance_known = false;
};

// What `workers` shows for a worker: LOST once lost, DISCONNECTED from the moment its
// session ends (or, recovered after a restart, until its first hello), DRAINING while
// `drained`, else READY.
v1::WorkerState StateOf(const LiveWorker& worker, bool drained);

// Whether `given` is the join token `expected`, in constant time. An empty expected token
// matches nothing.
bool JoinTokenMatches(const std::string& expected, const std::string& given);

class WorkerRegistry {
 public:
  struct Registration {
    LiveWorker* worker = nullptr;
    bool replaced = false;  // a previous session still looked alive (and is closed now)
    bool was_lost = false;
  };
  // A hello from process `instance` of `name` on `link` at `now`: the worker is connected,
  // not lost, with this inventory. A previous session that still looked alive is closed
  // (the same process reconnecting after its connection broke without a reset; a hello
  // from another process is refused before this, worker_sessions.h).
  Registration Register(const std::string& name, const v1::Inventory& inventory,
                        const std::string& instance, std::shared_ptr<WorkerLink> link, absl::Time now);
  // A worker a recovered attempt placed tasks on, not connected yet: it counts as heard
  // from at `heard` (so it has until heard + heartbeat timeout to say hello). No-op for a
  // worker already known.
  void AddRecovered(const std::string& name, absl::Time heard);
  // The session `link` of `name` ended; true when it was the worker's current session
  // (the worker stays known, lost only once it stays silent past the heartbeat timeout).
  bool Disconnect(const std::string& name, const WorkerLink* link);
  // Any message from the worker proves it is alive. Null: unknown.
  LiveWorker* Heard(const std::string& name, absl::Time now);
  // A known worker, or null; hearing nothing from it.
  LiveWorker* Find(const std::string& name);
  // Marks lost every worker silent for `timeout` at `now` and closes its session; returns
  // their names.
  std::vector<std::string> CollectLost(absl::Time now, absl::Duration timeout);

  // Sends to a connected worker; false (nothing sent) when it is not connected.
  bool Send(const std::string& name, v1::CoordinatorMessage message);

  // A worker is connected and not lost.
  bool AnyConnected() const;
  // Unknown or lost: tasks placed there are gone with it.
  bool IsLost(const std::string& name) const;
  // Unknown, lost, or its session ended: a task placed there is not reported any more.
  bool IsGone(const std::string& name) const;
  // Lost or disconnected workers.
  std::set<std::string> Unavailable() const;
  // The address of a known worker ("" when unknown or never heard from).
  std::string Address(const std::string& name) const;

  // Drained workers (node_health.h) are offered to no scheduling pass. A drain may name a
  // worker not known yet (drained before a coordinator restart): it holds from its hello.
  void SetDrain(const WorkerDrainRecord& drain);
  // False when `name` was not drained.
  bool ClearDrain(const std::string& name);
  const WorkerDrainRecord* DrainOf(const std::string& name) const;
  const std::map<std::string, WorkerDrainRecord>& drains() const { return drains_; }

  // Bumped whenever a worker registers, disconnects, is lost, drained or undrained.
  uint64_t version() const { return version_; }
  // The workers as the scheduler sees them, rebuilt only when version() changed.
  const std::vector<WorkerView>& Views();
  const std::map<std::string, LiveWorker>& workers() const { return workers_; }

 private:
  std::map<std::string, LiveWorker> workers_;
  std::map<std::string, WorkerDrainRecord> drains_;
  uint64_t version_ = 1;
  uint64_t views_version_ = 0;
  std::vector<WorkerView> views_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_WORKER_REGISTRY_H_
