#include "common/job_dir_marker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/safe_open.h"

namespace llamafleet {
namespace {

constexpr size_t kMaxMarkerBytes = 256;

// A name no other process writes: trainers on different nodes (or in different containers,
// whose PID namespaces repeat pids) claim the same shared directory at once.
std::string TempMarkerName() {
  char host[64] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::random_device random;
  return absl::StrCat(kJobDirMarker, ".tmp-", host, "-", ::getpid(), "-", random(), random());
}

// Writes `job_id` to a fresh temporary file of the directory and fsyncs it; its name.
absl::StatusOr<std::string> WriteTempMarker(int dir_fd, const std::string& job_id) {
  std::string tmp = TempMarkerName();
  const int fd = ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", kJobDirMarker, ": ", std::strerror(errno)));
  }
  const std::string content = job_id + "\n";
  const bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
                  ::fsync(fd) == 0;
  if (::close(fd) != 0 || !ok) {
    const int error = errno;
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", kJobDirMarker, ": ", std::strerror(error)));
  }
  return tmp;
}

}  // namespace

absl::StatusOr<std::optional<std::string>> ReadJobDirMarker(int dir_fd, const char* marker) {
  absl::StatusOr<std::string> content = ReadRegularFile(dir_fd, marker, kMaxMarkerBytes, marker);
  if (content.status().code() == absl::StatusCode::kNotFound) return std::optional<std::string>();
  if (!content.ok()) return absl::FailedPreconditionError(content.status().message());
  return std::optional<std::string>(std::string(absl::StripSuffix(*content, "\n")));
}

absl::Status WriteJobDirMarker(int dir_fd, const std::string& job_id) {
  absl::StatusOr<std::string> tmp = WriteTempMarker(dir_fd, job_id);
  if (!tmp.ok()) return tmp.status();
  if (::renameat(dir_fd, tmp->c_str(), dir_fd, kJobDirMarker) != 0) {
    const int error = errno;
    ::unlinkat(dir_fd, tmp->c_str(), 0);
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", kJobDirMarker, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

absl::Status ClaimJobDir(int dir_fd, const std::string& job_id, const std::string& field,
                         const std::string& shown) {
  absl::StatusOr<std::optional<std::string>> marker = ReadJobDirMarker(dir_fd);
  if (marker.ok() && !marker->has_value()) {
    // Unclaimed: link the written file into place, which fails when another claimant
    // (a peer rank of this job, or another job) got there first; then its marker decides.
    absl::StatusOr<std::string> tmp = WriteTempMarker(dir_fd, job_id);
    if (!tmp.ok()) return absl::FailedPreconditionError(absl::StrCat(field, ": ", shown, ": ", tmp.status().message()));
    const bool linked = ::linkat(dir_fd, tmp->c_str(), dir_fd, kJobDirMarker, 0) == 0;
    int error = errno;
    if (!linked && (error == EPERM || error == EOPNOTSUPP || error == ENOSYS)) {
      // A filesystem without hard links: renamed into place (the last claimant's lands),
      // and the re-read below tells every claimant which one that was.
      error = ::renameat(dir_fd, tmp->c_str(), dir_fd, kJobDirMarker) == 0 ? EEXIST : errno;
    }
    ::unlinkat(dir_fd, tmp->c_str(), 0);
    if (linked) return absl::OkStatus();
    if (error != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat(field, ": ", shown, ": cannot write ", kJobDirMarker, ": ", std::strerror(error)));
    }
    marker = ReadJobDirMarker(dir_fd);
  }
  if (!marker.ok()) return absl::FailedPreconditionError(absl::StrCat(field, ": ", shown, ": ", marker.status().message()));
  if (!marker->has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": ", shown, ": its ", kJobDirMarker, " disappeared while it was claimed"));
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
