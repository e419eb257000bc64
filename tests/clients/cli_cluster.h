#ifndef LLAMAFLEET_TESTS_CLIENTS_CLI_CLUSTER_H_
#define LLAMAFLEET_TESTS_CLIENTS_CLI_CLUSTER_H_

// The fixture of the CLI's end-to-end tests that need jobs to run: a real coordinator and
// two CPU workers on loopback whose "trainer" is a shell script printing what
// llamafleet-train prints (started/metrics/checkpoint_saved/eval JSON on rank 0's stdout,
// plain log lines on stderr), and the real `llamafleet` binary run against them. Test
// code only: each test file includes it once.

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using ::google::protobuf::util::TimeUtil;
using ::llamafleet::testing::BinaryPath;
using ::llamafleet::testing::CommandResult;
using ::llamafleet::testing::ReadFile;
using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::Subprocess;
using ::llamafleet::testing::TempDir;

constexpr char kJoinToken[] = "cli-test-token";

// Stands in for llamafleet-train. Steps and the pause between them come from the spec
// (training.max_steps, labels.fake_pause); every other step rank 0 saves a "checkpoint"
// (a directory with a manifest.json) under its task directory.
constexpr char kFakeTrainer[] = R"sh(#!/bin/sh
spec="$3"
steps=$(sed -n 's/.*"max_steps":"\([0-9]*\)".*/\1/p' "$spec")
pause=$(sed -n 's/.*"fake_pause":"\([0-9.]*\)".*/\1/p' "$spec")
steps=${steps:-4}
pause=${pause:-0.1}
# The job's checkpoint dir as the coordinator filled it in (its default under the first path
# root): it records only step-N directories inside it.
ckpt=$(sed -n 's/.*"checkpoint":{"dir":"\([^"]*\)".*/\1/p' "$spec")
echo "rank $RANK of $WORLD_SIZE starting" >&2
if [ -n "$(sed -n 's/.*"fake_fail":"\([^"]*\)".*/\1/p' "$spec")" ]; then
  echo "rank $RANK failing as asked" >&2
  exit 3
fi
if [ "$RANK" = 0 ]; then
  # A token cache build's progress, then the start-up phases (and one the worker's
  # coordinator must not take: a name that is not a phase).
  echo '{"type":"event","event":"tokenizing","path":"/d/train.jsonl","done_bytes":1500000,"total_bytes":3000000}'
  echo '{"type":"event","event":"tokenizing","path":"/d/train.jsonl","done_bytes":3000000,"total_bytes":3000000}'
  echo '{"type":"event","event":"started","total_steps":'$steps'}'
  echo '{"type":"event","event":"phase","phase":"data_ready","seconds":0.5,"since_start":0.5,"detail":"tokenized"}'
  echo '{"type":"event","event":"phase","phase":"rendezvous","seconds":0.01,"since_start":0.51,"detail":"2 ranks"}'
  echo '{"type":"event","event":"phase","phase":"made_up","seconds":1,"since_start":1,"detail":"x"}'
  echo '{"type":"event","event":"phase","phase":"weights_loaded","seconds":0.02,"since_start":0.53,"detail":"seeded init"}'
fi
i=1
while [ $i -le $steps ]; do
  sleep $pause
  # The text line beside the metrics record, as the trainer writes one (trainer_events.h).
  echo "rank $RANK step $i" >&2
  if [ "$RANK" = 0 ]; then
    echo '{"type":"metrics","step":'$i',"loss":'$((100 - i))'.5,"lr":0.0003,"tokens_per_s":1234.4,"mfu":0.25}'
    if [ $i = 1 ]; then echo '{"type":"event","event":"phase","phase":"first_step","seconds":0.1,"since_start":0.7}'; fi
    if [ $((i % 2)) = 0 ]; then
      d="$ckpt/step-$i"
      mkdir -p "$d" && echo '{}' > "$d/manifest.json"
      echo '{"type":"event","event":"checkpoint_saved","step":'$i',"path":"'$d'","bytes":2048,"manifest_sha256":"abc","loss":'$((100 - i))'.5}'
    fi
  fi
  i=$((i + 1))
done
# An evaluation at the end, as the trainer reports one on data.eval_path.
if [ "$RANK" = 0 ]; then echo '{"type":"eval","step":'$steps',"loss":1.25,"perplexity":3.49,"tokens":640}'; fi
# With label fake_samples: eval.samples' lines at step 2 and at the end (a text of two lines
# with an escape sequence), and DPO rewards on a last metrics record.
if [ "$RANK" = 0 ] && [ -n "$(sed -n 's/.*"fake_samples":"\([^"]*\)".*/\1/p' "$spec")" ]; then
  echo '{"type":"sample","step":2,"index":0,"prompt":"Q: 2+2?","text":"five","tokens":1,"stop_reason":"eos","reference":"4","scores":{"exact_match":0}}'
  echo '{"type":"sample","step":'$steps',"index":0,"prompt":"Q: 2+2?","text":"4","tokens":1,"stop_reason":"eos","reference":"4","scores":{"exact_match":1}}'
  printf '%s\n' '{"type":"sample","step":'$steps',"index":1,"prompt":"Say hi","text":"hi\nthere \u001b[31mred","tokens":3,"stop_reason":"length"}'
  echo '{"type":"metrics","step":'$steps',"loss":1.5,"lr":0.0003,"tokens_per_s":1234.4,"rewards_chosen":0.5,"rewards_rejected":-0.25,"rewards_accuracies":0.75,"rewards_margins":0.75}'
fi
# An export for a dependent job to read.
export_dir=$(sed -n 's/.*"export_dir":"\([^"]*\)".*/\1/p' "$spec")
if [ "$RANK" = 0 ] && [ -n "$export_dir" ]; then mkdir -p "$export_dir" && echo '{}' > "$export_dir/config.json"; fi
echo "rank $RANK done" >&2
)sh";

// A 2-node job of `steps` steps, `pause` seconds each; `extra` is appended as YAML.
inline std::string Spec(const std::string& name, int steps, const std::string& pause,
                 const std::string& extra = "") {
  return absl::StrCat("name: ", name, "\nlabels: {fake_pause: \"", pause,
                      "\"}\n"
                      "model: {preset: tiny, tokenizer: /data/tok.model}\n"
                      "data: {train_path: /data/train.jsonl}\n"
                      "training: {max_steps: ",
                      steps,
                      ", seq_len: 64}\n"
                      "run_policy: {max_restarts: 0}\n",
                      extra.empty() ? "resources: {nodes: 2, gpus_per_node: 1}\n" : extra);
}

class CliClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trainer_ = dir_.path() + "/fake-train.sh";
    std::ofstream(trainer_) << kFakeTrainer;
    ASSERT_EQ(chmod(trainer_.c_str(), 0755), 0);

    auto coordinator = ::llamafleet::testing::StartCoordinator(
        {.data_dir = dir_.path() + "/coordinator",
         .join_token = kJoinToken,
         // default checkpoint dirs under the first; specs name /data/...
         .path_roots = {dir_.path(), "/"},
         .flags = {"--cancel-grace", "2", "--log-level", "warn"},
         .log_path = dir_.path() + "/coordinator.log"});
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = std::move(coordinator->process);
    address_ = coordinator->address;

    for (const std::string name : {"w1", "w2"}) {
      auto worker = ::llamafleet::testing::StartWorker({.coordinator = address_,
                                                        .name = name,
                                                        .data_dir = dir_.path() + "/" + name,
                                                        .join_token = kJoinToken,
                                                        .trainer = trainer_,
                                                        .flags = {"--log-level", "warn"},
                                                        .log_path = dir_.path() + "/" + name + ".log"});
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(std::move(*worker));
    }
    // Both registered and ready before any test submits.
    ASSERT_TRUE(WaitForReadyWorkers(2)) << "workers did not register:\n" << ReadFile(dir_.path() + "/w1.log");
  }

  // Waits until `n` workers are READY.
  bool WaitForReadyWorkers(int n) const {
    return testing::WaitFor(
        [&] {
          int ready = 0;
          const v1::ListWorkersResponse listed = Workers();
          for (const v1::WorkerInfo& w : listed.workers()) ready += w.state() == v1::WORKER_READY;
          return ready == n;
        },
        absl::Seconds(20), absl::Milliseconds(100));
  }

  void TearDown() override {
    // Workers first (they stop their trainers), then the coordinator; each must exit.
    for (auto& worker : workers_) worker->Signal(SIGTERM);
    for (auto& worker : workers_) {
      auto code = worker->Wait(absl::Seconds(15));
      EXPECT_TRUE(code.ok()) << "worker did not stop";
    }
    workers_.clear();
    if (coordinator_ != nullptr) {
      coordinator_->Signal(SIGTERM);
      auto code = coordinator_->Wait(absl::Seconds(15));
      EXPECT_TRUE(code.ok() && *code == 0) << "coordinator did not shut down cleanly";
      coordinator_.reset();
    }
  }

  std::vector<std::string> Argv(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {BinaryPath("llamafleet"), "--coordinator", address_, "--user",
                                     "alice"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  CommandResult Cli(const std::vector<std::string>& args, const std::string& input = "") const {
    auto result = RunCommand(Argv(args), input, {}, absl::Seconds(60));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }

  std::string Ok(const std::vector<std::string>& args, const std::string& input = "") const {
    CommandResult r = Cli(args, input);
    EXPECT_EQ(r.exit_code, 0) << "args: " << absl::StrJoin(args, " ") << "\nstderr: " << r.err;
    EXPECT_EQ(r.err, "") << absl::StrJoin(args, " ");
    return r.out;
  }

  v1::ListWorkersResponse Workers() const {
    v1::ListWorkersResponse response;
    const std::string out = Ok({"workers", "-o", "json"});
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(out, &response).ok()) << out;
    return response;
  }

  v1::Job GetJob(const std::string& id) const {
    v1::Job job;
    const std::string out = Ok({"get", "job", id, "-o", "json"});
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(out, &job).ok()) << out;
    return job;
  }

  // Waits until `done(job)` holds.
  template <typename Predicate>
  v1::Job WaitForJob(const std::string& id, Predicate done,
                     absl::Duration timeout = absl::Seconds(30)) const {
    v1::Job job;
    testing::WaitFor([&] { return done(job = GetJob(id)); }, timeout, absl::Milliseconds(100));
    EXPECT_TRUE(done(job)) << "job " << id << " is " << v1::JobState_Name(job.state()) << ": "
                           << job.status_reason();
    return job;
  }

  // Starts the CLI with stdout and stderr going to files (read them with ReadFile).
  std::unique_ptr<Subprocess> StartCli(const std::vector<std::string>& args,
                                       const std::string& out_path,
                                       const std::string& err_path) const {
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" >\"$OUT\""};
    for (const std::string& a : Argv(args)) argv.push_back(a);
    auto started = Subprocess::Start(argv, {{"OUT", out_path}}, err_path);
    EXPECT_TRUE(started.ok()) << started.status();
    return started.ok() ? std::move(*started) : nullptr;
  }

  // Waits until the file at `path` contains `text`.
  bool WaitForText(const std::string& path, const std::string& text,
                   absl::Duration timeout = absl::Seconds(30)) const {
    if (testing::WaitFor([&] { return absl::StrContains(ReadFile(path), text); }, timeout,
                         absl::Milliseconds(50))) {
      return true;
    }
    ADD_FAILURE() << "no '" << text << "' in " << path << ":\n" << ReadFile(path);
    return false;
  }

  TempDir dir_;
  std::string trainer_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::string address_;
};

inline void ExpectOneErrorLine(const CommandResult& r, int exit_code, const std::string& substring) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "llamafleet: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, substring)) << "want '" << substring << "' in: " << r.err;
}

inline std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// A 1-node job of `steps` steps, `pause` seconds each; `extra` is appended as YAML.
inline std::string OneNode(const std::string& name, int steps, const std::string& pause, const std::string& extra = "") {
  return absl::StrCat(Spec(name, steps, pause, "resources: {nodes: 1, gpus_per_node: 1}\n"), extra);
}

}  // namespace
}  // namespace llamafleet

#endif  // LLAMAFLEET_TESTS_CLIENTS_CLI_CLUSTER_H_
