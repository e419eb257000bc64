#include "common/safe_open.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace llamafleet {
namespace {

absl::Status NotRegular(absl::string_view shown, mode_t mode) {
  return absl::FailedPreconditionError(
      absl::StrCat(shown, " is not a regular file (", FileKind(mode), ")"));
}

absl::Status OpenError(absl::string_view shown, int error) {
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(absl::StrCat(shown, " does not exist"));
    case ELOOP:
      return absl::FailedPreconditionError(
          absl::StrCat(shown, " is a symbolic link; links are not followed here"));
    case ENXIO:  // a FIFO without a reader opened for writing, or a socket
      return absl::FailedPreconditionError(
          absl::StrCat(shown, " is not a regular file (a FIFO or a socket)"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(
          absl::StrCat(shown, ": cannot open: ", std::strerror(error)));
    default:
      return absl::FailedPreconditionError(
          absl::StrCat(shown, ": cannot open: ", std::strerror(error)));
  }
}

// The look before the open, the open and the check of the descriptor (safe_open.h).
absl::StatusOr<UniqueFd> OpenChecked(int dir_fd, const std::string& name, int flags, mode_t mode,
                                     absl::string_view shown, LastLink last) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(shown, ": no file name"));
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, last == LastLink::kRefuse ? AT_SYMLINK_NOFOLLOW : 0) ==
      0) {
    if (S_ISLNK(st.st_mode)) return OpenError(shown, ELOOP);
    if (!S_ISREG(st.st_mode)) return NotRegular(shown, st.st_mode);
  } else if (errno != ENOENT || (flags & O_CREAT) == 0) {
    return OpenError(shown, errno);
  }
  const int all = flags | O_NONBLOCK | O_CLOEXEC | (last == LastLink::kRefuse ? O_NOFOLLOW : 0);
  UniqueFd fd(::openat(dir_fd, name.c_str(), all, mode));
  if (!fd.valid()) return OpenError(shown, errno);
  if (::fstat(fd.get(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(shown, ": cannot inspect: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(shown, st.st_mode);
  const int status = ::fcntl(fd.get(), F_GETFL);
  if (status < 0 || ::fcntl(fd.get(), F_SETFL, status & ~O_NONBLOCK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(shown, ": fcntl: ", std::strerror(errno)));
  }
  return fd;
}

}  // namespace

std::string FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "of an unknown kind";
}

absl::StatusOr<UniqueFd> OpenRegularFile(int dir_fd, const std::string& name,
                                         absl::string_view shown, LastLink last) {
  return OpenChecked(dir_fd, name, O_RDONLY, 0, shown, last);
}

absl::StatusOr<UniqueFd> CreateRegularFile(int dir_fd, const std::string& name, mode_t mode,
                                           absl::string_view shown) {
  // Truncated only once it is known to be a regular file: O_TRUNC is not given to the open.
  absl::StatusOr<UniqueFd> fd =
      OpenChecked(dir_fd, name, O_WRONLY | O_CREAT, mode, shown, LastLink::kRefuse);
  if (!fd.ok()) return fd.status();
  if (::ftruncate(fd->get(), 0) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(shown, ": cannot truncate: ", std::strerror(errno)));
  }
  return fd;
}

absl::StatusOr<std::string> ReadRegularFile(int dir_fd, const std::string& name, size_t max_bytes,
                                            absl::string_view shown, LastLink last) {
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(dir_fd, name, shown, last);
  if (!fd.ok()) return fd.status();
  auto too_large = [&](uint64_t bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        shown, ": ", FormatBytes(static_cast<int64_t>(bytes)), ", more than the ",
        FormatBytes(static_cast<int64_t>(max_bytes)), " such a file may hold"));
  };
  // Judged on the descriptor before anything is read: a sparse file of gigabytes costs
  // nothing to refuse.
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) {
    return absl::DataLossError(absl::StrCat(shown, ": cannot stat: ", std::strerror(errno)));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large(st.st_size);
  // Read to the end, at most one byte past the bound: a file that grew since is refused too.
  std::string out;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd->get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat(shown, ": read error: ", std::strerror(errno)));
    }
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > max_bytes) return too_large(out.size() + n);
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace llamafleet
