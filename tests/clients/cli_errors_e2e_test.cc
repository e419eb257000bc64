// The real `llamafleet` binary (cli_fixture.h): unreachable, slow and junk coordinators,
// usage errors, and the global flags and environment.
#include "tests/clients/cli_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cli;  // NOLINT: the fixture's names

// ---------------------------------------------------------------------------
// Errors and global flags
// ---------------------------------------------------------------------------

TEST_F(CliTest, UnreachableCoordinatorIsOneLineNamingTheAddress) {
  // Port 1 on loopback: nothing listens there, and an unprivileged test cannot bind it.
  auto r = RunCommand({BinaryPath("llamafleet"), "--coordinator", "127.0.0.1:1", "get", "jobs"}, "",
                      {}, absl::Seconds(20));
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectOneErrorLine(*r, 1, "llamafleet: cannot reach coordinator at 127.0.0.1:1: ");
}

// A TCP relay to 127.0.0.1:`target_port` that holds each new connection for `delay`
// before passing bytes both ways: a coordinator that is slow to answer a new connection
// (its SETTINGS frame comes late), as one is when its CPUs are busy.
class SlowRelay {
 public:
  SlowRelay(int target_port, absl::Duration delay) : target_port_(target_port), delay_(delay) {
    listen_fd_ = ::llamafleet::testing::ListenOnLoopback(&port_);
    if (listen_fd_ >= 0) acceptor_ = std::thread([this] { Accept(); });
  }
  ~SlowRelay() {
    if (listen_fd_ >= 0) {
      shutdown(listen_fd_, SHUT_RDWR);
      close(listen_fd_);
    }
    if (acceptor_.joinable()) acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread& t : pumps_) t.join();
  }
  bool ok() const { return listen_fd_ >= 0; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(pumps_.size());
  }

 private:
  void Accept() {
    while (true) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      std::lock_guard<std::mutex> lock(mu_);
      pumps_.emplace_back([this, client] { Pump(client); });
    }
  }
  void Pump(int client) {
    absl::SleepFor(delay_);
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (server >= 0 && connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      char buf[16384];
      // Until either side closes (the CLI exits; the relay is destroyed).
      while (poll(fds, 2, 10000) > 0) {
        const int from = (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) ? 0 : 1;
        const ssize_t n = recv(fds[from].fd, buf, sizeof(buf), 0);
        if (n <= 0 || send(fds[1 - from].fd, buf, n, MSG_NOSIGNAL) != n) break;
      }
    }
    if (server >= 0) close(server);
    close(client);
  }

  const int target_port_;
  const absl::Duration delay_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;
};

// The full CLI's gRPC channel gives a new connection its default 20 s to finish: with
// grpc.min_reconnect_backoff_ms at 200 (which gRPC also takes as the shortest time a
// connection attempt may take) a coordinator that sent its SETTINGS frame 200 ms late,
// as a loaded one does, made every command fail with "cannot reach coordinator".
TEST_F(CliTest, ACoordinatorSlowToAnswerANewConnectionIsStillReached) {
  Ok({"submit", "-f", "-"}, Spec("slow-answer"));
  const size_t colon = address_.rfind(':');
  SlowRelay relay(std::stoi(address_.substr(colon + 1)), absl::Milliseconds(700));
  ASSERT_TRUE(relay.ok());
  auto r = RunCommand({BinaryPath("llamafleet"), "--coordinator", relay.address(), "--user", "alice",
                       "get", "jobs", "-o", "json"},
                      "", {}, absl::Seconds(20));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_TRUE(absl::StrContains(r->out, "slow-answer")) << r->out;
  EXPECT_EQ(relay.connections(), 1) << "the first connection should have been waited for";
  // So does a submission, on a connection of its own.
  const std::string file = WriteFile("late.yaml", Spec("slow-answer-2"));
  auto submitted = RunCommand({BinaryPath("llamafleet"), "--coordinator", relay.address(), "--user",
                               "alice", "submit", "-f", file},
                              "", {}, absl::Seconds(20));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->exit_code, 0) << submitted->err;
  EXPECT_EQ(submitted->out, "job 2 created\n");
  EXPECT_EQ(relay.connections(), 2);
}

TEST_F(CliTest, CoordinatorAddressFromTheEnvironment) {
  Ok({"submit", "-f", "-"}, Spec("env"));
  auto r = RunCommand({BinaryPath("llamafleet"), "get", "jobs", "-o", "json"}, "",
                      {{"LLAMAFLEET_COORDINATOR", address_}}, absl::Seconds(20));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_TRUE(absl::StrContains(r->out, "\"name\": \"env\"")) << r->out;

  // A bearer token is sent as metadata; this coordinator does not check it yet.
  auto with_token = RunCommand({BinaryPath("llamafleet"), "get", "jobs"}, "",
                               {{"LLAMAFLEET_COORDINATOR", address_}, {"LLAMAFLEET_TOKEN", "t0k"}},
                               absl::Seconds(20));
  ASSERT_TRUE(with_token.ok()) << with_token.status();
  EXPECT_EQ(with_token->exit_code, 0) << with_token->err;
}

