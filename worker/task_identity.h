#ifndef LLAMAFLEET_WORKER_TASK_IDENTITY_H_
#define LLAMAFLEET_WORKER_TASK_IDENTITY_H_

// The identity a task's trainers run as, from the worker's mode (run_as.h) and, per owner,
// the identity the coordinator named in the task (TaskSpec.identity). The identity is
// input from outside like every field of a task: checked before anything runs as it.

#include <sys/types.h>

#include <optional>

#include "absl/status/statusor.h"
#include "llamafleet/v1/worker.pb.h"
#include "worker/run_as.h"

namespace llamafleet::worker {

struct TaskIdentity {
  // Who the ranks run as; nullopt: the worker's own user.
  std::optional<RunAs> run_as;
  // Per owner only: the mode of the directories the worker makes for the job (0700, 0750 or
  // 0770), and the ranks' umask to match (077, 027, 007), so what the trainer creates is
  // as private. nullopt in the other modes: today's modes and the inherited umask.
  std::optional<mode_t> dir_mode;
  std::optional<mode_t> umask;
};

// Per owner: the task's identity, checked (set; uid, gid and groups not 0; a name of
// 1..64 printable bytes without '=' or '/'; dir_mode 0, 0700, 0750 or 0770; a dynamic
// identity whose uid no account of this host's user database holds, and whose uid, gid and
// groups no group of its group database holds). FAILED_PRECONDITION naming
// `identity.<field>` otherwise; without one, FAILED_PRECONDITION saying the coordinator is
// older than this worker. In the other modes the task's identity is ignored.
absl::StatusOr<TaskIdentity> IdentityForTask(const TrainerIdentities& identities,
                                             const v1::TaskSpec& task);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_TASK_IDENTITY_H_
