#ifndef LLAMAFLEET_COMMON_GPU_THROTTLE_H_
#define LLAMAFLEET_COMMON_GPU_THROTTLE_H_

// The clock throttle reasons that say a GPU is unwell (GpuSample.clock_throttle_reasons,
// NVML's bitmask as nvidia-smi's clocks_throttle_reasons.active and DCGM's
// DCGM_FI_DEV_CLOCK_THROTTLE_REASONS give it): clocks held down for heat or by the
// hardware's power brake. The other bits (idle, application clocks, the software power
// cap, sync boost, display clocks) are normal operation and named by nothing here.
// Header-only: the worker, the coordinator and the CLI share it.

#include <cstdint>
#include <string>
#include <vector>

namespace llamafleet {

struct GpuThrottleBit {
  uint64_t bit;
  const char* name;   // short, for labels and tables
  const char* words;  // for reasons and logs
};

inline constexpr GpuThrottleBit kGpuHealthThrottles[] = {
    {0x8, "hw_slowdown", "hardware slowdown"},
    {0x20, "sw_thermal", "software thermal slowdown"},
    {0x40, "hw_thermal", "hardware thermal slowdown"},
    {0x80, "power_brake", "power brake slowdown"},
};

// The health bits of `mask`.
inline uint64_t GpuHealthThrottleMask(uint64_t mask) {
  uint64_t out = 0;
  for (const GpuThrottleBit& b : kGpuHealthThrottles) out |= mask & b.bit;
  return out;
}

// The names (or words) of the health bits set in `mask`, in the table's order.
inline std::vector<std::string> GpuHealthThrottleNames(uint64_t mask, bool words = false) {
  std::vector<std::string> out;
  for (const GpuThrottleBit& b : kGpuHealthThrottles) {
    if (mask & b.bit) out.emplace_back(words ? b.words : b.name);
  }
  return out;
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_GPU_THROTTLE_H_
