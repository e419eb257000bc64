// The real `llamafleet` binary against a real cluster: a coordinator and two CPU workers
// on loopback, whose "trainer" is a shell script printing what llamafleet-train prints
// (started/metrics/checkpoint_saved JSON on rank 0's stdout, plain log lines on stderr).
// Covers the commands that need jobs to run: workers, logs, checkpoints, the watch
// progress line (on a pseudo-terminal and through a pipe), and pending explanations.

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

namespace llamafleet {
namespace {

using ::google::protobuf::util::TimeUtil;
using ::llamafleet::testing::BinaryPath;
using ::llamafleet::testing::CommandResult;
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
# An export for a dependent job to read.
export_dir=$(sed -n 's/.*"export_dir":"\([^"]*\)".*/\1/p' "$spec")
if [ "$RANK" = 0 ] && [ -n "$export_dir" ]; then mkdir -p "$export_dir" && echo '{}' > "$export_dir/config.json"; fi
echo "rank $RANK done" >&2
)sh";

// A 2-node job of `steps` steps, `pause` seconds each; `extra` is appended as YAML.
std::string Spec(const std::string& name, int steps, const std::string& pause,
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

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (true) {
      v1::ListWorkersResponse listed = Workers();
      int ready = 0;
      for (const v1::WorkerInfo& w : listed.workers()) ready += w.state() == v1::WORKER_READY;
      if (ready == 2) break;
      ASSERT_LT(absl::Now(), deadline) << "workers did not register:\n"
                                       << ReadFile(dir_.path() + "/w1.log");
      absl::SleepFor(absl::Milliseconds(100));
    }
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
    const absl::Time deadline = absl::Now() + timeout;
    v1::Job job = GetJob(id);
    while (!done(job) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
      job = GetJob(id);
    }
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
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (absl::StrContains(ReadFile(path), text)) return true;
      absl::SleepFor(absl::Milliseconds(50));
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

void ExpectOneErrorLine(const CommandResult& r, int exit_code, const std::string& substring) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "llamafleet: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, substring)) << "want '" << substring << "' in: " << r.err;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// ---------------------------------------------------------------------------
// workers
// ---------------------------------------------------------------------------

TEST_F(CliClusterTest, WorkersTableAndMachineFormats) {
  const std::string table = Ok({"workers"});
  std::vector<std::string> lines = Lines(table);
  ASSERT_EQ(lines.size(), 3u) << table;
  EXPECT_TRUE(absl::StartsWith(lines[0],
                               "NAME   STATE   SLOTS   GPU-MODEL   EFA   INSTANCE   "
                               "LAST-HEARTBEAT   TASKS"))
      << table;
  EXPECT_TRUE(absl::StartsWith(lines[1], "w1     READY   0/1     cpu         0     -          "))
      << table;
  EXPECT_TRUE(absl::StrContains(lines[1], "s ago")) << table;
  EXPECT_TRUE(absl::StartsWith(lines[2], "w2     READY   0/1     cpu")) << table;

  v1::ListWorkersResponse listed = Workers();
  ASSERT_EQ(listed.workers_size(), 2);
  for (const v1::WorkerInfo& w : listed.workers()) {
    EXPECT_EQ(w.inventory().cpu_ranks(), 1);
    EXPECT_EQ(w.inventory().address(), "127.0.0.1");
  }
  EXPECT_TRUE(absl::StrContains(Ok({"workers", "-o", "yaml"}), "name: w2"));
  const std::string wide = Ok({"workers", "-o", "wide"});
  EXPECT_TRUE(absl::StrContains(wide, "ADDRESS")) << wide;
  EXPECT_TRUE(absl::StrContains(wide, "127.0.0.1")) << wide;
}

// ---------------------------------------------------------------------------
// A job that runs: watch (piped), logs, checkpoints, describe, workers while running
// ---------------------------------------------------------------------------

TEST_F(CliClusterTest, FinishedJobLogsCheckpointsAndDescribe) {
  EXPECT_EQ(Ok({"submit", "-f", "-"}, Spec("small", 4, "0.2")), "job 1 created\n");

  // Piped watch: plain event lines and a "step ..." line per new step, exit 0 at the end.
  // --history: the job may be over before the watch starts; its events are still shown.
  const std::string watched = Ok({"watch", "1", "--history", "--interval", "100ms"});
  EXPECT_TRUE(absl::StartsWith(watched, "job 1 (small) is ")) << watched;
  EXPECT_TRUE(absl::StrContains(watched, "step 4/4 loss 96.5000 lr 0.0003 1,234 tok/s mfu 25.0%"))
      << watched;
  EXPECT_TRUE(absl::StrContains(watched, "RUNNING -> SUCCEEDED")) << watched;
  EXPECT_LT(watched.find("step 4/4"), watched.find("-> SUCCEEDED"))
      << "final metrics come before the final event:\n"
      << watched;
  EXPECT_EQ(watched.find('\r'), std::string::npos) << "no redraws through a pipe";
  // Tokenizing progress and the start-up phases are events as they happen.
  EXPECT_TRUE(absl::StrContains(watched, "attempt 1: tokenizing train.jsonl 50% (1.5 of 3.0 MB)")) << watched;
  EXPECT_TRUE(absl::StrContains(watched, "attempt 1: tokenizing train.jsonl 100% (3.0 of 3.0 MB)")) << watched;
  EXPECT_TRUE(absl::StrContains(watched, "attempt 1 start-up: weights_loaded in 0.02 s")) << watched;
  EXPECT_FALSE(absl::StrContains(watched, "made_up")) << "only known phase names are taken:\n" << watched;

  // attempts: when the first step came, and where the start went, phase by phase.
  const std::string attempts = Ok({"attempts", "1"});
  std::vector<std::string> attempt_rows = Lines(attempts);
  ASSERT_GE(attempt_rows.size(), 10u) << attempts;
  EXPECT_TRUE(absl::StrContains(attempt_rows[0], "ENDED                  STARTUP   CLASS")) << attempts;
  EXPECT_TRUE(absl::StrContains(attempts, "Start-up of attempt 1 (AT: since placed; TOOK: the phase itself):\n"
                                          "  PHASE              AT        TOOK     DETAIL\n  placed")) << attempts;
  for (const char* phase : {"trainers_started ", "data_ready ", "rendezvous ", "weights_loaded ", "first_step "}) {
    EXPECT_TRUE(absl::StrContains(attempts, absl::StrCat("\n  ", phase))) << phase << "\n" << attempts;
  }
  EXPECT_TRUE(absl::StrContains(attempts, "0.50 s   tokenized\n")) << attempts;
  EXPECT_TRUE(absl::StrContains(attempts, "0.02 s   seeded init\n")) << attempts;
  EXPECT_FALSE(absl::StrContains(attempts, "made_up")) << attempts;
  v1::ListAttemptsResponse listed_attempts;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Ok({"attempts", "1", "-o", "json"}), &listed_attempts).ok());
  ASSERT_EQ(listed_attempts.attempts_size(), 1);
  ASSERT_EQ(listed_attempts.attempts(0).phases_size(), 6) << listed_attempts.DebugString();
  EXPECT_EQ(listed_attempts.attempts(0).phases(0).name(), "placed");

