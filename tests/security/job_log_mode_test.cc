// The coordinator's copies of trainer output are its own on disk: a user with a shell on
// the coordinator host reads no other user's job logs (server/log_store.h).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server/log_store.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 07777;
}

TEST(JobLogModeTest, JobLogsAreMadePrivateAndAnEarlierBuildsAreTightenedAtStart) {
  testing::TempDir tmp;
  const std::string logs = tmp.path() + "/logs";
  // What an earlier build left: world-readable directories and files, and a link that
  // must be neither followed nor changed.
  const std::string old_attempt = logs + "/7/attempt-1";
  std::filesystem::create_directories(old_attempt);
  std::ofstream(old_attempt + "/rank-0.log") << "job 7's secret\n";
  const std::string outside = tmp.path() + "/outside";
  std::ofstream(outside) << "not a log\n";
  ::chmod(outside.c_str(), 0644);
  std::filesystem::create_symlink(outside, old_attempt + "/rank-1.log");
  for (const std::string& p : {logs, logs + "/7", old_attempt}) ::chmod(p.c_str(), 0755);
  ::chmod((old_attempt + "/rank-0.log").c_str(), 0644);
  {
    LogStore store(logs, 1 << 20);
    store.Append("8-1-0", 0, {"job 8's secret"}, 0);
    store.Flush();
    for (const std::string& d :
         {logs, logs + "/8", logs + "/8/attempt-1", logs + "/7", old_attempt}) {
      EXPECT_EQ(ModeOf(d), 0700u) << d;
    }
    EXPECT_EQ(ModeOf(logs + "/8/attempt-1/rank-0.log"), 0600u);
    EXPECT_EQ(ModeOf(old_attempt + "/rank-0.log"), 0600u);
  }
  EXPECT_EQ(ModeOf(outside), 0644u) << "a link in the logs is not followed";
}

}  // namespace
}  // namespace llamafleet
