#include "common/dir_fd.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace llamafleet {
namespace {

// Deeper trees are not job directories (a checkpoint is two levels: step-N/files).
constexpr int kMaxRemoveDepth = 64;

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

absl::Status LinkOrNotDir(absl::string_view shown, absl::string_view component, int error) {
  if (error == ELOOP || error == ENOTDIR || error == EXDEV) {
    return absl::FailedPreconditionError(absl::StrCat(
        shown, ": ", component,
        " is a symbolic link or not a directory; links are never followed in job directories"));
  }
  if (error == ENOENT) return absl::NotFoundError(absl::StrCat(shown, ": ", component, " does not exist"));
  return absl::FailedPreconditionError(
      absl::StrCat(shown, ": cannot open ", component, ": ", std::strerror(error)));
}

absl::StatusOr<std::vector<std::string>> Components(absl::string_view relative, absl::string_view shown) {
  std::vector<std::string> parts;
  if (relative.empty()) return parts;
  for (absl::string_view p : absl::StrSplit(relative, '/')) {
    if (p.empty() || p == "." || p == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": '", relative, "' is not a plain relative path below its root"));
    }
    parts.emplace_back(p);
  }
  return parts;
}

// openat2 beneath `root_fd`, links refused; nullopt where the kernel (or a seccomp
// filter) does not offer it.
std::optional<int> OpenAt2(int root_fd, const std::string& relative) {
#ifdef SYS_openat2
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, root_fd, relative.c_str(), &how, sizeof(how));
  if (fd >= 0) return static_cast<int>(fd);
  if (errno == ENOSYS || errno == EPERM || errno == E2BIG || errno == EINVAL) return std::nullopt;
  return -errno;
#else
  (void)root_fd;
  (void)relative;
  return std::nullopt;
#endif
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string FdPath(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

absl::StatusOr<UniqueFd> OpenRootDir(const std::string& root) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat("path root ", root, " is not there"));
    return absl::FailedPreconditionError(absl::StrCat("cannot open path root ", root, ": ", std::strerror(error)));
  }
  return fd;
}

absl::StatusOr<UniqueFd> OpenDirBeneath(int root_fd, absl::string_view relative,
                                        std::optional<mode_t> create_mode, absl::string_view shown) {
  absl::StatusOr<std::vector<std::string>> parts = Components(relative, shown);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) {
    UniqueFd self(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
    if (!self.valid()) return absl::InternalError(absl::StrCat(shown, ": dup: ", std::strerror(errno)));
    return self;
  }
  if (!create_mode.has_value()) {
    if (std::optional<int> fd = OpenAt2(root_fd, std::string(relative))) {
      if (*fd >= 0) return UniqueFd(*fd);
      return LinkOrNotDir(shown, relative, -*fd);
    }
  }
  // One component at a time from the root, each opened O_NOFOLLOW relative to the last.
  UniqueFd at(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!at.valid()) return absl::InternalError(absl::StrCat(shown, ": dup: ", std::strerror(errno)));
  std::string walked;
  for (const std::string& part : *parts) {
    absl::StrAppend(&walked, walked.empty() ? "" : "/", part);
    bool created = false;
    if (create_mode.has_value()) {
      created = ::mkdirat(at.get(), part.c_str(), *create_mode) == 0;
      if (!created && errno != EEXIST) {
        return absl::FailedPreconditionError(
            absl::StrCat(shown, ": cannot create ", walked, ": ", std::strerror(errno)));
      }
    }
    UniqueFd next(::openat(at.get(), part.c_str(), kDirFlags));
    if (!next.valid()) return LinkOrNotDir(shown, walked, errno);
    if (created && ::fchmod(next.get(), *create_mode) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(shown, ": cannot set the mode of ", walked, ": ", std::strerror(errno)));
    }
    at = std::move(next);
  }
  return at;
}

std::optional<std::pair<std::string, std::string>> SplitBeneathRoot(const std::vector<std::string>& roots,
                                                                    absl::string_view path) {
  std::optional<std::pair<std::string, std::string>> best;
  for (const std::string& root : roots) {
    const std::string base = root == "/" ? "/" : root + "/";
    const bool self = path == root;
    if (!self && (path.size() <= base.size() || path.substr(0, base.size()) != base)) continue;
    if (best.has_value() && best->first.size() >= root.size()) continue;
    best = std::make_pair(root, self ? std::string() : std::string(path.substr(base.size())));
  }
  return best;
}

absl::StatusOr<UniqueFd> OpenDirInRoots(const std::vector<std::string>& roots, const std::string& path,
                                        std::optional<mode_t> create_mode) {
  std::optional<std::pair<std::string, std::string>> split = SplitBeneathRoot(roots, path);
  if (!split.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not below a path root"));
  }
  absl::StatusOr<UniqueFd> root = OpenRootDir(split->first);
  if (!root.ok()) return root.status();
  return OpenDirBeneath(root->get(), split->second, create_mode, path);
}

namespace {

absl::Status RemoveTree(int dir_fd, const std::string& name, int depth) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not one directory entry"));
  }
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("cannot inspect ", name, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    if (depth >= kMaxRemoveDepth) {
      return absl::FailedPreconditionError(absl::StrCat(name, ": more than ", kMaxRemoveDepth, " levels deep"));
    }
    UniqueFd sub(::openat(dir_fd, name.c_str(), kDirFlags));
    if (sub.valid()) {
      // Entries first, read whole before any is removed (readdir over a changing
      // directory may skip some), repeated until the directory reads empty.
      for (int pass = 0; pass < 4; ++pass) {
        UniqueFd listing(::fcntl(sub.get(), F_DUPFD_CLOEXEC, 0));
        DIR* d = listing.valid() ? ::fdopendir(listing.get()) : nullptr;
        if (d == nullptr) break;
        listing.release();
        std::vector<std::string> entries;
        while (dirent* e = ::readdir(d)) {
          const std::string entry = e->d_name;
          if (entry != "." && entry != "..") entries.push_back(entry);
        }
        ::closedir(d);
        if (entries.empty()) break;
        for (const std::string& entry : entries) {
          if (absl::Status s = RemoveTree(sub.get(), entry, depth + 1); !s.ok()) {
            return absl::FailedPreconditionError(absl::StrCat(name, "/", s.message()));
          }
        }
      }
      if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat("cannot remove ", name, ": ", std::strerror(errno)));
    }
    if (errno == ENOENT) return absl::OkStatus();
    if (errno != ELOOP && errno != ENOTDIR) {
      return absl::FailedPreconditionError(absl::StrCat("cannot open ", name, ": ", std::strerror(errno)));
    }
    // Swapped for a link or a file since the fstatat: removed as the entry it is now.
  }
  if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("cannot remove ", name, ": ", std::strerror(errno)));
}

}  // namespace

absl::Status RemoveTreeAt(int dir_fd, const std::string& name) { return RemoveTree(dir_fd, name, 0); }

}  // namespace llamafleet
