#ifndef LLAMAFLEET_COMMON_USABLE_CPUS_H_
#define LLAMAFLEET_COMMON_USABLE_CPUS_H_

// The CPUs this process may use: its affinity mask, as `nproc` counts them, bounded by its
// cgroup's CPU bandwidth limit, not every CPU online (std::thread::hardware_concurrency).
// A process started under a cpuset (taskset, a container, a Slurm allocation) or a CPU
// quota (a Kubernetes `limits.cpu`, `podman --cpus`, systemd's CPUQuota) sizes its
// threads to what it may use: more threads than that spin or get throttled against each
// other. Header-only.

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace llamafleet {

// The CPU bandwidth limit of this process's cgroup in whole CPUs, rounded up; 0 when none
// is set or none can be read. cgroup v2's `cpu.max` ("QUOTA PERIOD" or "max ...") and
// v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none), each read at the cgroup
// `self_cgroup` names (/proc/self/cgroup) and at the root of the mount (what a container
// sees of its own cgroup); the smallest limit found.
inline int CgroupCpuLimit(const std::string& cgroup_fs = "/sys/fs/cgroup",
                          const std::string& self_cgroup = "/proc/self/cgroup") {
  std::string v2_path, v1_path;
  std::ifstream self(self_cgroup);
  std::string line;
  while (std::getline(self, line)) {  // ID:CONTROLLERS:PATH
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (controllers.empty()) v2_path = line.substr(b + 1);
    if (("," + controllers + ",").find(",cpu,") != std::string::npos) v1_path = line.substr(b + 1);
  }
  int limit = 0;
  const auto take = [&limit](long long quota, long long period) {
    if (quota <= 0 || period <= 0) return;
    const int cpus = static_cast<int>((quota + period - 1) / period);
    if (limit == 0 || cpus < limit) limit = cpus;
  };
  for (const std::string& dir : {cgroup_fs + v2_path, cgroup_fs}) {
    std::ifstream f(dir + "/cpu.max");
    std::string quota;
    long long period = 0;
    if (f >> quota >> period && quota != "max") take(std::atoll(quota.c_str()), period);
  }
  for (const std::string& dir : {cgroup_fs + "/cpu" + v1_path, cgroup_fs + "/cpu"}) {
    std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
    long long quota = 0, period = 0;
    if (q >> quota && p >> period) take(quota, period);
  }
  return limit;
}

inline int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cpus <= 0) cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (cpus <= 0) cpus = 1;
  const int limit = CgroupCpuLimit();
  return limit > 0 && limit < cpus ? limit : cpus;
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_USABLE_CPUS_H_
