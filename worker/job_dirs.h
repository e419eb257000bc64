#ifndef LLAMAFLEET_WORKER_JOB_DIRS_H_
#define LLAMAFLEET_WORKER_JOB_DIRS_H_

// The directories a job writes, made by a root worker that runs each owner's jobs as the
// owner's identity (run_as.h), before the job's trainers start, so that they belong to
// that identity and to no one else:
//
// - checkpoint.dir and output.export_dir as the user named them: created *as the
//   identity* (fs_identity.h), from the path root down without following links
//   (common/dir_fd.h), every missing level with the identity's directory mode. The kernel
//   decides whether the identity may make them there: inside another user's 0700
//   directory it may not (EACCES), and neither may the worker on its behalf. One that
//   exists must belong to the identity.
// - the default checkpoint dir, <first root>/llamafleet/checkpoints/<job id>: the levels
//   above it are the worker's (mode 0755; only workers make entries there); the worker
//   makes the job's level and hands it to the identity with its directory mode
//   (token_cache_dir.h's PrepareTokenCacheDir, which also takes over a level a peer
//   worker made and had not handed over yet).
//
// The trainer then finds them made and opens them as before (job_checkpoint_dir.h); what
// it creates inside follows its umask (task_identity.h), so it stays as private.

#include <sys/types.h>

#include "absl/status/status.h"
#include "llamafleet/v1/worker.pb.h"
#include "worker/run_as.h"

namespace llamafleet::worker {

// Makes (or checks) the task's checkpoint and export directories as above, for
// `identity` with `dir_mode` (0700, 0750 or 0770). FAILED_PRECONDITION naming the field
// (checkpoint.dir, output.export_dir), the directory, what is wrong and, for a directory
// of another owner, the chown that would make it the identity's. Never removes anything.
absl::Status PrepareJobDirs(const v1::TaskSpec& task, const RunAs& identity, mode_t dir_mode);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_JOB_DIRS_H_
