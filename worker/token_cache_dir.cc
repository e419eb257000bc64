#include "worker/token_cache_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sha256.h"
#include "worker/path_guard.h"

namespace llamafleet::worker {
namespace {

constexpr size_t kMaxOwnerName = 128;

bool PlainByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string TokenCacheDir::path() const {
  std::string out = anchor;
  for (const Level& l : levels) absl::StrAppend(&out, out.empty() || out.back() != '/' ? "/" : "", l.name);
  return out;
}

std::string TokenCacheOwnerName(const std::string& owner) {
  if (owner.empty()) return "%none";
  std::string out;
  for (unsigned char c : owner) {
    if (PlainByte(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  if (out.size() > kMaxOwnerName) return absl::StrCat("%sha256-", Sha256Hex(owner));
  return out;
}

TokenCacheDir OwnerTokenCacheDir(const std::vector<std::string>& path_roots, const std::string& data_dir,
                                 const std::string& owner) {
  TokenCacheDir d;
  if (!path_roots.empty()) {
    d.anchor = path_roots[0];
    // <root>/llamafleet is llamafleet's (the coordinator makes it where it sees the
    // storage); trainers get only its checkpoints/ (DefaultCheckpointRootDir).
    d.levels.push_back({kReservedRootDir, 0755, false});
    d.levels.push_back({kTokenCacheRootDir, 0755, false});
  } else {
    d.anchor = data_dir;
    d.levels.push_back({kTokenCacheRootDir, 0755, false});
  }
  d.levels.push_back({TokenCacheOwnerName(owner), 0700, true});
  return d;
}

TokenCacheDir DefaultCheckpointRootDir(const std::vector<std::string>& path_roots) {
  TokenCacheDir d;
  d.what = "default checkpoint dirs";
  if (path_roots.empty()) return d;
  d.anchor = path_roots[0];
  d.levels.push_back({kReservedRootDir, 0755, false});
  d.levels.push_back({"checkpoints", 0755, true});
  return d;
}

absl::StatusOr<std::string> PrepareTokenCacheDir(const TokenCacheDir& dir, const std::optional<RunAs>& run_as) {
  const uid_t self = ::geteuid();
  const uid_t trainer_uid = run_as.has_value() ? run_as->uid : self;
  const gid_t trainer_gid = run_as.has_value() ? run_as->gid : ::getegid();
  Fd at;
  at.fd = ::open(dir.anchor.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (at.fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir.what, ": ", "cannot open ", dir.anchor, ": ", std::strerror(errno)));
  }
  std::string path = dir.anchor;
  for (size_t i = 0; i < dir.levels.size(); ++i) {
    const TokenCacheDir::Level& level = dir.levels[i];
    const bool owners_dir = i + 1 == dir.levels.size();
    absl::StrAppend(&path, path.back() == '/' ? "" : "/", level.name);
    const bool created = ::mkdirat(at.fd, level.name.c_str(), level.mode) == 0;
    if (!created && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir.what, ": ", "cannot create ", path, ": ", std::strerror(errno)));
    }
    Fd next;
    next.fd = ::openat(at.fd, level.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next.fd < 0) {
      const int error = errno;
      return absl::FailedPreconditionError(absl::StrCat(
          dir.what, ": ", path, (error == ELOOP || error == ENOTDIR) ? " is not a directory (a symbolic link?)" : "",
          error == ELOOP || error == ENOTDIR ? "" : absl::StrCat(": cannot open: ", std::strerror(error))));
    }
    if (created) {
      // Made by this worker just now: set its mode past the umask, and hand it over.
      if (::fchmod(next.fd, level.mode) != 0 ||
          (level.trainers_own && run_as.has_value() && ::fchown(next.fd, trainer_uid, trainer_gid) != 0)) {
        return absl::FailedPreconditionError(
            absl::StrCat(dir.what, ": ", "cannot prepare ", path, ": ", std::strerror(errno)));
      }
    }
    struct stat st;
    if (::fstat(next.fd, &st) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(dir.what, ": ", "cannot inspect ", path));
    }
    if (owners_dir) {
      // Only a worker can create entries at this level (the level above is checked to be
      // root's or the worker's, and not writable by others), so a directory owned by root or
      // by this worker's uid is a peer worker's on the same shared storage, caught between
      // its mkdir and its chown (or killed there): it is handed over, as if made here.
      if (st.st_uid != trainer_uid && run_as.has_value() && (st.st_uid == 0 || st.st_uid == self)) {
        if (::fchown(next.fd, trainer_uid, trainer_gid) != 0 || ::fstat(next.fd, &st) != 0) {
          return absl::FailedPreconditionError(
              absl::StrCat(dir.what, ": ", "cannot hand ", path, " to uid ", trainer_uid, ": ", std::strerror(errno)));
        }
      }
      if (st.st_uid != trainer_uid) {
        return absl::FailedPreconditionError(absl::StrCat(
            dir.what, ": ", path, " is owned by uid ", st.st_uid, ", not by the trainers' uid ", trainer_uid,
            ": refusing a directory someone else could have planted (remove it, or give it to uid ",
            trainer_uid, ")"));
      }
      if ((st.st_mode & 07777) != level.mode && ::fchmod(next.fd, level.mode) != 0) {
        return absl::FailedPreconditionError(absl::StrCat(dir.what, ": ", "cannot set ", path, " to mode ",
                                                          absl::StrFormat("%04o", level.mode), ": ",
                                                          std::strerror(errno)));
      }
    } else {
      if (st.st_uid != 0 && st.st_uid != self && st.st_uid != trainer_uid) {
        return absl::FailedPreconditionError(absl::StrCat(dir.what, ": ", path, " is owned by uid ", st.st_uid,
                                                          ", neither root, the worker's nor the trainers' uid"));
      }
      if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(dir.what, ": ",
                         absl::StrFormat("%s is writable by others (mode %04o): anyone could replace what it "
                                         "holds; make it 0755",
                                         path, st.st_mode & 07777)));
      }
    }
    std::swap(at.fd, next.fd);
  }
  return path;
}

}  // namespace llamafleet::worker
