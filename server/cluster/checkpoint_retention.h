#ifndef LLAMAFLEET_SERVER_CLUSTER_CHECKPOINT_RETENTION_H_
#define LLAMAFLEET_SERVER_CLUSTER_CHECKPOINT_RETENTION_H_

// Which checkpoint directories the coordinator may record and delete. The coordinator is
// the only one that deletes checkpoints (the trainer never does), and it deletes only
// what a job created: `step-N` directories directly inside the job's own checkpoint dir.
// A worker's report naming any other path is ignored (and logged by the caller).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

// OK when `path` is `<job_dir>/step-<digits>` (after `.`/`..` are resolved lexically,
// and, where both exist on this machine, after symlinks are resolved with realpath: a
// step-N that is a symlink leading elsewhere is refused). INVALID_ARGUMENT naming why
// otherwise (not absolute, outside the job's dir, not a step-N name, no job dir).
absl::Status CheckCheckpointPath(const std::string& job_dir, const std::string& path);

struct RetentionPlan {
  std::vector<v1::Checkpoint> remove;   // files to delete, then rows to forget
  std::vector<v1::Checkpoint> refused;  // beyond keep_last but not the job's to delete
  std::vector<std::string> refusals;    // why, one per refused checkpoint
};
// `checkpoints` newest first (as ListCheckpoints returns them): keeps the newest
// `keep_last`, plans the rest for removal when CheckCheckpointPath allows it.
RetentionPlan PlanRetention(const std::string& job_dir,
                            const std::vector<v1::Checkpoint>& checkpoints, int keep_last);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_CHECKPOINT_RETENTION_H_