TEST_F(CliTest, UsageErrorsExitTwoWithOneLine) {
  ExpectOneErrorLine(Cli({"get", "jobs", "--bogus"}), 2, "--bogus");
  ExpectOneErrorLine(Cli({"submit"}), 2, "--file");
  ExpectOneErrorLine(Cli({"get", "jobs", "-o", "xml"}), 2, "'xml' is not one of");
  ExpectOneErrorLine(Cli({"frobnicate"}), 2, "frobnicate");
  ExpectOneErrorLine(Cli({"get", "jobs", "--timeout", "soon"}), 2, "--timeout");
  ExpectOneErrorLine(Cli({"get", "foo"}), 2, "unknown command 'foo'");
  auto no_port =
      RunCommand({BinaryPath("llamafleet"), "--coordinator", "localhost", "get", "jobs"});
  ASSERT_TRUE(no_port.ok());
  ExpectOneErrorLine(*no_port, 2, "HOST:PORT");
  ExpectOneErrorLine(Cli({"submit", "-f", dir_.path() + "/missing.yaml"}), 1,
                     "cannot read " + dir_.path() + "/missing.yaml");
  // Help is not an error.
  CommandResult help = Cli({"submit", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(help.out, "--dry-run")) << help.out;
}


// Global flags after the command, and the --file=, -fFILE spellings, read like any other.
TEST_F(CliTest, SubmitFlagSpellingsAndGlobalFlagsAfterTheCommand) {
  const std::string b = WriteFile("b.yaml", Spec("b"));
  EXPECT_EQ(Ok({"submit", "-f", b}), "job 1 created\n");
  auto again = RunCommand({BinaryPath("llamafleet"), "submit", "--file=" + b, "--coordinator",
                           address_, "--user", "alice", "--timeout", "10s", "-o", "table"},
                          "", {}, absl::Seconds(20));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->err, "");
  EXPECT_TRUE(absl::StartsWith(again->out, "job 1 already exists (idempotency key auto-"))
      << again->out;
  EXPECT_EQ(Ok({"submit", "-f" + b}), again->out);
}

TEST_F(CliTest, SubmitUsesUserFromTheEnvironment) {
  const std::string file = WriteFile("job.yaml", Spec("mine"));
  auto r = RunCommand({BinaryPath("llamafleet"), "submit", "-f", file, "--coordinator", address_},
                      "", {{"USER", "carol"}}, absl::Seconds(20));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->err, "");
  EXPECT_EQ(r->out, "job 1 created\n");
  EXPECT_EQ(AllJobs().at(0).owner(), "carol");

  // Without $USER (cron, containers): the passwd entry's name.
  const passwd* pw = getpwuid(getuid());
  ASSERT_NE(pw, nullptr);
  const std::string login = pw->pw_name;
  const std::string other = WriteFile("other.yaml", Spec("theirs"));
  auto no_user = RunCommand({"/usr/bin/env", "-u", "USER", BinaryPath("llamafleet"), "submit", "-f",
                             other, "--coordinator", address_},
                            "", {}, absl::Seconds(20));
  ASSERT_TRUE(no_user.ok()) << no_user.status();
  EXPECT_EQ(no_user->err, "");
  EXPECT_EQ(no_user->out, "job 2 created\n");
  EXPECT_EQ(AllJobs().at(0).owner(), login);
}

// A server that answers every connection with junk: one error line, nothing on stdout.
TEST_F(CliTest, AJunkServerIsOneErrorLine) {
  int port = 0;
  const int fd = ::llamafleet::testing::ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  const std::string junk_address = absl::StrCat("127.0.0.1:", port);
  std::thread server([fd] {
    // A SETTINGS frame, then a HEADERS frame whose HPACK block indexes entry 0, then noise.
    const std::string junk = std::string("\0\0\0\x04\0\0\0\0\0" "\0\0\x01\x01\x05\0\0\0\x01\x80", 19) +
                             "\xde\xad\xbe\xef garbage";
    while (true) {
      const int c = accept(fd, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)recv(c, buf, sizeof(buf), 0);
      (void)send(c, junk.data(), junk.size(), MSG_NOSIGNAL);
      close(c);
    }
  });
  const std::string file = WriteFile("job.yaml", Spec("junk"));
  auto r = RunCommand({BinaryPath("llamafleet"), "--coordinator", junk_address, "--user", "alice",
                       "--timeout", "2s", "submit", "-f", file},
                      "", {}, absl::Seconds(30));
  shutdown(fd, SHUT_RDWR);
  close(fd);
  server.join();
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectOneErrorLine(*r, 1, "");
  EXPECT_EQ(r->out, "");
}

TEST_F(CliTest, VersionNamesTheProgram) {
  auto version = RunCommand({BinaryPath("llamafleet"), "--version"});
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->exit_code, 0);
  EXPECT_TRUE(absl::StartsWith(version->out, "llamafleet ")) << version->out;
}

}  // namespace
}  // namespace llamafleet
