#ifndef LLAMAFLEET_WORKER_JOB_CHECKPOINT_DIR_H_
#define LLAMAFLEET_WORKER_JOB_CHECKPOINT_DIR_H_

// A job's checkpoint directory as its trainer holds it: opened once, at start, beneath the
// path root that holds it without following any link (common/dir_fd.h), created where
// missing, and claimed for the job with its marker (common/job_dir_marker.h). The trainer
// then writes and resumes only through that descriptor (FdPath), so a directory swapped
// for a link, or renamed away, later in the job changes nothing it writes: every
// checkpoint goes into the directory the job made. No Torch, no protobuf.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dir_fd.h"

namespace llamafleet::worker {

// `dir` (the spec's checkpoint.dir, normalized, below one of `roots`) opened as above for
// job `job_id`. FAILED_PRECONDITION naming checkpoint.dir when a level is a link or not a
// directory, or the directory holds another job's marker; INVALID_ARGUMENT when no root
// holds it.
absl::StatusOr<UniqueFd> OpenJobCheckpointDir(const std::vector<std::string>& roots, const std::string& dir,
                                              const std::string& job_id);

// For the worker, before a trainer starts: OK when the existing part of `dir` (the value
// of `field`, a directory the job writes) has no link below the root that holds it (the
// missing rest is the trainer's to create). FAILED_PRECONDITION naming the field and the
// component otherwise. Opens directories read-only; creates nothing.
absl::Status CheckWrittenDirHasNoLinks(const std::vector<std::string>& roots, const std::string& dir,
                                       const std::string& field);

// `path` with `dir` (a prefix of it) replaced by `io_dir`: the same file reached through the
// held descriptor. Paths not below `dir` are returned as they are.
std::string ThroughHeldDir(const std::string& path, const std::string& dir, const std::string& io_dir);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_JOB_CHECKPOINT_DIR_H_
