#ifndef LLAMAFLEET_WORKER_TASK_SETUP_H_
#define LLAMAFLEET_WORKER_TASK_SETUP_H_

// What the worker checks and prepares for a task before any rank starts: its paths
// (CheckTaskPaths), then who the ranks run as (task_identity.h), the owner's token cache
// (token_cache_dir.h) and the job's directories (job_dirs.h, per owner; in the other
// modes the trainers make their checkpoint dirs, the default ones in the
// <root>/llamafleet/checkpoints the worker hands them).

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "llamafleet/v1/worker.pb.h"
#include "worker/run_as.h"

namespace llamafleet::worker {

// Every path `task` names stays inside the roots it came with, links resolved, and is a
// regular file or a directory; the directories it writes have no link on the way; on node
// 0, its export directory is new, empty or this job's own (path_guard.h,
// job_checkpoint_dir.h). INVALID_ARGUMENT or FAILED_PRECONDITION naming the field: the
// job's fault. Reads metadata on the job's storage, which may be slow or hang: the agent
// calls it off its session's thread (task_starts.h).
absl::Status CheckTaskPaths(const v1::TaskSpec& task);

struct TaskSetup {
  std::optional<RunAs> run_as;   // TaskLaunch::run_as
  std::optional<mode_t> umask;   // TaskLaunch::umask
  std::string token_cache_dir;   // TaskLaunch::token_cache_dir
};

// Errors are the job's (a refused identity, a directory it may not have): reported like
// a trainer's bad input, so the attempt fails permanently. Each names the field or the
// directory.
absl::StatusOr<TaskSetup> PrepareTask(const v1::TaskSpec& task, const TrainerIdentities& identities,
                                      const std::string& data_dir);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_TASK_SETUP_H_
