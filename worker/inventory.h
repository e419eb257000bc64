#ifndef LLAMAFLEET_WORKER_INVENTORY_H_
#define LLAMAFLEET_WORKER_INVENTORY_H_

#include <string>
#include <vector>

#include "llamafleet/v1/worker.pb.h"

namespace llamafleet::worker {

// GPUs as nvidia-smi reports them; empty when there is no nvidia-smi or no GPU.
std::vector<v1::Gpu> DetectGpus();
// EFA interfaces under /sys/class/infiniband (names starting with "efa"; all
// InfiniBand devices count when `sysfs_root` holds no efa_* names).
int CountEfaDevices(const std::string& sysfs_root = "/sys/class/infiniband");
// Host name, online CPUs and RAM.
void DetectHost(v1::Inventory* inventory);
// Whether nvidia-smi is on PATH.
bool HaveNvidiaSmi();

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_INVENTORY_H_
