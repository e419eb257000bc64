#ifndef LLAMAFLEET_COMMON_USABLE_CPUS_H_
#define LLAMAFLEET_COMMON_USABLE_CPUS_H_

// The CPUs this process may run on: its affinity mask, as `nproc` counts them, not every
// CPU online (std::thread::hardware_concurrency). A process started under a cpuset
// (taskset, a container, a Slurm or Kubernetes CPU allocation) sizes its threads to its
// own cores: more threads than cores spin against each other. Header-only.

#include <sched.h>
#include <unistd.h>

namespace llamafleet {

inline int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_USABLE_CPUS_H_
