#ifndef LLAMAFLEET_WORKER_PATH_GUARD_H_
#define LLAMAFLEET_WORKER_PATH_GUARD_H_

// Where a job may read and write on a worker: the checks the worker runs before it starts
// a trainer, and the trainer runs again where it opens its paths (README "Security model").
// The coordinator already refused paths that are lexically outside the roots; these checks
// resolve symbolic links (realpath) on the machine that opens the files, so a link inside a
// root that leads outside is refused too. No Torch, no protobuf: the trainer links this.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/job_dir_marker.h"

namespace llamafleet::worker {

// The file an export directory carries so that a later run of the same job may replace it
// and deleting the job may remove it; it holds the job id ("" for an export made by hand
// with `llamafleet-train export`).
using ::llamafleet::kExportMarker;

// <root>/llamafleet is llamafleet's own (jobs' default checkpoint directories), and
// <root>/llamafleet/token-cache holds each owner's tokenized datasets (token_cache_dir.h).
inline constexpr char kReservedRootDir[] = "llamafleet";
inline constexpr char kTokenCacheRootDir[] = "token-cache";

// Checks that `path` (the value of the job-spec field `field`, e.g. "data.train_path") is
// absolute and, with every symbolic link resolved, inside one of `roots` (directories,
// themselves resolved; a root that does not exist matches nothing). A path that does not
// exist yet is judged by its nearest existing ancestor. When the path is an existing
// directory, its entries are checked too, two levels deep (a model directory's shards, a
// checkpoint's step-N/ files), up to a bound; a directory with more entries is refused.
// Neither the path nor an entry may lead into a root's llamafleet/token-cache (owners'
// token caches are the worker's to hand out, never a job's to name), and each must be a
// regular file or a directory: a FIFO (whose open would block), a socket or a device is
// refused ("... is not a regular file (a FIFO)").
// Returns INVALID_ARGUMENT naming the field, the path, where it leads and the roots.
// Reads metadata only (it may block as long as the storage does: the worker calls it off
// its session's thread); never opens a file, creates or removes anything.
absl::Status CheckPathInRoots(const std::string& field, const std::string& path,
                              const std::vector<std::string>& roots);

// Checks that an export may be written to `dir`: it does not exist, is an empty directory,
// or is an earlier export of the same job (its kExportMarker file holds `owner`).
// Anything else, a file or a directory of someone else's files, is FAILED_PRECONDITION
// naming output.export_dir; nothing is touched. The directory is listed through a
// descriptor opened without following a link, and the marker read through it with
// common/safe_open.h (no link, never blocking, at most 256 bytes): a marker that is a link,
// a FIFO or anything but a small regular file is FAILED_PRECONDITION naming it.
absl::Status CheckExportDir(const std::string& dir, const std::string& owner);

// Checks that this process (the trainer, running as the job's identity) may write the
// export to `dir`: `dir` itself when it exists, else the nearest existing directory above
// it, in which the missing ones are made. Judged by the kernel for the effective identity
// (faccessat with AT_EACCESS: mode bits and ACLs), on metadata only. FAILED_PRECONDITION
// naming output.export_dir, the directory that refuses, its owner and its mode, so that a
// job learns it before its first step rather than after training.
absl::Status CheckExportDirWritable(const std::string& dir);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_PATH_GUARD_H_
