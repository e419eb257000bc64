#ifndef LLAMAFLEET_STORAGE_WORKER_DRAIN_STORE_H_
#define LLAMAFLEET_STORAGE_WORKER_DRAIN_STORE_H_

// Table worker_drains: one row per drained worker name (no new placements on it; see
// server/cluster/node_health.h), with why, by whom and since when. Rows outlive the
// worker's sessions and the coordinator's restarts: a drained node stays drained until it
// is undrained (the row deleted). Written by the coordinator (a failed pre-flight or a
// fatal GPU health event, a passing pre-flight after the cool-off) and by operators (`llamafleet-coordinator worker drain`,
// another process on the same database file); the coordinator reads the table every
// second, so an operator's change counts while it runs.

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "storage/job_store.h"

namespace llamafleet {

struct WorkerDrainRecord {
  std::string name;
  std::string reason;
  std::string source;  // "operator", "preflight" or "gpu-health"
  absl::Time since;

  bool operator==(const WorkerDrainRecord& o) const {
    return name == o.name && reason == o.reason && source == o.source && since == o.since;
  }
};

// Every drained worker, by name.
absl::StatusOr<std::map<std::string, WorkerDrainRecord>> ListWorkerDrains(JobStore& store);

// Drains `record.name` (replacing an earlier row for it); `since` is the transaction's time
// when it is InfinitePast.
TxnFunction SetWorkerDrainTxn(WorkerDrainRecord record);
// Undrains `name` when its row was written by `source` ("" = whoever wrote it); a row of
// another source stays (an operator's drain outlives a passing pre-flight).
TxnFunction ClearWorkerDrainTxn(std::string name, std::string source);

// For operators (committed before they return). DrainWorker: NOT_FOUND when no worker of
// that name ever registered; INVALID_ARGUMENT for an empty reason. UndrainWorker: NOT_FOUND
// when the worker is not drained.
absl::Status DrainWorker(JobStore* store, const std::string& name, const std::string& reason);
absl::Status UndrainWorker(JobStore* store, const std::string& name);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_WORKER_DRAIN_STORE_H_
