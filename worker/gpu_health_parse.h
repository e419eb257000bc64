#ifndef LLAMAFLEET_WORKER_GPU_HEALTH_PARSE_H_
#define LLAMAFLEET_WORKER_GPU_HEALTH_PARSE_H_

// What the worker reads of its GPUs' health, parsed from the tools' text: nvidia-smi's
// CSV, dcgmi dmon's table, kernel log records and the test-only fake file. Every input is
// hostile: each parser reads at most kMaxParsedBytes, at most kMaxGpus GPUs and bounded
// lines, skips what it does not recognise, never throws and never allocates beyond its
// bounds (tests/fuzz drives them with arbitrary bytes). Pure: no I/O.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/worker.pb.h"

namespace llamafleet::worker {

inline constexpr size_t kMaxParsedBytes = 64 * 1024;
inline constexpr int kMaxGpus = 64;        // GPUs of one worker taken from any input
inline constexpr int kMaxGpuIndex = 1023;  // a larger index is not a GPU

// The fields of one nvidia-smi health sample, in this order (csv, noheader, nounits):
inline constexpr char kNvidiaSmiHealthFields[] =
    "index,pci.bus_id,utilization.gpu,utilization.memory,memory.used,temperature.gpu,power.draw,"
    "clocks.sm,ecc.errors.uncorrected.volatile.total,clocks_throttle_reasons.active";

struct NvidiaSmiGpu {
  v1::GpuSample sample;  // index, telemetry, ECC (unset for "[N/A]") and throttle reasons
  std::string pci;       // NormalizePciAddress of pci.bus_id; "" when unreadable
};

// nvidia-smi --query-gpu=<kNvidiaSmiHealthFields> --format=csv,noheader,nounits. Rows
// with another field count or a bad index are skipped, as is a repeated index.
std::vector<NvidiaSmiGpu> ParseNvidiaSmiHealth(absl::string_view output);

// "dcgmi dmon -e 230 -c 1" (DCGM_FI_DEV_XID_ERRORS): GPU index -> the last XID's number
// (0: none). Rows "GPU <index> <value>"; headers and "N/A" values are skipped.
std::map<int, int64_t> ParseDcgmiXids(absl::string_view output);

// A PCI address as "dddd:bb:dd" (domain, bus, device; lower-case hex) from nvidia-smi's
// "00000000:3B:00.0" or the kernel's "0000:3b:00"; "" when it is neither.
std::string NormalizePciAddress(absl::string_view address);

struct KernelXid {
  std::string pci;  // NormalizePciAddress
  int64_t xid = 0;
};
// One /dev/kmsg record ("6,812,93827371,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU
// has fallen off the bus.") or a dmesg line; nullopt when it is not an NVRM Xid line.
std::optional<KernelXid> ParseKernelXid(absl::string_view record);

// The test-only fake (llamafleet-worker --gpu-health-fake-for-test FILE), one event per
// line; blank lines and '#' comments are skipped:
//   xid N gpu G          an XID event N on GPU G (a new line is a new event)
//   ecc N gpu G          GPU G's uncorrectable volatile ECC count is N
//   gone gpu G           GPU G is missing from the sample
//   throttle NAME gpu G  GPU G's clocks are held down (hw_slowdown, sw_thermal,
//                        hw_thermal, power_brake; common/gpu_throttle.h)
struct FakeGpuEvent {
  enum Kind { kXid, kEcc, kGone, kThrottle };
  Kind kind = kXid;
  int gpu = 0;
  int64_t value = 0;  // kXid: the XID; kEcc: the count; kThrottle: the bit
  std::string line;   // as written (trimmed): what makes an XID line a new event
};
// INVALID_ARGUMENT naming the line number for a line it cannot read; at most kMaxGpus
// events.
absl::StatusOr<std::vector<FakeGpuEvent>> ParseGpuHealthFake(absl::string_view content);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_GPU_HEALTH_PARSE_H_
