#ifndef LLAMAFLEET_WORKER_PREFLIGHT_H_
#define LLAMAFLEET_WORKER_PREFLIGHT_H_

// The worker's pre-flight: a short check that the node can run a gang's ranks, run before
// each hello (at join and after a reconnect), after each task ends, and every
// --preflight-interval while idle. Its result goes to the coordinator (Hello.preflight,
// Heartbeat.preflight), which drains a node whose pre-flight failed
// (server/cluster/node_health.h). Checks:
//
//   gemm      a 96x96 double GEMM, timed, compared element by element with an exact
//             integer reference (wrong arithmetic, or slower than a second, fails)
//   loopback  64 KiB through a TCP connection to itself on 127.0.0.1, compared
//   gpu       workers with GPUs: nvidia-smi's uncorrected ECC errors, hardware or thermal
//             clock slowdowns and the number of GPUs it still sees (the GPU health
//             sample's query, worker/gpu_health.h); skipped (and said so) without GPUs
//             or without nvidia-smi
//   injected  only with --preflight-fail-for-test FILE: fails while FILE exists
//
// Takes milliseconds on a CPU worker; blocks the calling thread.

#include <string>
#include <vector>

#include "llamafleet/v1/worker.pb.h"

namespace llamafleet::worker {

struct PreflightOptions {
  int expected_gpus = 0;              // the inventory's GPUs (0: a CPU worker)
  std::string fail_while_exists;      // fault injection for tests; "" = none
};

// Runs every check; `sequence` numbers the result (1, 2, ... per worker process).
v1::PreflightResult RunPreflight(const PreflightOptions& options, int64_t sequence);

// The gpu check from one health sample of the GPUs (worker/gpu_health.h; those nvidia-smi
// listed, or none when it failed): FAILED when a GPU has uncorrected ECC errors or its
// clocks held down for heat or by the power brake (common/gpu_throttle.h), or fewer than
// `expected` GPUs answer.
v1::PreflightCheck GpuCheckFromSamples(const std::vector<v1::GpuSample>& samples, int expected);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_PREFLIGHT_H_
