#include "worker/path_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/safe_open.h"
#include "common/status_macros.h"

namespace llamafleet::worker {
namespace {

// Entries looked at below one directory field (two levels). A checkpoint of 64 ranks
// with a few steps kept, or a model directory, is far below this.
constexpr int kMaxScannedEntries = 100000;

// An export's marker holds a job id.
constexpr size_t kMaxMarkerBytes = 256;

// A job reads and writes regular files and directories only: a FIFO blocks whoever opens
// it, a device or socket is nothing a job's data can be.
absl::Status NotFileOrDirectory(const std::string& field, const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", path, " is not a regular file (", FileKind(mode),
                   "); a job's paths name regular files and directories"));
}

std::string RealPath(const std::string& path, int* error) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    *error = errno;
    return "";
  }
  *error = 0;
  return buf;
}

bool Inside(const std::string& resolved, const std::string& root) {
  if (root == "/") return true;
  return resolved == root || (resolved.size() > root.size() &&
                              resolved.compare(0, root.size(), root) == 0 &&
                              resolved[root.size()] == '/');
}

class RootSet {
 public:
  explicit RootSet(const std::vector<std::string>& roots) : given_(roots) {
    for (const std::string& r : roots) {
      int error = 0;
      std::string real = RealPath(r, &error);
      if (!real.empty()) resolved_.push_back(real);
    }
  }
  bool Contains(const std::string& resolved) const {
    for (const std::string& r : resolved_) {
      if (Inside(resolved, r)) return true;
    }
    return false;
  }
  // The token cache directory of a root that `resolved` lies in, or "".
  std::string TokenCacheHolding(const std::string& resolved) const {
    for (const std::string& r : resolved_) {
      const std::string cache = absl::StrCat(r == "/" ? "" : r, "/", kReservedRootDir, "/", kTokenCacheRootDir);
      if (Inside(resolved, cache)) return cache;
    }
    return "";
  }
  std::string Describe() const { return absl::StrCat("[", absl::StrJoin(given_, ", "), "]"); }

 private:
  std::vector<std::string> given_;
  std::vector<std::string> resolved_;
};

// `path` with its existing part resolved by the kernel's rules (so `link/..` means the
// link target's parent) and the missing rest appended. Errors name `field`.
absl::StatusOr<std::string> Resolve(const std::string& field, const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  size_t existing = parts.size();
  while (true) {
    const std::string prefix = absl::StrCat("/", absl::StrJoin(parts.begin(), parts.begin() + existing, "/"));
    struct stat st;
    if (::lstat(prefix.c_str(), &st) == 0) {
      int error = 0;
      std::string real = RealPath(prefix, &error);
      if (real.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": ", path, ": ", prefix, " cannot be resolved (", std::strerror(error),
            "; a symbolic link that leads nowhere?)"));
      }
      for (size_t i = existing; i < parts.size(); ++i) {
        if (parts[i] == ".") continue;
        if (parts[i] == "..") {
          return absl::InvalidArgumentError(
              absl::StrCat(field, ": ", path, ": '..' after a directory that does not exist"));
        }
        real = absl::StrCat(real == "/" ? "" : real, "/", parts[i]);
      }
      return real;
    }
    if (errno != ENOENT && errno != ENOTDIR) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": cannot inspect ", prefix, ": ", std::strerror(errno)));
    }
    if (existing == 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, ": / is not there"));
    }
    --existing;
  }
}

