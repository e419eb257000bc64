#include "worker/job_dirs.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/dir_fd.h"
#include "common/status_macros.h"
#include "worker/fs_identity.h"
#include "worker/token_cache_dir.h"

namespace llamafleet::worker {
namespace {

std::string Clean(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string Who(const RunAs& identity) {
  return absl::StrCat(identity.user, " (uid ", identity.uid, ")");
}

// A directory the user named, made and checked as the identity.
absl::Status PrepareNamedDir(const std::vector<std::string>& roots, const std::string& field, const std::string& dir,
                             const RunAs& identity, mode_t dir_mode) {
  return WithFsIdentity(identity, [&]() -> absl::Status {
    absl::StatusOr<UniqueFd> fd = OpenDirInRoots(roots, dir, dir_mode);
    if (!fd.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(field, ": ", fd.status().message(), " (the job's trainers run as ",
                                                        Who(identity), " and may make directories only where it may)"));
    }
    struct stat st;
    if (::fstat(fd->get(), &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(field, ": cannot inspect ", dir, ": ", std::strerror(errno)));
    }
    if (st.st_uid != identity.uid) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: %s belongs to uid %d, not to %s that the job's trainers run as: it is someone else's directory, or one "
          "made before each owner's jobs ran as their own identity (if it is this owner's: chown -R %d:%d %s)",
          field, dir, st.st_uid, Who(identity), identity.uid, identity.gid, dir));
    }
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status PrepareJobDirs(const v1::TaskSpec& task, const RunAs& identity, mode_t dir_mode) {
  std::vector<std::string> roots(task.path_roots().begin(), task.path_roots().end());
  // No roots (a coordinator without confinement): the walk starts at "/".
  if (roots.empty()) roots.push_back("/");
  const v1::JobSpec& spec = task.spec();
  const std::string checkpoint_dir = Clean(spec.checkpoint().dir());
  TokenCacheDir defaults = DefaultCheckpointRootDir({task.path_roots().begin(), task.path_roots().end()});
  const std::string default_root = defaults.path();
  if (!checkpoint_dir.empty() && !task.path_roots().empty() && absl::StartsWith(checkpoint_dir, default_root + "/")) {
    const std::string name = checkpoint_dir.substr(default_root.size() + 1);
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint.dir: ", checkpoint_dir, " is inside ", default_root, " but not a job's directory there"));
    }
    // The levels above are the worker's; the job's own is handed to its identity.
    defaults.what = "checkpoint.dir";
    defaults.levels.back().trainers_own = false;
    defaults.levels.push_back({name, dir_mode, true});
    absl::StatusOr<std::string> made = PrepareTokenCacheDir(defaults, identity);
    if (!made.ok()) return made.status();
  } else if (!checkpoint_dir.empty()) {
    LF_RETURN_IF_ERROR(
        PrepareNamedDir(roots, "checkpoint.dir", checkpoint_dir, identity, dir_mode));
  }
  const std::string export_dir = Clean(spec.output().export_dir());
  if (!export_dir.empty()) {
    LF_RETURN_IF_ERROR(PrepareNamedDir(roots, "output.export_dir", export_dir, identity, dir_mode));
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::worker