  // All ranks: every line says whose it is.
  const std::string all = Ok({"logs", "1"});
  for (const std::string& line : Lines(all)) {
    EXPECT_TRUE(absl::StartsWith(line, "[rank 0] ") || absl::StartsWith(line, "[rank 1] ")) << line;
  }
  EXPECT_TRUE(absl::StrContains(all, "[rank 0] rank 0 of 2 starting\n")) << all;
  EXPECT_TRUE(absl::StrContains(all, "[rank 1] rank 1 step 4\n")) << all;
  EXPECT_TRUE(absl::StrContains(all, "[rank 0] {\"type\":\"metrics\",\"step\":4")) << all;

  // One rank: no prefix, nothing of the other rank.
  EXPECT_EQ(Ok({"logs", "1", "--rank", "1"}),
            "rank 1 of 2 starting\nrank 1 step 1\nrank 1 step 2\nrank 1 step 3\nrank 1 step 4\n"
            "rank 1 done\n");
  EXPECT_EQ(Ok({"logs", "1", "--rank", "1", "--tail", "2"}), "rank 1 step 4\nrank 1 done\n");
  EXPECT_EQ(Ok({"logs", "1", "--rank", "1", "--attempt", "1", "--tail", "1"}), "rank 1 done\n");
  // -o json: one LogChunk per line.
  for (const std::string& line : Lines(Ok({"logs", "1", "-o", "json"}))) {
    v1::LogChunk chunk;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &chunk).ok()) << line;
    EXPECT_EQ(chunk.attempt(), 1);
  }
  ExpectOneErrorLine(Cli({"logs", "1", "--rank", "2"}), 1, "job 1 has ranks 0..1");
  ExpectOneErrorLine(Cli({"logs", "1", "--attempt", "2"}), 1, "job 1 has no attempt 2");
  ExpectOneErrorLine(Cli({"logs", "1", "--tail", "-1"}), 2, "--tail must be >= 0");
  ExpectOneErrorLine(Cli({"logs", "99"}), 1, "job 99 not found");

  // Checkpoints: newest first.
  const std::string checkpoints = Ok({"checkpoints", "1"});
  std::vector<std::string> rows = Lines(checkpoints);
  ASSERT_EQ(rows.size(), 3u) << checkpoints;
  EXPECT_TRUE(absl::StartsWith(rows[0], "STEP   ATTEMPT   LOSS      SIZE      TIME")) << rows[0];
  EXPECT_TRUE(absl::StartsWith(rows[1], "4      1         96.5000   2.0 KiB   ")) << rows[1];
  EXPECT_TRUE(absl::EndsWith(rows[1], "/llamafleet/checkpoints/1/step-4")) << rows[1];
  EXPECT_TRUE(absl::StartsWith(rows[2], "2      1         98.5000   2.0 KiB   ")) << rows[2];
  v1::ListCheckpointsResponse listed;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(Ok({"checkpoints", "1", "-o", "json"}), &listed)
          .ok());
  ASSERT_EQ(listed.checkpoints_size(), 2);
  EXPECT_EQ(listed.checkpoints(0).manifest_sha256(), "abc");
  ExpectOneErrorLine(Cli({"checkpoints", "99"}), 1, "job 99 not found");

  // describe: workers, restarts, latest metrics, checkpoints, then spec and events.
  const std::string described = Ok({"describe", "job", "1"});
  EXPECT_TRUE(absl::StrContains(described, "State:             SUCCEEDED\n")) << described;
  EXPECT_TRUE(absl::StrContains(described, "Restarts:          0 of 0\n")) << described;
  EXPECT_TRUE(absl::StrContains(described, "Workers:           w1, w2\n") ||
              absl::StrContains(described, "Workers:           w2, w1\n"))
      << described;
  EXPECT_TRUE(absl::StrContains(described, "Latest metrics:\n  Step:            4/4\n"))
      << described;
  EXPECT_TRUE(absl::StrContains(described, "  Tokens/s:        1,234\n")) << described;
  EXPECT_TRUE(absl::StrContains(described, "Checkpoints:\n  STEP   ATTEMPT")) << described;
  EXPECT_FALSE(absl::StrContains(described, "Pending:")) << described;
  EXPECT_LT(described.find("Checkpoints:"), described.find("Spec:")) << described;
  EXPECT_TRUE(absl::StrContains(described, "  Start-up of attempt 1 (AT: since placed")) << described;
  // Of the run of tokenizing events, describe shows the last.
  EXPECT_TRUE(absl::StrContains(described, "tokenizing train.jsonl 100%")) << described;
  EXPECT_FALSE(absl::StrContains(described, "tokenizing train.jsonl 50%")) << described;
  const std::string json = Ok({"describe", "job", "1", "-o", "json"});
  EXPECT_TRUE(
      absl::StrContains(json, "\"checkpoints\":[{\"job_id\":\"1\",\"attempt\":1,\"step\":\"4\""))
      << json;
  EXPECT_TRUE(absl::EndsWith(json, "]}\n")) << json;
  const std::string yaml = Ok({"describe", "job", "1", "-o", "yaml"});
  EXPECT_TRUE(absl::StrContains(yaml, "\ncheckpoints:\n")) << yaml;
}

