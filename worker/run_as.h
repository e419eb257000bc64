#ifndef LLAMAFLEET_WORKER_RUN_AS_H_
#define LLAMAFLEET_WORKER_RUN_AS_H_

// Who trainers run as, and the environment they start with. Three modes, picked at start:
//
// - per owner (a root worker without --run-as, the default): each job's trainers run as
//   the Unix identity the coordinator names for the job's owner (TaskSpec.identity), so
//   the kernel keeps one user's jobs out of another user's files;
// - single (a root worker with --run-as USER[:GROUP]): every job's trainers run as that
//   one user (the deployments' `llamafleet`), separated only by path checks and modes;
// - the worker's own user (a worker that is not root, and cannot switch).
//
// A worker running as root never runs a job's code as root unless told to
// (`--run-as root`, with a warning).

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llamafleet::worker {

// The one user deployments name with --run-as (deploy/local/install-deps.sh creates it),
// and the owner of directories made before per-owner identities.
inline constexpr char kDefaultTrainerUser[] = "llamafleet";

struct RunAs {
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups of `user` (and `gid`)
  std::string home;           // the user's home directory ("" when it does not exist)
};

// Resolves `spec` ("USER", "USER:GROUP"; "" = none) for a worker whose effective uid is
// `euid`. Returns nullopt when the trainers simply run as the worker's own user (no
// --run-as, or --run-as naming the worker itself). Errors (unknown user or group, a
// non-root worker asked to become someone else) are INVALID_ARGUMENT /
// FAILED_PRECONDITION with a message saying what to do.
absl::StatusOr<std::optional<RunAs>> ResolveRunAs(const std::string& spec, uid_t euid);

enum class TrainerIdentityMode {
  kWorkerUser,  // not root: trainers run as the worker's own user
  kSingle,      // --run-as: every job's trainers run as `single`
  kPerOwner,    // root without --run-as: each job's as its owner's identity (TaskSpec.identity)
};

struct TrainerIdentities {
  TrainerIdentityMode mode = TrainerIdentityMode::kWorkerUser;
  std::optional<RunAs> single;  // kSingle only
};

// The mode for `llamafleet-worker --run-as spec` run with effective uid `euid`; errors as
// ResolveRunAs.
absl::StatusOr<TrainerIdentities> ResolveTrainerIdentities(const std::string& spec, uid_t euid);

// The line the worker logs at start: the mode, who the trainers run as, and what keeps
// one user's jobs out of another's files.
std::string DescribeTrainerIdentities(const TrainerIdentities& identities, uid_t euid);

// The environment a trainer starts from, before the torchrun-style variables are added:
// only what it needs from `inherited` (PATH, locale, TZ, TMPDIR, LD_LIBRARY_PATH, NCCL_*,
// FI_*, CUDA_*, NVIDIA_*, TORCH_*, GLOO_*, OMP_*, and LLAMAFLEET_* except the worker's
// secrets), with HOME/USER/LOGNAME of `run_as` when set (HOME falls back to `work_dir`).
std::vector<std::string> TrainerBaseEnvironment(const char* const* inherited,
                                                const std::optional<RunAs>& run_as,
                                                const std::string& work_dir);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_RUN_AS_H_
