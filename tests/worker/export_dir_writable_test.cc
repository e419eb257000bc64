// The trainer's check at start that it may write its export (worker/path_guard.h's
// CheckExportDirWritable), judged as an unprivileged identity in a child process (the
// refusals need root to switch identity; they skip without it).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "tests/testing/process.h"
#include "worker/path_guard.h"

namespace llamafleet::worker {
namespace {

constexpr uid_t kNobody = 65534;

// CheckExportDirWritable(dir) as uid/gid kNobody: its code, and whether its message holds
// `expected`.
std::pair<absl::StatusCode, bool> AsNobody(const std::string& dir, const std::string& expected) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {absl::StatusCode::kInternal, false};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(100);
    const absl::Status s = CheckExportDirWritable(dir);
    const char found = absl::StrContains(s.message(), expected) ? 1 : 0;
    if (::write(pipe_fds[1], &found, 1) != 1) ::_exit(101);
    ::_exit(static_cast<int>(s.code()));
  }
  ::close(pipe_fds[1]);
  char found = 0;
  const bool read = ::read(pipe_fds[0], &found, 1) == 1;
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!read || !WIFEXITED(status)) return {absl::StatusCode::kInternal, false};
  return {static_cast<absl::StatusCode>(WEXITSTATUS(status)), found == 1};
}

TEST(ExportDirWritableTest, AnExportTheJobCannotCreateIsRefusedNamingTheDirectoryThatRefuses) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: judges as another identity";
  testing::TempDir dir;
  const std::string shared = dir.path() + "/shared", closed = dir.path() + "/closed";
  std::filesystem::create_directories(shared);
  std::filesystem::create_directories(closed);
  ::chmod(dir.path().c_str(), 0755);
  ::chmod(shared.c_str(), 01777);
  ::chmod(closed.c_str(), 0755);  // root's

  EXPECT_EQ(AsNobody(shared + "/run/export", "").first, absl::StatusCode::kOk);
  EXPECT_EQ(AsNobody(shared, "").first, absl::StatusCode::kOk);
  auto [code, named] =
      AsNobody(closed + "/run/export", closed +
                                           " (the nearest existing directory, "
                                           "where " +
                                           closed +
                                           "/run/export is made) "
                                           "is not writable by this job's identity (uid 65534): "
                                           "it belongs to uid 0, mode 0755");
  EXPECT_EQ(code, absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(named);
  std::tie(code, named) = AsNobody(closed, "output.export_dir: " + closed + " is not writable");
  EXPECT_EQ(code, absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(named);
  // As root (the worker), anything goes: the check is the trainer's, as the job.
  EXPECT_TRUE(CheckExportDirWritable(closed + "/run").ok());
}

}  // namespace
}  // namespace llamafleet::worker
