#include "worker/task_setup.h"

#include <vector>

#include "absl/strings/match.h"
#include "worker/job_dirs.h"
#include "worker/task_identity.h"
#include "worker/token_cache_dir.h"

namespace llamafleet::worker {

absl::StatusOr<TaskSetup> PrepareTask(const v1::TaskSpec& task, const TrainerIdentities& identities,
                                      const std::string& data_dir) {
  absl::StatusOr<TaskIdentity> identity = IdentityForTask(identities, task);
  if (!identity.ok()) return identity.status();
  TaskSetup setup;
  setup.run_as = identity->run_as;
  setup.umask = identity->umask;
  const std::vector<std::string> roots(task.path_roots().begin(), task.path_roots().end());
  // Each owner's tokenized datasets in a directory of their own.
  absl::StatusOr<std::string> token_cache =
      PrepareTokenCacheDir(OwnerTokenCacheDir(roots, data_dir, task.owner()), setup.run_as);
  if (!token_cache.ok()) return token_cache.status();
  setup.token_cache_dir = *token_cache;
  if (identity->dir_mode.has_value()) {
    if (absl::Status s = PrepareJobDirs(task, *setup.run_as, *identity->dir_mode); !s.ok()) return s;
    return setup;
  }
  // One identity for every job: the trainers make a default checkpoint dir in
  // <root>/llamafleet/checkpoints, which the worker makes and hands to them (the levels
  // above stay the worker's).
  const TokenCacheDir checkpoints = DefaultCheckpointRootDir(roots);
  if (!roots.empty() && absl::StartsWith(task.spec().checkpoint().dir(), checkpoints.path() + "/")) {
    absl::StatusOr<std::string> made = PrepareTokenCacheDir(checkpoints, setup.run_as);
    if (!made.ok()) return made.status();
  }
  return setup;
}

}  // namespace llamafleet::worker
