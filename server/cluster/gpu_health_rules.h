#ifndef LLAMAFLEET_SERVER_CLUSTER_GPU_HEALTH_RULES_H_
#define LLAMAFLEET_SERVER_CLUSTER_GPU_HEALTH_RULES_H_

// What a worker's GPU health samples (GpuSample, from its heartbeats; worker/gpu_health.h)
// mean, and when they drain it. Each sample is compared with what the coordinator saw of
// that GPU before (GpuHealthMemory):
//
//   event     when                                            fatal
//   --------  ----------------------------------------------  ------------------------------
//   xid       xid_count grew (new XID events; the worker's    when one of the new ones
//             count starts at 0 with its process)             (recent_xids, else the last,
//                                                             xid_errors) is in kFatalXids;
//                                                             else shown only
//   ecc       ecc_uncorrected_volatile grew (the first value  always
//             seen is the baseline: the pre-flight fails a
//             GPU with any at all)
//   gone      the sample says gone (a GPU the worker joined   always
//             with did not answer)
//   throttle  a health throttle reason (common/gpu_throttle   never: shown (workers, portal,
//             .h) turned on                                   metrics), not drained
//
// A fatal event drains the worker (source kDrainByGpuHealth, the reason naming the GPU and
// the event), which ends its running attempt as a node fault (no restart used, no backoff;
// node_health.h) and keeps new placements away; it comes back as a pre-flight drain does
// (a passing pre-flight after the cool-off, or `worker undrain`). A worker already drained
// keeps its drain (its source, reason and time). Samples are worker input: at most
// kMaxGpuSamples are read, indices outside 0..1023 and negative counts are ignored.
// Pure: times are given, no I/O.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "google/protobuf/repeated_field.h"
#include "llamafleet/v1/worker.pb.h"
#include "server/cluster/node_health.h"
#include "storage/worker_drain_store.h"

namespace llamafleet {

inline constexpr int kMaxGpuSamples = 64;

// XIDs that mean the GPU (or its memory, NVLink or firmware) needs a reset or service
// before it can be trusted with a job again; the others (an application's own MMU fault,
// a graphics exception, ...) are shown, not acted on.
//   48 double-bit ECC error            74 NVLink error                 95 uncontained ECC error
//   61 internal micro-controller       79 GPU has fallen off the bus  119 GSP RPC timeout
//      breakpoint                      92 high single-bit ECC rate    120 GSP error
//   62 internal micro-controller halt  94 contained ECC error
//   63 ECC page retirement / row remapping recorded
//   64 ECC page retirement / row remapping failed
inline constexpr int64_t kFatalXids[] = {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120};
bool IsFatalXid(int64_t xid);
// "XID 79 (GPU has fallen off the bus)"; "XID 13" for one not in the fatal set.
std::string DescribeXid(int64_t xid);

// What the coordinator saw of one GPU of a worker (kept while the coordinator runs).
struct GpuHealthMemory {
  int64_t xid_count = 0;
  std::optional<int64_t> ecc;  // unset: no baseline yet
  uint64_t throttle = 0;       // health throttle bits last seen
  bool gone = false;
};
using GpuHealthState = std::map<int32_t, GpuHealthMemory>;  // by GPU index

struct GpuHealthEvent {
  enum Kind { kXid, kEcc, kGone, kThrottle };
  Kind kind = kXid;
  int32_t gpu = 0;
  bool fatal = false;
  std::string detail;  // "GPU 0: XID 79 (GPU has fallen off the bus)"
  absl::Time time;
};
const char* GpuHealthEventName(GpuHealthEvent::Kind kind);  // "xid", "ecc", "gone", "throttle"

// The events in `samples` received at `now`, against `state` (updated to them). An event
// is reported at its onset: a GPU that stays gone or throttled is one event.
std::vector<GpuHealthEvent> ObserveGpuSamples(GpuHealthState& state,
                                              const google::protobuf::RepeatedPtrField<v1::GpuSample>& samples,
                                              absl::Time now);

// What `events` do to a worker drained as `drain` (nullopt: not drained): kDrain, its
// reason the first fatal event's detail (and how many more there were), when there is a
// fatal one and the worker is not drained yet; else kNone.
HealthDecision DecideGpuHealth(const std::optional<WorkerDrainRecord>& drain,
                               const std::vector<GpuHealthEvent>& events);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_GPU_HEALTH_RULES_H_
