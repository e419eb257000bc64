#ifndef LLAMAFLEET_WORKER_HEALTH_CHECK_H_
#define LLAMAFLEET_WORKER_HEALTH_CHECK_H_

// llamafleet-worker --check-health: this node's pre-flight (worker/preflight.h) and one GPU
// health sample (worker/gpu_health.h, the kernel log's XID history included), printed as
// one JSON object, a Heartbeat's {"preflight", "gpus"}, after a line that says what the
// sample read. Needs no coordinator; the GPU machine's test script runs it once.

#include "worker/agent.h"

namespace llamafleet::worker {

// Returns the exit status: 0 when the pre-flight passed, 1 when it failed.
int CheckHealthOnce(const AgentOptions& options);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_HEALTH_CHECK_H_
