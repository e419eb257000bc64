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
#include "absl/status/statusor.h"
#include "common/dir_fd.h"
#include "common/job_dir_marker.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

// OK when `path` is `<job_dir>/step-<digits>` after `.`/`..` are resolved lexically;
// INVALID_ARGUMENT naming why otherwise (not absolute, outside the job's dir, not a step-N
// name, no job dir). Reads nothing: the cluster loop judges a worker's checkpoint report
// by it, against the job's recorded (already resolved) directory.
absl::Status CheckCheckpointPathLexically(const std::string& job_dir, const std::string& path);

// CheckCheckpointPathLexically, then, where both exist on this machine, the same after
// symlinks are resolved with realpath (a step-N that is a symlink leading elsewhere is
// refused). Goes through the storage, which may hang: never on the cluster loop.
absl::Status CheckCheckpointPath(const std::string& job_dir, const std::string& path);

// A recorded checkpoint as this machine's view of the storage shows it: CheckCheckpointPath,
// and, where the directory is visible here, its manifest.json (rank 0 writes it last; a
// checkpoint without one is incomplete: FAILED_PRECONDITION). Never on the cluster loop.
absl::Status CheckRecordedCheckpoint(const std::string& job_dir, const std::string& path);

struct RetentionPlan {
  std::vector<v1::Checkpoint> remove;   // files to delete, then rows to forget
  std::vector<v1::Checkpoint> refused;  // beyond keep_last but not the job's to delete
  std::vector<std::string> refusals;    // why, one per refused checkpoint
};
// `checkpoints` newest first (as ListCheckpoints returns them): keeps the newest
// `keep_last` and the one with the lowest eval loss (output.export: best reads it back),
// plans the rest for removal when CheckCheckpointPath allows it.
RetentionPlan PlanRetention(const std::string& job_dir,
                            const std::vector<v1::Checkpoint>& checkpoints, int keep_last);

// Deleting on the storage goes through descriptors (common/dir_fd.h). `anchors` are the
// trusted directories a job directory is opened beneath: the path roots (or, on a
// coordinator without roots, the default checkpoint root in its data dir).
std::vector<std::string> DeletionAnchors(const std::vector<std::string>& path_roots,
                                         const std::string& checkpoint_root);

// Opens the job's checkpoint directory for deleting in it: beneath the anchor that holds
// it, no link followed at any level, and its marker (common/job_dir_marker.h) naming the
// job. NOT_FOUND when it (or its root) is not there on this machine: nothing to delete
// here. FAILED_PRECONDITION naming why otherwise: a link, another job's marker, none.
absl::StatusOr<UniqueFd> OpenJobDirToDelete(const std::vector<std::string>& anchors,
                                            const std::string& job_dir, int64_t job_id);

// Removes the planned step-N directories from the job's directory, opened as above, each
// by unlinkat from its descriptor. Returns the steps whose files are gone (removed now,
// or not on this machine); the others are logged by the caller from `errors`.
std::vector<int64_t> RemoveCheckpointFiles(const std::vector<std::string>& anchors,
                                           const std::string& job_dir, int64_t job_id,
                                           const std::vector<v1::Checkpoint>& remove,
                                           std::vector<std::string>* errors);

// Removes the whole job directory `job_dir` (a default checkpoint directory of a deleted
// job, or with `marker` kExportMarker its export) the same way: OK when it is gone or was
// never there; FAILED_PRECONDITION, with nothing removed, when it is a link or does not
// carry the job's marker.
absl::Status RemoveJobDir(const std::vector<std::string>& anchors, const std::string& job_dir,
                          int64_t job_id, const char* marker = kJobDirMarker);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_CHECKPOINT_RETENTION_H_
