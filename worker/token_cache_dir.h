#ifndef LLAMAFLEET_WORKER_TOKEN_CACHE_DIR_H_
#define LLAMAFLEET_WORKER_TOKEN_CACHE_DIR_H_

// Where a worker's trainers keep tokenized datasets (worker/trainer/token_cache.h): one
// directory per job owner, so that one user's jobs can neither read nor plant entries that
// another user's jobs map.
//
//   <first path root>/llamafleet/token-cache/<owner>   (tasks with path roots)
//   <worker data dir>/token-cache/<owner>              (tasks without: older coordinators)
//
// The worker, not the job, picks the directory, from the owner the coordinator names in
// the task (TaskSpec.owner); no job-spec path may lead into <root>/llamafleet/token-cache
// (the coordinator refuses it lexically, path_guard.h after resolving links). On the
// shared filesystem, separation from users with shells comes from the operating system:
// each owner's directory is mode 0700 and owned by the uid the trainers run as, and the
// level above it belongs to the worker, so only the worker creates or renames owners'
// directories.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/run_as.h"

namespace llamafleet::worker {

struct TokenCacheDir {
  struct Level {
    std::string name;
    mode_t mode = 0755;
    // Handed to the trainers' identity when the worker creates it (else kept by the worker).
    bool trainers_own = false;
  };
  // A path root or the worker's data dir: trusted (the administrator's), opened as it is.
  std::string anchor;
  // Below the anchor, outermost first; the last is the owner's directory.
  std::vector<Level> levels;
  // What errors call it.
  std::string what = "token cache";

  std::string path() const;
};

// `owner` as one directory name: bytes outside [A-Za-z0-9_-] are written %XX (so no name is
// "." or "..", none holds a "/", and two owners never share one); an escaped name over 128
// bytes becomes "%sha256-<hex of the owner>", and an empty owner "%none" (neither can come
// out of the escaping).
std::string TokenCacheOwnerName(const std::string& owner);

// <first path root>/llamafleet/checkpoints, where trainers make jobs' default checkpoint
// directories: prepared the same way, its last level handed to the trainers (mode 0755).
TokenCacheDir DefaultCheckpointRootDir(const std::vector<std::string>& path_roots);

// The owner's directory for a task with these path roots on a worker with this data dir.
TokenCacheDir OwnerTokenCacheDir(const std::vector<std::string>& path_roots, const std::string& data_dir,
                                 const std::string& owner);

// Creates what is missing of `dir` and checks what exists, level by level, each opened
// relative to the one above with O_NOFOLLOW (a symbolic link at any level is refused, never
// followed). Above the owner's directory a level must be a directory owned by root, the
// worker or the trainers' user (`run_as`, or the worker itself when unset) and writable by
// no one else. The owner's directory must be owned by the trainers' user; the worker sets
// it to its level's mode (0700 for an owner's token cache). Returns the directory's path, or FAILED_PRECONDITION naming the level,
// what is wrong with it and its owner's uid. Never removes or renames anything.
absl::StatusOr<std::string> PrepareTokenCacheDir(const TokenCacheDir& dir, const std::optional<RunAs>& run_as);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_TOKEN_CACHE_DIR_H_
