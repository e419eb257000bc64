#include "common/job_dir_marker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace llamafleet {
namespace {

constexpr size_t kMaxMarkerBytes = 256;

}  // namespace

absl::StatusOr<std::optional<std::string>> ReadJobDirMarker(int dir_fd, const char* marker) {
  const int fd = ::openat(dir_fd, marker, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return absl::FailedPreconditionError(
        absl::StrCat(marker, " cannot be opened (", std::strerror(errno), "; a symbolic link?)"));
  }
  struct stat st;
  char buf[kMaxMarkerBytes];
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  if (n < 0) return absl::FailedPreconditionError(absl::StrCat(marker, " is not a readable file"));
  absl::string_view content(buf, static_cast<size_t>(n));
  content = absl::StripSuffix(content, "\n");
  return std::optional<std::string>(std::string(content));
}

absl::Status WriteJobDirMarker(int dir_fd, const std::string& job_id) {
  const std::string tmp = absl::StrCat(kJobDirMarker, ".tmp-", ::getpid());
  const int fd = ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", kJobDirMarker, ": ", std::strerror(errno)));
  }
  const std::string content = job_id + "\n";
  const bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
                  ::fsync(fd) == 0;
  if (::close(fd) != 0 || !ok || ::renameat(dir_fd, tmp.c_str(), dir_fd, kJobDirMarker) != 0) {
    const int error = errno;
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", kJobDirMarker, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status ClaimJobDir(int dir_fd, const std::string& job_id, const std::string& field,
                         const std::string& shown) {
  absl::StatusOr<std::optional<std::string>> marker = ReadJobDirMarker(dir_fd);
  if (!marker.ok()) return absl::FailedPreconditionError(absl::StrCat(field, ": ", shown, ": ", marker.status().message()));
  if (!marker->has_value()) {
    absl::Status s = WriteJobDirMarker(dir_fd, job_id);
    if (!s.ok()) return absl::FailedPreconditionError(absl::StrCat(field, ": ", shown, ": ", s.message()));
    return absl::OkStatus();
  }
  if (**marker == job_id) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      field, ": ", shown, " is the checkpoint directory of job ", **marker, " (its ", kJobDirMarker,
      " says so), not of job ", job_id, "; every job needs a checkpoint directory of its own"));
}

absl::Status CheckJobDirMarker(int dir_fd, const std::string& job_id, const std::string& shown,
                               const char* marker_name) {
  absl::StatusOr<std::optional<std::string>> marker = ReadJobDirMarker(dir_fd, marker_name);
  if (!marker.ok()) return absl::FailedPreconditionError(absl::StrCat(shown, ": ", marker.status().message()));
  if (!marker->has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        shown, " has no ", marker_name, ": not the directory job ", job_id, "'s trainer made"));
  }
  if (**marker != job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat(shown, " holds the ", marker_name, " of job ", **marker, ", not of job ", job_id));
  }
  return absl::OkStatus();
}

}  // namespace llamafleet
