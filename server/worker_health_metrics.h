#ifndef LLAMAFLEET_SERVER_WORKER_HEALTH_METRICS_H_
#define LLAMAFLEET_SERVER_WORKER_HEALTH_METRICS_H_

// The workers' health as Prometheus series, from the cluster's published workers:
//   llamafleet_worker_drained{worker,source,reason}  unix seconds the worker was drained
//                                                    (one series per drained worker)
//   llamafleet_worker_preflight_passed{worker}       1 or 0, the last pre-flight reported
//   llamafleet_worker_preflight_seconds{worker}      how long it took
// Lost workers are left out. Reasons are cut to 120 bytes (a label, not a log).

#include <vector>

#include "llamafleet/v1/worker.pb.h"
#include "server/metrics.h"

namespace llamafleet {

void CollectWorkerHealth(const std::vector<v1::WorkerInfo>& workers, metrics::Exposition* out);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_WORKER_HEALTH_METRICS_H_
