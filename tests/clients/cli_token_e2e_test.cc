// A newcomer's first token, with the real binaries: `llamafleet-coordinator token create
// --output FILE` writes it readable by its owner only (and a redirect into a file others
// may read is warned about), and the `llamafleet` CLI without a token, or with a refused
// one, says how to give one.
#include <sys/stat.h>

#include "tests/clients/cli_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cli;  // NOLINT: the fixture's names

class CliTokenTest : public ::testing::Test {
 protected:
  std::vector<std::string> TokenCreate(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> argv = {BinaryPath("llamafleet-coordinator"),
                                     "token",
                                     "create",
                                     "--data-dir",
                                     dir_.path() + "/data",
                                     "--user",
                                     "alice",
                                     "--role",
                                     "user"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  static mode_t ModeOf(const std::string& path) {
    struct stat st = {};
    EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  TempDir dir_;
};

TEST_F(CliTokenTest, CreateOutputWritesTheTokenForItsOwnerOnly) {
  const std::string file = dir_.path() + "/alice.token";
  // Under a umask that would leave a new file readable by everyone.
  std::vector<std::string> argv = {"/bin/sh", "-c", "umask 022 && exec \"$@\"", "sh"};
  for (const std::string& a : TokenCreate({"--output", file})) argv.push_back(a);
  absl::StatusOr<CommandResult> r = RunCommand(argv);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(r->out, "");  // the secret is in the file only
  EXPECT_EQ(ModeOf(file), 0600u);
  const std::string token = testing::ReadFile(file);
  EXPECT_TRUE(absl::StartsWith(token, "lft_")) << token;
  EXPECT_TRUE(absl::StrContains(r->err, file)) << r->err;
  // An existing file (or a link planted in its place) is not written through.
  r = RunCommand(TokenCreate({"--output", file}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1) << r->err;
  EXPECT_TRUE(absl::StrContains(r->err, "exists")) << r->err;
  EXPECT_EQ(testing::ReadFile(file), token);
}

TEST_F(CliTokenTest, RedirectIntoAFileOthersMayReadIsWarnedAbout) {
  const std::string file = dir_.path() + "/alice.token";
  std::string command = "umask 022 && exec";
  for (const std::string& a : TokenCreate()) absl::StrAppend(&command, " '", a, "'");
  absl::StatusOr<CommandResult> r =
      RunCommand({"/bin/sh", "-c", absl::StrCat(command, " > '", file, "'")});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_TRUE(absl::StartsWith(testing::ReadFile(file), "lft_"));
  EXPECT_TRUE(absl::StrContains(r->err, "warning")) << r->err;
  EXPECT_TRUE(absl::StrContains(r->err, "readable by others")) << r->err;
  EXPECT_TRUE(absl::StrContains(r->err, "--output")) << r->err;
  // Through a pipe: nothing to warn about.
  r = RunCommand(TokenCreate());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(absl::StrContains(r->err, "warning")) << r->err;
}

TEST_F(CliTokenTest, CliWithoutAGoodTokenSaysHowToGiveOne) {
  absl::StatusOr<testing::Coordinator> c =
      testing::StartCoordinator({.data_dir = dir_.path() + "/data",
                                 .auth = true,
                                 .log_path = dir_.path() + "/coordinator.log",
                                 .log_level = "warn"});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<CommandResult> r =
      RunCommand({BinaryPath("llamafleet"), "--coordinator", c->address, "get", "jobs"}, "",
                 {{"LLAMAFLEET_TOKEN", ""}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectOneErrorLine(*r, 1, "set LLAMAFLEET_TOKEN or pass --token");
  EXPECT_TRUE(absl::StrContains(r->err, "token create")) << r->err;

  r = RunCommand({BinaryPath("llamafleet"), "--coordinator", c->address, "get", "jobs"}, "",
                 {{"LLAMAFLEET_TOKEN", "lft_0000"}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectOneErrorLine(*r, 1, "invalid or revoked token");
  EXPECT_TRUE(absl::StrContains(r->err, "LLAMAFLEET_TOKEN")) << r->err;
}

}  // namespace
}  // namespace llamafleet
