#ifndef LLAMAFLEET_WORKER_GPU_HEALTH_H_
#define LLAMAFLEET_WORKER_GPU_HEALTH_H_

// The worker's GPU health while it runs (the pre-flight checks the node between tasks;
// this watches it during them). A background thread samples the GPUs every
// `interval` (5 s) and each heartbeat carries the latest samples (GpuSample: telemetry,
// XIDs, uncorrectable ECC, clock throttle reasons, GPUs gone); the coordinator judges
// them (server/cluster/gpu_health_rules.h). Sources:
//
//   nvidia-smi   every round, one query with a deadline (command_timeout): telemetry,
//                ecc.errors.uncorrected.volatile.total, clocks_throttle_reasons.active
//                and which GPUs answer. A GPU the worker joined with that is not listed is
//                gone; so is every GPU once nvidia-smi failed two rounds in a row.
//   XIDs         nvidia-smi has no XID query: from DCGM (`dcgmi dmon -e 230`, the last XID
//                per GPU; a changed value is one new event) when dcgmi answers, else from
//                the kernel log (/dev/kmsg, read without blocking from the worker's start;
//                "NVRM: Xid (PCI:...): N" matched to a GPU by its PCI address), else not
//                watched (said once in the log).
//   fake         only with --gpu-health-fake-for-test FILE: while FILE exists its events
//                (gpu_health_parse.h) are laid over the samples, read at every heartbeat;
//                on a CPU worker they make up samples of their own.
//
// Without GPUs (and without the fake) nothing is sampled and the log says so.

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "llamafleet/v1/worker.pb.h"
#include "worker/gpu_health_parse.h"

namespace llamafleet::worker {

// One round of readings, as the tools gave them (or a test makes them up).
struct GpuHealthReadings {
  std::optional<std::vector<NvidiaSmiGpu>> smi = {};     // nullopt: nvidia-smi failed
  std::optional<std::map<int, int64_t>> dcgm_xids = {};  // nullopt: DCGM not read
  std::vector<KernelXid> kernel_xids = {};               // kernel-log XIDs since the last round
};

// Turns rounds of readings into samples, remembering what a round needs from the ones
// before: each GPU's XID events (count and last), DCGM's previous values (the first
// read is the baseline), the GPUs' PCI addresses, and failed nvidia-smi rounds in a row.
// Not thread-safe; no I/O.
class GpuHealthTracker {
 public:
  // The GPUs the worker joined with (their indices).
  explicit GpuHealthTracker(std::vector<int> gpus);

  // One sample per GPU joined with, by index.
  std::vector<v1::GpuSample> Update(const GpuHealthReadings& readings);
  // `samples` with the fake's events laid over them (nullopt: no fake file now). An XID
  // line not in the previous call's fake is a new event.
  std::vector<v1::GpuSample> WithFake(std::vector<v1::GpuSample> samples,
                                      const std::optional<std::vector<FakeGpuEvent>>& fake);

 private:
  struct Xids {
    int64_t count = 0;
    std::vector<int64_t> recent;  // the last kRecentXids, oldest first
  };
  void AddXid(int gpu, int64_t xid);
  void SetXids(v1::GpuSample* sample) const;

  const std::vector<int> gpus_;
  std::map<int, Xids> xids_;
  std::map<int, int64_t> dcgm_last_;
  bool dcgm_baseline_ = false;
  std::map<std::string, int> gpu_of_pci_;
  int smi_failures_ = 0;
  std::vector<v1::GpuSample> last_good_;
  std::set<std::string> fake_lines_;
};

// One nvidia-smi health query (kNvidiaSmiHealthFields) with a deadline; nullopt when it
// could not run, timed out or failed.
std::optional<std::vector<NvidiaSmiGpu>> QueryNvidiaSmiHealth(absl::Duration timeout);

struct GpuHealthOptions {
  std::vector<int> gpus = {};  // the inventory's GPU indices; empty: a CPU worker
  absl::Duration interval = absl::Seconds(5);
  absl::Duration command_timeout = absl::Seconds(5);
  std::string fake_for_test = {};  // --gpu-health-fake-for-test FILE; "" = none
  std::string kmsg_path = "/dev/kmsg";
  bool kmsg_from_start = false;  // read the kernel log's history too (one-off checks)
  bool background = true;        // sample on a thread of its own (false: SampleNow only)
};

class GpuHealthMonitor {
 public:
  explicit GpuHealthMonitor(GpuHealthOptions options);
  ~GpuHealthMonitor();
  GpuHealthMonitor(const GpuHealthMonitor&) = delete;
  GpuHealthMonitor& operator=(const GpuHealthMonitor&) = delete;

  // What the next heartbeat carries: the latest round with the fake laid over it. Cheap
  // (reads at most the fake file); empty on a CPU worker without the fake.
  std::vector<v1::GpuSample> Latest();
  // One round now, on the calling thread (blocks up to two command timeouts); only for a
  // monitor made without `background`.
  std::vector<v1::GpuSample> SampleNow();
  // What it reads, for logs and checks: "nvidia-smi every 5s; XIDs from DCGM", "skipped:
  // no GPU", ...
  std::string Sources();

 private:
  GpuHealthReadings Collect();
  void Loop();
  std::optional<std::vector<FakeGpuEvent>> ReadFake();

  const GpuHealthOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  GpuHealthTracker tracker_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GpuSample> latest_ ABSL_GUARDED_BY(mu_);
  std::string sources_ ABSL_GUARDED_BY(mu_);
  std::string fake_error_ ABSL_GUARDED_BY(mu_);  // the last one logged
  // The XID source, chosen by the first round (the sampling thread's, or SampleNow's).
  enum class XidSource { kUnchosen, kDcgm, kKernelLog, kNone };
  XidSource xid_source_ = XidSource::kUnchosen;
  int kmsg_fd_ = -1;
  std::thread thread_;
};

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_GPU_HEALTH_H_
