// Host synchronisations: the places where the training thread waits for a value that the
// device (or the other ranks) computed, counted process-wide so that a benchmark can
// report them per optimizer step.
//
// What counts: a read of a device tensor's value on the host (.item(), a copy to the CPU
// that is waited for) and the wait of a collective whose result the host then reads.
// What does not: collectives whose results stay on the device (gathers, reduce-scatters,
// the gradient norm's all-reduce): on NCCL their waits order the device's stream and the
// host goes on. On the CPU every operation is synchronous; the count is then the number
// of times a GPU run would stall at the same place.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>

namespace llamafleet::trainer {

namespace host_sync_internal {
inline std::atomic<int64_t>& Counter() {
  static std::atomic<int64_t> count{0};
  return count;
}
}  // namespace host_sync_internal

// Host synchronisations counted since the process started.
inline int64_t HostSyncCount() {
  return host_sync_internal::Counter().load(std::memory_order_relaxed);
}

// Counts one host synchronisation (callers that wait without going through ReadOnHost).
inline void CountHostSync() {
  host_sync_internal::Counter().fetch_add(1, std::memory_order_relaxed);
}

// `t` (any device, any dtype) as a contiguous fp64 CPU tensor: one counted host
// synchronisation however many values it holds.
inline at::Tensor ReadOnHost(const at::Tensor& t) {
  CountHostSync();
  return t.to(at::kCPU, at::kDouble).contiguous();
}

// The value of a one-element tensor on the host: one counted host synchronisation.
inline double ReadScalarOnHost(const at::Tensor& t) {
  CountHostSync();
  return t.item<double>();
}

}  // namespace llamafleet::trainer
