#ifndef LLAMAFLEET_COMMON_DIR_FD_H_
#define LLAMAFLEET_COMMON_DIR_FD_H_

// Job directories on shared storage, reached through directory descriptors that never
// follow a symbolic link. Users with a shell on the storage may replace any directory they
// can write with a link (or rename one away) at any moment; a path string checked once is
// not the directory opened later. So every create, rename and delete of a job's directory
// starts from a descriptor of a path root (the administrator's, trusted as it is) and goes
// down one component at a time with O_NOFOLLOW (openat2 with RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS where the kernel has it): a link at any level below the root is
// refused, never followed, and a descriptor once open keeps naming the directory it
// opened, wherever that directory is renamed to later.
//
// No absl beyond status; no Torch: the coordinator, the worker and the trainer link this.

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llamafleet {

// An owned file descriptor, closed on destruction. -1: none.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// "/proc/self/fd/<fd>": a path naming the directory `fd` holds open, whatever its name is
// now. Code that takes path strings (file writers, readers) works inside that directory
// through it: `FdPath(fd) + "/config.json"` is the file in that very directory.
std::string FdPath(int fd);

// Opens `root`, an administrator's directory (a path root), as it is: links in it are the
// administrator's. NOT_FOUND when it does not exist here (the coordinator may not see the
// storage), FAILED_PRECONDITION otherwise; both name `root`.
absl::StatusOr<UniqueFd> OpenRootDir(const std::string& root);

// Opens the directory `relative` ("a/b/c": no leading '/', no "." or "..", no empty
// component; "" is the root itself) beneath `root_fd` without following a symbolic link at
// any component. With `create_mode`, each missing component is created (mkdirat, that
// mode, then the mode set past the umask); without, a missing one is NOT_FOUND. A link or a
// non-directory at any level is FAILED_PRECONDITION naming `shown` (the path as users know
// it) and the component; nothing is created past it.
absl::StatusOr<UniqueFd> OpenDirBeneath(int root_fd, absl::string_view relative,
                                        std::optional<mode_t> create_mode, absl::string_view shown);

// The root of `roots` (normalized absolute paths) that is `path` (normalized absolute) or
// holds it below it, the longest if several, with the rest of the path relative to it ("" for
// the root itself); nullopt when none does.
std::optional<std::pair<std::string, std::string>> SplitBeneathRoot(const std::vector<std::string>& roots,
                                                                    absl::string_view path);

// OpenRootDir + OpenDirBeneath for `path` below one of `roots`; INVALID_ARGUMENT when no
// root holds it.
absl::StatusOr<UniqueFd> OpenDirInRoots(const std::vector<std::string>& roots, const std::string& path,
                                        std::optional<mode_t> create_mode);

// Removes the entry `name` of the directory `dir_fd` and, when it is a directory, all it
// holds, by unlinkat from each directory's own descriptor: a symbolic link met anywhere is
// removed itself, never followed, so nothing outside `dir_fd`'s tree is touched even when
// entries are swapped meanwhile. A missing entry is OK. `name` must be one component.
absl::Status RemoveTreeAt(int dir_fd, const std::string& name);

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_DIR_FD_H_
