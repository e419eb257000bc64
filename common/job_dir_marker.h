#ifndef LLAMAFLEET_COMMON_JOB_DIR_MARKER_H_
#define LLAMAFLEET_COMMON_JOB_DIR_MARKER_H_

// The identity of a job's checkpoint directory: a file `.llamafleet-job` in it holding the
// job id, written by the job's trainer when it first opens the directory (through a
// descriptor, dir_fd.h). Whoever later writes into, resumes from or deletes in the
// directory checks the file first: a directory that holds another job's id, or none, is
// not the one the job made (renamed in from elsewhere, replaced by someone with a shell on
// the storage) and is refused.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llamafleet {

inline constexpr char kJobDirMarker[] = ".llamafleet-job";
// The same for an export directory (output.export_dir): written by the trainer into the
// staged export before it is renamed into place.
inline constexpr char kExportMarker[] = ".llamafleet-export";

// The job id the marker `marker` of the directory `dir_fd` holds, nullopt when it has
// none. FAILED_PRECONDITION when the marker is a link, not a regular file, or unreadable.
absl::StatusOr<std::optional<std::string>> ReadJobDirMarker(int dir_fd, const char* marker = kJobDirMarker);

// Writes the marker (a temporary name, fsync, then renamed into place).
absl::Status WriteJobDirMarker(int dir_fd, const std::string& job_id);

// For the job's trainer: OK when the directory's marker holds `job_id`; a directory
// without a marker (new, or made before markers existed) is claimed by writing one,
// atomically: of claimants racing on one directory (the job's ranks on several nodes, or
// two jobs) exactly one marker lands, and the others compare against it.
// FAILED_PRECONDITION naming `field` and `shown` when it holds another job's id.
absl::Status ClaimJobDir(int dir_fd, const std::string& job_id, const std::string& field,
                         const std::string& shown);

// For deleting: OK only when the marker holds `job_id`. FAILED_PRECONDITION naming
// `shown` otherwise, without a marker too.
absl::Status CheckJobDirMarker(int dir_fd, const std::string& job_id, const std::string& shown,
                               const char* marker = kJobDirMarker);

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_JOB_DIR_MARKER_H_
