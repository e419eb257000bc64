#ifndef LLAMAFLEET_WORKER_RUN_AS_H_
#define LLAMAFLEET_WORKER_RUN_AS_H_

// The identity trainers run as (`llamafleet-worker --run-as USER[:GROUP]`), and the
// environment they start with. A worker running as root never runs a job's code as root
// unless told to: without --run-as its trainers run as the unprivileged user `llamafleet`
// (deploy/local/install-deps.sh creates it).

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llamafleet::worker {

inline constexpr char kDefaultTrainerUser[] = "llamafleet";

struct RunAs {
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups of `user` (and `gid`)
  std::string home;           // the user's home directory ("" when it does not exist)
};

// Resolves `spec` ("USER", "USER:GROUP", "" = the default) for a worker whose effective
// uid is `euid`. Returns nullopt when the trainers simply run as the worker's own user
// (a non-root worker without --run-as, or --run-as naming itself). Errors (unknown user or
// group, a non-root worker asked to become someone else, a root worker whose default user
// is missing) are INVALID_ARGUMENT / FAILED_PRECONDITION with a message saying what to do.
absl::StatusOr<std::optional<RunAs>> ResolveRunAs(const std::string& spec, uid_t euid);

// The environment a trainer starts from, before the torchrun-style variables are added:
// only what it needs from `inherited` (PATH, locale, TZ, TMPDIR, LD_LIBRARY_PATH, NCCL_*,
// FI_*, CUDA_*, NVIDIA_*, TORCH_*, GLOO_*, OMP_*, and LLAMAFLEET_* except the worker's
// secrets), with HOME/USER/LOGNAME of `run_as` when set (HOME falls back to `work_dir`).
std::vector<std::string> TrainerBaseEnvironment(const char* const* inherited,
                                                const std::optional<RunAs>& run_as,
                                                const std::string& work_dir);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_RUN_AS_H_
