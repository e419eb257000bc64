#ifndef LLAMAFLEET_SERVER_CLUSTER_NODE_HEALTH_H_
#define LLAMAFLEET_SERVER_CLUSTER_NODE_HEALTH_H_

// When a node is drained and when it comes back. A drained worker gets no new placements
// and its running attempt is restarted elsewhere as a node fault that uses none of the
// job's restarts and no backoff (AttemptOutcome::kNodeDrained). Drains are durable
// (storage/worker_drain_store.h) and come from three sources:
//
//   source      drained when                       back when
//   ----------  ---------------------------------  -----------------------------------------
//   operator    `worker drain NAME --reason TEXT`  `worker undrain NAME`, never on its own
//   preflight   the worker reports a failed        undrained by an operator, or a pre-flight
//               pre-flight (reason: its summary)   that passes once `cooloff` has passed
//                                                  since the drain
//   gpu-health  its GPU samples show a fatal       as preflight
//               event (gpu_health_rules.h)
//
// A failed pre-flight on a node already drained changes nothing (the first drain's
// source, reason and time stand, so the cool-off is counted from when the node first went
// bad). Pure: no clock of its own, no I/O.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "llamafleet/v1/worker.pb.h"
#include "storage/worker_drain_store.h"

namespace llamafleet {

inline constexpr char kDrainByOperator[] = "operator";
inline constexpr char kDrainByPreflight[] = "preflight";
inline constexpr char kDrainByGpuHealth[] = "gpu-health";

struct HealthDecision {
  enum Action { kNone, kDrain, kUndrain };
  Action action = kNone;
  std::string reason;  // kDrain: the drain's reason
};

// What a pre-flight result received at `now` does to a worker drained as `drain` (nullopt:
// not drained), by the table above.
HealthDecision DecidePreflight(const std::optional<WorkerDrainRecord>& drain,
                               const v1::PreflightResult& result, absl::Time now,
                               absl::Duration cooloff);

// How the drains table changed between two reads: rows added or changed, names removed.
struct DrainChanges {
  std::vector<WorkerDrainRecord> drained;
  std::vector<std::string> undrained;
};
DrainChanges DiffDrains(const std::map<std::string, WorkerDrainRecord>& before,
                        const std::map<std::string, WorkerDrainRecord>& after);

// A pre-flight's one-line summary for reasons and logs: "failed: gemm: ..." or "passed in
// 0.01 s (gemm ok, loopback ok, gpu skipped: no GPU)". Worker-supplied text is cut to
// printable ASCII and a bounded length.
std::string PreflightSummary(const v1::PreflightResult& result);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_NODE_HEALTH_H_
