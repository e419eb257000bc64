// The fixture of the `llamafleet` CLI end-to-end suites (cli_e2e_test's files): a real
// coordinator process, the real CLI binary pointed at it as a user, and the checks of what
// a user or a script sees.
#ifndef LLAMAFLEET_TESTS_CLIENTS_CLI_FIXTURE_H_
#define LLAMAFLEET_TESTS_CLIENTS_CLI_FIXTURE_H_

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "llamafleet/v1/job.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"

namespace llamafleet::testing_cli {

using ::llamafleet::testing::BinaryPath;
using ::llamafleet::testing::CommandResult;
using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::Subprocess;
using ::llamafleet::testing::TempDir;

// A valid spec with the fields every job needs; `extra` is appended as YAML.
inline std::string Spec(const std::string& name, const std::string& extra = "") {
  return absl::StrCat("name: ", name,
                      "\nmodel: {preset: tiny, tokenizer: /data/tok.model}\n"
                      "data: {train_path: /data/train.jsonl}\n"
                      "training: {max_steps: 5, seq_len: 64}\n",
                      extra);
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCoordinator("127.0.0.1:0"); }

  void TearDown() override { StopCoordinator(); }

  void StartCoordinator(const std::string& listen) {
    // Specs name /data/... and the queue research: both must be configured.
    const std::string config = WriteFile("coordinator.yaml",
                                         "paths: {roots: [/]}\nqueues: {research: {gpu_quota: 0}}\n");
    absl::StatusOr<testing::Coordinator> started = testing::StartCoordinator(
        {.data_dir = dir_.path() + "/data", .listen = listen, .log_path = dir_.path() + "/coordinator.log",
         .config = config, .log_level = "warn"});
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(started->process);
    address_ = started->address;
  }

  void StopCoordinator() {
    if (coordinator_ == nullptr) return;  // never started, or already stopped
    // Graceful stop, so a hang on shutdown shows up here; the destructor kills otherwise.
    coordinator_->Signal(SIGTERM);
    auto code = coordinator_->Wait(absl::Seconds(10));
    EXPECT_TRUE(code.ok() && *code == 0) << "coordinator did not shut down cleanly";
    coordinator_.reset();
  }

  // argv for the CLI pointed at this test's coordinator, as user alice.
  std::vector<std::string> Argv(const std::vector<std::string>& args,
                                const std::string& user = "alice") const {
    std::vector<std::string> argv = {BinaryPath("llamafleet"), "--coordinator", address_, "--user",
                                     user};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  CommandResult Cli(const std::vector<std::string>& args, const std::string& input = "",
                    const std::string& user = "alice") const {
    auto result = RunCommand(Argv(args, user), input, {}, absl::Seconds(20));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }

  // Runs a command that must succeed with nothing on stderr.
  std::string Ok(const std::vector<std::string>& args, const std::string& input = "",
                 const std::string& user = "alice") const {
    CommandResult r = Cli(args, input, user);
    EXPECT_EQ(r.exit_code, 0) << "args: " << absl::StrJoin(args, " ") << "\nstderr: " << r.err;
    EXPECT_EQ(r.err, "");
    return r.out;
  }

  std::string WriteFile(const std::string& name, const std::string& text) const {
    const std::string path = absl::StrCat(dir_.path(), "/", name);
    std::ofstream(path) << text;
    return path;
  }

  // Every job, through `get jobs --all -o json`, parsed with protobuf's JSON mapping.
  std::vector<v1::Job> AllJobs(const std::vector<std::string>& filters = {}) const {
    std::vector<std::string> args = {"get", "jobs", "--all", "-o", "json"};
    args.insert(args.end(), filters.begin(), filters.end());
    v1::ListJobsResponse response;
    const std::string out = Ok(args);
    auto parsed = google::protobuf::util::JsonStringToMessage(out, &response);
    EXPECT_TRUE(parsed.ok()) << parsed.ToString() << "\n" << out;
    return {response.jobs().begin(), response.jobs().end()};
  }

  std::vector<std::string> Names(const std::vector<v1::Job>& jobs) const {
    std::vector<std::string> names;
    for (const v1::Job& job : jobs) names.push_back(job.spec().name());
    return names;
  }

  TempDir dir_;
  std::unique_ptr<Subprocess> coordinator_;
  std::string address_;
};

// A failed command: the exit code, and exactly one "llamafleet: ..." line on stderr.
inline void ExpectOneErrorLine(const CommandResult& r, int exit_code, const std::string& substring) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "llamafleet: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, substring)) << "want '" << substring << "' in: " << r.err;
}

}  // namespace llamafleet::testing_cli

#endif  // LLAMAFLEET_TESTS_CLIENTS_CLI_FIXTURE_H_