// ---------------------------------------------------------------------------
// logs -f
// ---------------------------------------------------------------------------

TEST_F(CliClusterTest, LogsFollowEndsWhenTheJobEnds) {
  Ok({"submit", "-f", "-"}, Spec("followed", 6, "0.2"));
  // Started while the job may still be queued: it waits for the attempt's logs.
  const std::string out = dir_.path() + "/logs.out";
  const std::string err = dir_.path() + "/logs.err";
  std::unique_ptr<Subprocess> logs = StartCli({"logs", "1", "-f", "--rank", "0"}, out, err);
  ASSERT_NE(logs, nullptr);
  ASSERT_TRUE(WaitForText(out, "rank 0 step 1\n"));
  auto code = logs->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << ReadFile(err);
  EXPECT_EQ(ReadFile(err), "");
  const std::string text = ReadFile(out);
  // stdout and stderr are relayed separately: only the order within each is kept.
  EXPECT_TRUE(absl::StrContains(text, "rank 0 of 2 starting\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "rank 0 step 6\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "rank 0 done\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "rank 1")) << text;
  EXPECT_EQ(GetJob("1").state(), v1::SUCCEEDED);
}

TEST_F(CliClusterTest, CtrlCEndsLogsFollowAndWatchCleanly) {
  Ok({"submit", "-f", "-"}, Spec("long", 100, "0.5"));
  const std::string logs_out = dir_.path() + "/logs.out";
  const std::string logs_err = dir_.path() + "/logs.err";
  const std::string watch_out = dir_.path() + "/watch.out";
  const std::string watch_err = dir_.path() + "/watch.err";
  std::unique_ptr<Subprocess> logs = StartCli({"logs", "1", "-f"}, logs_out, logs_err);
  std::unique_ptr<Subprocess> watch =
      StartCli({"watch", "1", "--interval", "100ms"}, watch_out, watch_err);
  ASSERT_NE(logs, nullptr);
  ASSERT_NE(watch, nullptr);
  ASSERT_TRUE(WaitForText(logs_out, "[rank 1] rank 1 step 1\n"));
  ASSERT_TRUE(WaitForText(watch_out, "/100 loss "));

  // While it runs, both workers show their slot in use and the job's task.
  const std::string table = Ok({"workers"});
  for (const std::string& line : Lines(table)) {
    if (absl::StartsWith(line, "NAME")) continue;
    EXPECT_TRUE(absl::StrContains(line, "READY   1/1     cpu")) << table;
    EXPECT_TRUE(absl::EndsWith(line, "1-1-0") || absl::EndsWith(line, "1-1-1")) << table;
  }

  for (Subprocess* p : {logs.get(), watch.get()}) {
    p->Signal(SIGINT);
    auto code = p->Wait(absl::Seconds(10));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 128 + SIGINT);
  }
  EXPECT_EQ(ReadFile(logs_err), "");
  EXPECT_EQ(ReadFile(watch_err), "");
  EXPECT_TRUE(absl::EndsWith(ReadFile(logs_out), "\n")) << "whole lines only";
  EXPECT_TRUE(absl::EndsWith(ReadFile(watch_out), "\n"));
  // Only the CLI stopped: the job keeps running.
  EXPECT_EQ(GetJob("1").state(), v1::RUNNING);
  Ok({"cancel", "1"});
}

// ---------------------------------------------------------------------------
// Pending explanations
// ---------------------------------------------------------------------------

TEST_F(CliClusterTest, QueuedJobExplainsWhyItWaits) {
  Ok({"submit", "-f", "-"}, Spec("too-big", 4, "0.1", "resources: {nodes: 3, gpus_per_node: 1}\n"));
  const v1::Job job = WaitForJob("1", [](const v1::Job& j) { return !j.pending().code().empty(); });
  ASSERT_EQ(job.state(), v1::QUEUED);
  const v1::PendingInfo& pending = job.pending();
  EXPECT_FALSE(pending.message().empty());
  EXPECT_EQ(pending.queue_position(), 1);

  const std::string table = Ok({"get", "jobs"});
  EXPECT_TRUE(absl::StrContains(table, pending.message().substr(0, 40))) << table;
  const std::string wide = Ok({"get", "jobs", "-o", "wide"});
  EXPECT_TRUE(absl::StrContains(wide, pending.message())) << wide;

  const std::string described = Ok({"describe", "job", "1"});
  EXPECT_TRUE(absl::StrContains(
      described, absl::StrCat("Pending:\n  Code:              ", pending.code(),
                              "\n  Message:           ", pending.message(),
                              "\n  Queue position:    1 in queue default\n  Estimated start:   ")))
      << described;

  // The watch's first line says why, too.
  CommandResult watched = Cli({"watch", "1", "--timeout", "1s"});
  EXPECT_TRUE(
      absl::StartsWith(watched.out, absl::StrCat("job 1 (too-big) is QUEUED: ", pending.message())))
      << watched.out;
  ExpectOneErrorLine(watched, 5, "job 1 is still QUEUED");

  // No logs yet: an empty stdout and a note on stderr.
  CommandResult logs = Cli({"logs", "1"});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_EQ(logs.out, "");
  EXPECT_TRUE(absl::StrContains(logs.err, "job 1 has not started yet (QUEUED)")) << logs.err;
  EXPECT_EQ(Ok({"checkpoints", "1"}), "No checkpoints recorded for job 1.\n");
}

// ---------------------------------------------------------------------------
// watch on a terminal
// ---------------------------------------------------------------------------

// Runs `argv` on a pseudo-terminal of `columns` columns; returns everything it wrote
// and its exit code.
struct TerminalRun {
  std::string output;
  int exit_code = -1;
};

TerminalRun RunOnTerminal(const std::vector<std::string>& argv, int columns,
                          absl::Duration timeout) {
  TerminalRun run;
  winsize size = {};
  size.ws_row = 24;
  size.ws_col = static_cast<unsigned short>(columns);
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, &size);
  if (pid < 0) {
    ADD_FAILURE() << "forkpty failed";
    return run;
  }
  if (pid == 0) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    pollfd pfd{master, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(master, chunk, sizeof(chunk));
    if (n <= 0) break;  // EIO once the child has exited and closed the terminal
    run.output.append(chunk, n);
  }
  if (absl::Now() >= deadline) {
    ADD_FAILURE() << "still running after " << timeout << ":\n" << run.output;
    kill(pid, SIGKILL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(master);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

TEST_F(CliClusterTest, WatchDrawsALiveProgressLineOnATerminal) {
  Ok({"submit", "-f", "-"}, Spec("tty", 10, "0.3"));
  const TerminalRun run =
      RunOnTerminal(Argv({"watch", "1", "--interval", "100ms"}), 100, absl::Seconds(60));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const std::string& out = run.output;
  // The header line, then the live line redrawn in place ('\r', erase to end of line).
  EXPECT_TRUE(absl::StartsWith(out, "job 1 (tty) is ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "\r\x1b[Kjob 1 RUNNING [")) << out;
  EXPECT_TRUE(absl::StrContains(out, "/10 loss ")) << out;
  EXPECT_TRUE(absl::StrContains(out, " 1,234 tok/s ETA ")) << out;
  // Events are printed above the live line, which ends in its final state.
  EXPECT_TRUE(absl::StrContains(out, "RUNNING -> SUCCEEDED")) << out;
  EXPECT_TRUE(absl::StrContains(
      out, "\r\x1b[Kjob 1 SUCCEEDED [####################] 10/10 loss 90.5000 1,234 tok/s\r\n"))
      << out;
  EXPECT_TRUE(absl::EndsWith(out, "\n")) << out;
  // The live line is never wider than the terminal: a wrapped line could not be redrawn.
  // (Event lines above it may wrap: they are printed once, like any terminal output.)
  for (absl::string_view piece : absl::StrSplit(out, absl::ByAnyChar("\r\n"))) {
    if (!absl::StartsWith(piece, "\x1b[Kjob 1 ")) continue;
    EXPECT_LE(piece.size(), 100u + 3) << piece;  // + the erase sequence
  }
}

// ---------------------------------------------------------------------------
// Pipelines: depends_on, wait and submit --wait
// ---------------------------------------------------------------------------

// One node of `steps` steps; `extra` YAML is appended (after the defaults it overrides).
std::string OneNode(const std::string& name, int steps, const std::string& pause, const std::string& extra = "") {
  return absl::StrCat(Spec(name, steps, pause, "resources: {nodes: 1, gpus_per_node: 1}\n"), extra);
}

TEST_F(CliClusterTest, PipelineRunsInOrderReadingItsParentsExport) {
  const std::string export_dir = dir_.path() + "/finetune-export";
  const std::string file = dir_.path() + "/pipeline.yaml";
  std::ofstream(file) << OneNode("finetune", 20, "0.3", absl::StrCat("output: {export_dir: ", export_dir, "}\n"))
                      << "---\n"
                      << "name: evaluate\nlabels: {fake_pause: \"0.1\"}\n"
                         "model: {path: \"{{ jobs.finetune.export_dir }}\", tokenizer: /data/tok.model}\n"
                         "data: {train_path: /data/train.jsonl}\ntraining: {max_steps: 2, seq_len: 64}\n"
                         "run_policy: {max_restarts: 0}\nresources: {nodes: 1, gpus_per_node: 1}\n"
                         "depends_on: [{job: finetune}]\n";
  const std::string waited_out = dir_.path() + "/wait.out", waited_err = dir_.path() + "/wait.err";
  std::unique_ptr<Subprocess> waiting = StartCli({"submit", "-f", file, "--wait"}, waited_out, waited_err);
  ASSERT_NE(waiting, nullptr);
  ASSERT_TRUE(WaitForText(waited_out, "job 2 created"));

  // While the parent runs, the dependent waits and says for what (the explanation is the
  // last pass's: at most a pass behind); a free worker stays free.
  std::string seen;
  v1::Job evaluate = WaitForJob("2", [&seen](const v1::Job& j) {
    absl::StrAppend(&seen, v1::JobState_Name(j.state()), " ", j.pending().message(), "; ");
    return j.state() != v1::QUEUED || j.pending().message() == "waiting for job 1 (RUNNING)";
  });
  SCOPED_TRACE(seen);
  EXPECT_EQ(evaluate.state(), v1::QUEUED);
  EXPECT_EQ(evaluate.pending().code(), "DEPENDENCY") << evaluate.ShortDebugString();
  EXPECT_EQ(GetJob("1").state(), v1::RUNNING);
  // Stored with the parent's id and the template filled in.
  ASSERT_EQ(evaluate.spec().depends_on_size(), 1);
  EXPECT_EQ(evaluate.spec().depends_on(0).job(), "1");
  EXPECT_EQ(evaluate.spec().depends_on(0).on(), "succeeded");
  EXPECT_EQ(evaluate.spec().model().path(), export_dir);

  auto code = waiting->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << ReadFile(waited_err);
  const std::vector<std::string> lines = Lines(ReadFile(waited_out));
  ASSERT_EQ(lines.size(), 4u) << ReadFile(waited_out);
  EXPECT_TRUE(absl::StartsWith(lines[2], "job 1 SUCCEEDED")) << lines[2];
  EXPECT_TRUE(absl::StartsWith(lines[3], "job 2 SUCCEEDED")) << lines[3];
  EXPECT_TRUE(absl::StrContains(ReadFile(export_dir + "/config.json"), "{}"));

  // Resubmitting the same file creates nothing, and waits on the same (finished) jobs.
  CommandResult again = Cli({"submit", "-f", file, "--wait"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(absl::StrContains(again.out, "job 2 already exists")) << again.out;
  EXPECT_TRUE(absl::StrContains(again.out, "job 2 SUCCEEDED")) << again.out;
}

TEST_F(CliClusterTest, CancellingAParentCancelsItsDependentsAtOnce) {
  Ok({"submit", "-f", "-"},
     absl::StrCat(OneNode("long", 200, "0.2"), "---\n",
                  OneNode("after", 2, "0.1", "depends_on: [{job: long}]\n"), "---\n",
                  OneNode("anyway", 2, "0.1", "depends_on: [{job: long, on: finished}]\n")));
  WaitForJob("2", [](const v1::Job& j) { return j.pending().message() == "waiting for job 1 (RUNNING)"; });
  const absl::Time cancelled = absl::Now();
  Ok({"cancel", "1", "--reason", "wrong data"});
  v1::Job after = WaitForJob("2", [](const v1::Job& j) { return j.state() == v1::CANCELLED; }, absl::Seconds(10));
  EXPECT_LT(absl::Now() - cancelled, absl::Seconds(3)) << "not at once";
  EXPECT_EQ(after.status_reason(), "dependency job 1 CANCELLED (depends_on: succeeded)");
  // "finished" holds however the parent ended.
  WaitForJob("3", [](const v1::Job& j) { return j.state() == v1::SUCCEEDED; });

  // wait's exit codes: 4 for a cancelled job (3 for a failed one, below), 0 under
  // --for finished, and the worst of several decides.
  CommandResult r = Cli({"wait", "2"});
  EXPECT_EQ(r.out, "job 2 CANCELLED: dependency job 1 CANCELLED (depends_on: succeeded)\n");
  ExpectOneErrorLine(r, 4, "job 2 was cancelled");
  EXPECT_EQ(Cli({"wait", "2", "--for", "finished"}).exit_code, 0);
  EXPECT_EQ(Cli({"wait", "3", "2", "3"}).exit_code, 4);
  EXPECT_TRUE(absl::StartsWith(Ok({"wait", "3"}), "job 3 SUCCEEDED"));
}

TEST_F(CliClusterTest, WaitExitCodesSayHowJobsEnded) {
  Ok({"submit", "-f", "-"}, absl::StrReplaceAll(OneNode("broken", 2, "0.1"), {{"labels: {", "labels: {fake_fail: yes, "}}));
  CommandResult failed = Cli({"wait", "1"});
  EXPECT_TRUE(absl::StartsWith(failed.out, "job 1 FAILED")) << failed.out;
  ExpectOneErrorLine(failed, 3, "job 1 failed");
  // watch says the same.
  CommandResult watched = Cli({"watch", "1"});
  ExpectOneErrorLine(watched, 3, "job 1 FAILED");

  Ok({"submit", "-f", "-"}, OneNode("slow", 200, "0.2"));
  CommandResult slow = Cli({"wait", "2", "1", "--timeout", "1s"});
  EXPECT_EQ(slow.exit_code, 3) << slow.err;  // a failure outranks a timeout
  CommandResult timed_out = Cli({"wait", "2", "--timeout", "1s"});
  EXPECT_EQ(timed_out.out, "");
  ExpectOneErrorLine(timed_out, 5, "job 2 (");
  EXPECT_TRUE(absl::StrContains(timed_out.err, "still not finished after --timeout 1s")) << timed_out.err;
  Ok({"cancel", "2"});

  ExpectOneErrorLine(Cli({"wait", "99"}), 1, "job 99 not found");
  ExpectOneErrorLine(Cli({"wait", "x1"}), 2, "'x1' is not a job id");
}

TEST_F(CliClusterTest, ASweepRunsEveryPointNeverMoreThanItsLimitAtOnce) {
  // A third free worker: without the throttle three points would run at once.
  auto third = ::llamafleet::testing::StartWorker({.coordinator = address_,
                                                   .name = "w3",
                                                   .data_dir = dir_.path() + "/w3",
                                                   .join_token = kJoinToken,
                                                   .trainer = trainer_,
                                                   .flags = {"--log-level", "warn"},
                                                   .log_path = dir_.path() + "/w3.log"});
  ASSERT_TRUE(third.ok()) << third.status();
  workers_.push_back(std::move(*third));
  for (const absl::Time deadline = absl::Now() + absl::Seconds(20);;) {
    int ready = 0;
    const v1::ListWorkersResponse listed = Workers();
    for (const v1::WorkerInfo& w : listed.workers()) ready += w.state() == v1::WORKER_READY;
    if (ready == 3) break;
    ASSERT_LT(absl::Now(), deadline) << "w3 did not register";
    absl::SleepFor(absl::Milliseconds(100));
  }
  const std::string file = dir_.path() + "/sweep.yaml";
  std::ofstream(file) << OneNode("lr-rank", 12, "0.25",
                                 "peft: {method: lora}\n"
                                 "sweep:\n  parameters:\n    training.lr: [1.0e-4, 3.0e-4]\n    peft.r: [8, 16]\n"
                                 "  max_concurrent: 2\n");
  const std::string out = Ok({"submit", "-f", file});
  EXPECT_EQ(out, "job 1 created\njob 2 created\njob 3 created\njob 4 created\n");

  // Sampled every 50 ms until all four end: never more than two hold workers, and while
  // two do the others say why they wait.
  int most = 0;
  std::set<std::string> reasons;
  v1::ListJobsResponse listed;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(60);;) {
    listed.Clear();
    const std::string json = Ok({"get", "jobs", "--sweep", "lr-rank", "-o", "json"});
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &listed).ok()) << json;
    ASSERT_EQ(listed.jobs_size(), 4) << json;
    int holding = 0, ended = 0;
    for (const v1::Job& j : listed.jobs()) {
      holding += j.state() == v1::SCHEDULED || j.state() == v1::RUNNING;
      ended += j.state() == v1::SUCCEEDED;
      if (j.pending().code() == "SWEEP") reasons.insert(j.pending().message());
    }
    most = std::max(most, holding);
    if (ended == 4) break;
    ASSERT_LT(absl::Now(), deadline) << json;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(most, 2);
  EXPECT_EQ(reasons.count("sweep lr-rank: 2 of 2 running"), 1u) << absl::StrJoin(reasons, "; ");
  // The attempts' recorded times say the same without sampling: at most two overlap.
  std::vector<std::pair<absl::Time, int>> edges;
  for (const v1::Job& j : listed.jobs()) {
    v1::ListAttemptsResponse attempts;
    const std::string json = Ok({"attempts", j.id(), "-o", "json"});
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &attempts).ok()) << json;
    ASSERT_EQ(attempts.attempts_size(), 1) << json;
    edges.emplace_back(absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(attempts.attempts(0).start_time())), 1);
    edges.emplace_back(absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(attempts.attempts(0).end_time())), -1);
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same instant
  int open = 0, most_open = 0;
  for (const auto& [at, delta] : edges) most_open = std::max(most_open, open += delta);
  EXPECT_EQ(most_open, 2);
  // Each point is named, labelled and set as its index says (name order, the last fastest).
  std::map<std::string, v1::Job> by_name;
  for (const v1::Job& j : listed.jobs()) by_name[j.spec().name()] = j;
  ASSERT_EQ(by_name.count("lr-rank-3"), 1u);
  EXPECT_EQ(by_name["lr-rank-3"].spec().peft().r(), 16);
  EXPECT_DOUBLE_EQ(by_name["lr-rank-3"].spec().training().lr(), 3e-4);
  EXPECT_EQ(by_name["lr-rank-1"].spec().labels().at("training.lr"), "3.0e-4");
  EXPECT_EQ(by_name["lr-rank-1"].spec().labels().at("sweep"), "lr-rank");
  // Each point's evaluation, as the sweep view shows it.
  EXPECT_DOUBLE_EQ(by_name["lr-rank-2"].latest_metrics().best_eval_loss(), 1.25)
      << by_name["lr-rank-2"].latest_metrics().ShortDebugString();

  // Resubmitting the file creates nothing; cancel --sweep has nothing left to cancel.
  const std::string again = Ok({"submit", "-f", file});
  EXPECT_EQ(std::count(again.begin(), again.end(), '\n'), 4) << again;
  EXPECT_TRUE(absl::StrContains(again, "job 4 already exists")) << again;
  EXPECT_FALSE(absl::StrContains(again, "created")) << again;
  EXPECT_EQ(Ok({"cancel", "--sweep", "lr-rank"}), "sweep lr-rank: no unfinished jobs of alice\n");
}

TEST_F(CliClusterTest, CancelSweepCancelsItsUnfinishedJobs) {
  Ok({"submit", "-f", "-"}, OneNode("long", 200, "0.2",
                                    "sweep:\n  parameters:\n    training.seed: [1, 2, 3]\n  max_concurrent: 1\n"));
  WaitForJob("1", [](const v1::Job& j) { return j.state() == v1::RUNNING; });
  const std::string out = Ok({"cancel", "--sweep", "long", "--reason", "bad idea"});
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
  for (const std::string id : {"1", "2", "3"}) {
    v1::Job j = WaitForJob(id, [](const v1::Job& j) { return j.state() == v1::CANCELLED; });
    EXPECT_EQ(j.status_reason(), "cancelled by alice: bad idea");
  }
  ExpectOneErrorLine(Cli({"cancel"}), 2, "give a job ID or --sweep NAME");
  // A point's field that is wrong is named with its index before anything is stored.
  CommandResult bad = Cli({"submit", "-f", "-"},
                          OneNode("bad", 2, "0.1", "sweep:\n  parameters:\n    training.lr: [1.0e-4, -1]\n"));
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_TRUE(absl::StrContains(bad.err, "sweep.points[1].training.lr")) << bad.err;
  EXPECT_EQ(Ok({"get", "jobs", "--sweep", "bad"}).find("bad-0"), std::string::npos);
}

}  // namespace
}  // namespace llamafleet
