// The coordinator's listeners as an operator meets them: a port another process holds,
// gRPC or HTTP, and a second coordinator started on the port of a running one. Each ends
// the process at once with exit 1 and one line naming the flag, the address and the
// reason; no two coordinators ever share a port.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/http/http_server.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::CommandResult;
using ::llamafleet::testing::CoordinatorArgv;
using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::TempDir;

// A coordinator that must refuse to start: its result, within a few seconds (a hang
// fails the test instead of waiting for ctest's timeout).
CommandResult RunRefused(const testing::CoordinatorOptions& options) {
  absl::StatusOr<CommandResult> r = RunCommand(CoordinatorArgv(options), "", {}, absl::Seconds(10));
  EXPECT_TRUE(r.ok()) << "the coordinator did not exit: " << r.status();
  return r.ok() ? *r : CommandResult{};
}

// Exit 1 and exactly one line on stderr, holding every part of `parts`.
void ExpectOneLineExit1(const CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "llamafleet-coordinator: ")) << r.err;
  for (const std::string& part : parts)
    EXPECT_TRUE(absl::StrContains(r.err, part)) << "want '" << part << "' in: " << r.err;
}

class CoordinatorListenTest : public ::testing::Test {
 protected:
  testing::CoordinatorOptions Options(const std::string& name,
                                      const std::string& listen = "127.0.0.1:0") {
    return {.data_dir = absl::StrCat(dir_.path(), "/", name),
            .listen = listen,
            .path_roots = {dir_.path()},
            .log_level = "error"};
  }

  TempDir dir_;
};

TEST_F(CoordinatorListenTest, GrpcPortHeldByAnotherProcessIsOneLineAndExit1) {
  int port = 0;
  const int held = testing::ListenOnLoopback(&port);
  ASSERT_GE(held, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ExpectOneLineExit1(RunRefused(Options("a", address)),
                     {"cannot listen on ", address, "--listen", "Address already in use"});
  close(held);
}

TEST_F(CoordinatorListenTest, HttpPortHeldByAnotherProcessIsOneLineAndExit1) {
  int port = 0;
  const int held = testing::ListenOnLoopback(&port);
  ASSERT_GE(held, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  testing::CoordinatorOptions options = Options("a");
  options.flags = {"--http-listen", address};
  ExpectOneLineExit1(RunRefused(options),
                     {"cannot listen on ", address, "--http-listen", "Address already in use"});
  close(held);
}

// gRPC turns SO_REUSEPORT on by default, which let a second coordinator bind the same
// port and take half of the connections.
TEST_F(CoordinatorListenTest, SecondCoordinatorOnTheSameGrpcPortIsRefused) {
  absl::StatusOr<testing::Coordinator> first = testing::StartCoordinator(Options("first"));
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectOneLineExit1(RunRefused(Options("second", first->address)),
                     {"cannot listen on ", first->address, "--listen", "Address already in use"});
  // The first one still serves, alone.
  EXPECT_EQ(::kill(first->process->pid(), 0), 0);
}

TEST_F(CoordinatorListenTest, SecondCoordinatorOnTheSameHttpPortIsRefused) {
  testing::CoordinatorOptions options = Options("first");
  options.flags = {"--http-listen", "127.0.0.1:0"};
  absl::StatusOr<testing::Coordinator> first = testing::StartCoordinator(options);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::string> http =
      first->process->ReadLineWithPrefix("http listening on ", absl::Seconds(10));
  ASSERT_TRUE(http.ok()) << http.status();
  testing::CoordinatorOptions second = Options("second");
  second.flags = {"--http-listen", *http};
  ExpectOneLineExit1(RunRefused(second),
                     {"cannot listen on ", *http, "--http-listen", "Address already in use"});
}

// The HTTP server itself, when it cannot bind: Start returns the error and its cleanup
// ends (it once waited for a thread it had not started). In a child process, so that a
// hang fails the test instead of blocking it.
TEST(HttpServerStartTest, AFailedStartReturnsItsErrorAndCleansUp) {
  int port = 0;
  const int held = testing::ListenOnLoopback(&port);
  ASSERT_GE(held, 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    http::HttpServerOptions options;
    options.listen = absl::StrCat("127.0.0.1:", port);
    absl::StatusOr<std::unique_ptr<http::HttpServer>> server = http::HttpServer::Start(options, nullptr);
    const bool refused = !server.ok() && absl::StrContains(server.status().message(), "Address already in use");
    _exit(refused ? 0 : 2);
  }
  int status = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "HttpServer::Start on a held port did not return within 10 s";
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  close(held);
}

}  // namespace
}  // namespace llamafleet
