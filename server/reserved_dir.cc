#include "server/reserved_dir.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/dir_fd.h"
#include "common/status_macros.h"

namespace llamafleet {
namespace {

// The system user trainers run as by default (worker/run_as.h): workers hand it the
// directories trainers write.
constexpr char kTrainerUser[] = "llamafleet";

bool TrustedOwner(uid_t uid) {
  if (uid == 0 || uid == ::geteuid()) return true;
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[4096];
  return ::getpwnam_r(kTrainerUser, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr &&
         found->pw_uid == uid;
}

absl::Status CheckLevel(int fd, const std::string& path, bool check_owner) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::FailedPreconditionError(absl::StrCat("cannot inspect ", path));
  if (check_owner && !TrustedOwner(st.st_uid)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is owned by uid ", st.st_uid, ", neither root, the coordinator's uid ", ::geteuid(),
        " nor the trainers' user '", kTrainerUser,
        "': whoever owns it decides where jobs' default checkpoints go; refusing to start (move it "
        "away and let the coordinator create it)"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is writable by group or others (mode %04o): anyone could replace what it holds; refusing to "
        "start (chmod 0755 it)",
        path, st.st_mode & 07777));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareReservedDir(const std::string& first_root, bool* unchecked) {
  *unchecked = false;
  absl::StatusOr<UniqueFd> root = OpenRootDir(first_root);
  if (!root.ok()) {
    if (root.status().code() == absl::StatusCode::kNotFound) {
      *unchecked = true;
      return absl::OkStatus();
    }
    return root.status();
  }
  const std::string path = absl::StrCat(first_root == "/" ? "" : first_root, "/llamafleet");
  if (::mkdirat(root->get(), "llamafleet", 0755) == 0) {
    UniqueFd made(::openat(root->get(), "llamafleet", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (made.valid()) ::fchmod(made.get(), 0755);
  } else if (errno == EACCES || errno == EPERM || errno == EROFS) {
    // Not ours to make (a root this user cannot write, read-only here): the workers make it.
    *unchecked = true;
    return absl::OkStatus();
  } else if (errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  absl::StatusOr<UniqueFd> dir = OpenDirBeneath(root->get(), "llamafleet", std::nullopt, path);
  if (!dir.ok()) return absl::FailedPreconditionError(absl::StrCat(dir.status().message(), "; refusing to start"));
  LF_RETURN_IF_ERROR(CheckLevel(dir->get(), path, /*check_owner=*/true));
  for (const char* sub : {"checkpoints", "token-cache"}) {
    const std::string sub_path = absl::StrCat(path, "/", sub);
    absl::StatusOr<UniqueFd> level = OpenDirBeneath(dir->get(), sub, std::nullopt, sub_path);
    if (!level.ok() && level.status().code() == absl::StatusCode::kNotFound) continue;
    if (!level.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(level.status().message(), "; refusing to start"));
    }
    LF_RETURN_IF_ERROR(CheckLevel(level->get(), sub_path, /*check_owner=*/false));
  }
  return absl::OkStatus();
}

}  // namespace llamafleet