// The entries of `dir` (depth levels), each resolved and checked against the roots.
absl::Status ScanEntries(const std::string& field, const std::string& dir, int depth,
                         const RootSet& roots, int* budget) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (d == nullptr) return absl::OkStatus();  // unreadable: nothing can be read through it
  while (dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (--*budget < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", dir, " holds more than ", kMaxScannedEntries,
          " entries; a job's directory is checked entry by entry and must be smaller"));
    }
    const std::string entry = absl::StrCat(dir == "/" ? "" : dir, "/", name);
    int error = 0;
    const std::string real = RealPath(entry, &error);
    if (real.empty()) {
      if (error == ENOENT) {
        // Removed meanwhile, or a link that leads nowhere: either way refuse a dangling link.
        struct stat st;
        if (::lstat(entry.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
          return absl::InvalidArgumentError(
              absl::StrCat(field, ": ", entry, " is a symbolic link that leads nowhere"));
        }
      }
      continue;
    }
    if (!roots.Contains(real)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", entry, " leads to ", real,
                                                     ", outside the path roots ",
                                                     roots.Describe()));
    }
    if (const std::string cache = roots.TokenCacheHolding(real); !cache.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", entry, " leads to ", real, ", inside ", cache,
                                                     ", which holds owners' token caches"));
    }
    struct stat st;
    if (::stat(real.c_str(), &st) != 0) continue;  // removed meanwhile
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
      return NotFileOrDirectory(field, entry, st.st_mode);
    }
    if (depth > 1 && S_ISDIR(st.st_mode)) {
      LF_RETURN_IF_ERROR(ScanEntries(field, entry, depth - 1, roots, budget));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPathInRoots(const std::string& field, const std::string& path,
                              const std::vector<std::string>& roots) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", path, "\" must be an absolute path"));
  }
  const RootSet root_set(roots);
  absl::StatusOr<std::string> resolved = Resolve(field, path);
  if (!resolved.ok()) return resolved.status();
  if (!root_set.Contains(*resolved)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, " leads to ", *resolved,
                                                   ", outside the path roots ",
                                                   root_set.Describe()));
  }
  if (const std::string cache = root_set.TokenCacheHolding(*resolved); !cache.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", path, " leads to ", *resolved, ", inside ", cache,
                                                   ", which holds owners' token caches"));
  }
  struct stat st;
  if (::stat(resolved->c_str(), &st) != 0) return absl::OkStatus();  // not there (yet)
  if (S_ISDIR(st.st_mode)) {
    int budget = kMaxScannedEntries;
    return ScanEntries(field, path, 2, root_set, &budget);
  }
  if (!S_ISREG(st.st_mode)) return NotFileOrDirectory(field, path, st.st_mode);
  return absl::OkStatus();
}

absl::Status CheckExportDirWritable(const std::string& dir) {
  std::string at = dir;
  struct stat st;
  while (::lstat(at.c_str(), &st) != 0) {
    if ((errno != ENOENT && errno != ENOTDIR) || at == "/" || at.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("output.export_dir: cannot inspect ", at, ": ", std::strerror(errno)));
    }
    const size_t slash = at.rfind('/');
    at = slash == 0 || slash == std::string::npos ? "/" : at.substr(0, slash);
  }
  const std::string which =
      at == dir ? at
                : absl::StrCat(at, " (the nearest existing directory, where ", dir, " is made)");
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("output.export_dir: ", which, " is not a directory"));
  }
  if (::faccessat(AT_FDCWD, at.c_str(), W_OK | X_OK, AT_EACCESS) == 0) return absl::OkStatus();
  const int error = errno;
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", st.st_mode & 07777);
  return absl::FailedPreconditionError(
      absl::StrCat("output.export_dir: ", which, " is not writable by this job's identity (uid ",
                   ::geteuid(), "): it belongs to uid ", st.st_uid, ", mode ", mode, " (",
                   std::strerror(error), "); name a directory the job may create"));
}

absl::Status CheckExportDir(const std::string& dir, const std::string& owner) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("output.export_dir: cannot inspect ", dir, ": ", std::strerror(errno)));
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "output.export_dir: ", dir, " is a symbolic link; name a new or empty directory"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "output.export_dir: ", dir, " exists and is not a directory; name a new or empty directory"));
  }
  // Listed and read through a descriptor of the directory that was looked at: a swap for a
  // link meanwhile fails the open rather than leading elsewhere.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  std::unique_ptr<DIR, int (*)(DIR*)> d(fd >= 0 ? ::fdopendir(fd) : nullptr, ::closedir);
  if (d == nullptr) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("output.export_dir: cannot list ", dir, ": ", std::strerror(error)));
  }
  int entries = 0;
  std::string example;
  bool marked = false;
  while (dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    ++entries;
    if (name == kExportMarker) {
      marked = true;
    } else if (example.empty()) {
      example = name;
    }
  }
  if (entries == 0) return absl::OkStatus();
  if (marked) {
    const std::string shown = absl::StrCat("output.export_dir: ", dir, "/", kExportMarker);
    absl::StatusOr<std::string> content =
        ReadRegularFile(::dirfd(d.get()), kExportMarker, kMaxMarkerBytes, shown);
    if (!content.ok() && content.status().code() != absl::StatusCode::kNotFound) {
      return absl::FailedPreconditionError(content.status().message());
    }
    if (content.ok()) {
      const absl::string_view job = absl::StripSuffix(*content, "\n");
      if (job == owner) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("output.export_dir: ", dir, " is the export of another job (",
                       job.empty() ? std::string("a manual export") : absl::StrCat("job ", job),
                       "); name a new or empty directory"));
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "output.export_dir: ", dir, " is not empty (", entries, " entries, e.g. '", example,
      "') and is not an earlier export of this job; llamafleet replaces only its own exports: "
      "name a new or empty directory"));
}

}  // namespace llamafleet::worker
