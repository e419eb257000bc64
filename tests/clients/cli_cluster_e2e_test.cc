// The real `llamafleet` binary against a real cluster (tests/clients/cli_cluster.h).
// Covers the commands that need jobs to run: workers, logs, checkpoints, the watch
// progress line (on a pseudo-terminal and through a pipe), and pending explanations.
#include <regex>

#include "tests/clients/cli_cluster.h"

namespace llamafleet {
namespace {

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
  // The trainer's JSON records read as text (log_record.h); --raw keeps them as written.
  // Each step once: rank 0's text line says it, its metrics record is left out.
  EXPECT_TRUE(absl::StrContains(
      all, "[rank 0] » eval after step 4 · loss 1.2500 · perplexity 3.49 · 640 tokens\n"))
      << all;
  EXPECT_TRUE(absl::StrContains(all, "[rank 0] rank 0 step 4\n")) << all;
  EXPECT_FALSE(absl::StrContains(all, "[rank 0] » step ")) << "each step once:\n" << all;
  EXPECT_FALSE(absl::StrContains(all, "{\"type\":")) << all;
  EXPECT_TRUE(absl::StrContains(Ok({"logs", "1", "--raw"}), "[rank 0] {\"type\":\"metrics\",\"step\":4"));

  // One rank: no prefix, nothing of the other rank.
  EXPECT_EQ(Ok({"logs", "1", "--rank", "1"}),
            "rank 1 of 2 starting\nrank 1 step 1\nrank 1 step 2\nrank 1 step 3\nrank 1 step 4\n"
            "rank 1 done\n");
  EXPECT_EQ(Ok({"logs", "1", "--rank", "1", "--tail", "2"}), "rank 1 step 4\nrank 1 done\n");
  EXPECT_EQ(Ok({"logs", "1", "--rank", "1", "--attempt", "1", "--tail", "1"}), "rank 1 done\n");
  // --tail counts the lines shown: rank 0's last 5 lines hold its last metrics record,
  // which the text view leaves out.
  const std::string raw_tail = Ok({"logs", "1", "--rank", "0", "--raw", "--tail", "5"});
  EXPECT_EQ(Lines(raw_tail).size(), 5u) << raw_tail;
  EXPECT_TRUE(absl::StrContains(raw_tail, "{\"type\":\"metrics\",\"step\":4")) << raw_tail;
  const std::string tail = Ok({"logs", "1", "--rank", "0", "--tail", "5"});
  EXPECT_EQ(Lines(tail).size(), 5u) << tail;
  EXPECT_TRUE(absl::StrContains(tail, "rank 0 step 4\n")) << tail;
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
  EXPECT_TRUE(absl::StartsWith(rows[0], "STEP   ATTEMPT   LOSS      EVAL-LOSS   SIZE      TIME")) << rows[0];
  EXPECT_TRUE(absl::StartsWith(rows[1], "4      1         96.5000   -           2.0 KiB   ")) << rows[1];
  EXPECT_TRUE(absl::EndsWith(rows[1], "/llamafleet/checkpoints/1/step-4")) << rows[1];
  EXPECT_TRUE(absl::StartsWith(rows[2], "2      1         98.5000   -           2.0 KiB   ")) << rows[2];
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
  // CPU time (the workers are CPU workers): its 2 CPU ranks from placement to the end, in
  // seconds while small; no pricing configured, so no cost. `get usage` has the same job in
  // alice's totals.
  EXPECT_TRUE(std::regex_search(described, std::regex("\nCPU time: +[0-9.]+ CPU-s\n"))) << described;
  EXPECT_TRUE(absl::StrContains(described, "CPU-TIME")) << described;
  EXPECT_FALSE(absl::StrContains(described, "GPU-s")) << described;
  const std::vector<std::string> usage = Lines(Ok({"get", "usage"}));
  ASSERT_EQ(usage.size(), 3u);
  EXPECT_EQ(usage[0], "USER    QUEUE     JOBS   CPU-H   FAILED-CPU-H   COST");
  EXPECT_EQ(usage[1], "alice   default   1      <0.01   0.00           -");
  EXPECT_TRUE(absl::StartsWith(usage[2], "No prices configured")) << usage[2];
  EXPECT_TRUE(
      absl::StartsWith(Ok({"get", "usage", "--user", "bob"}), "No CPU time used by bob yet.\n"));
  const std::string json = Ok({"describe", "job", "1", "-o", "json"});
  EXPECT_TRUE(
      absl::StrContains(json, "\"checkpoints\":[{\"job_id\":\"1\",\"attempt\":1,\"step\":\"4\""))
      << json;
  EXPECT_TRUE(absl::EndsWith(json, "]}\n")) << json;
  const std::string yaml = Ok({"describe", "job", "1", "-o", "yaml"});
  EXPECT_TRUE(absl::StrContains(yaml, "\ncheckpoints:\n")) << yaml;
}

// eval.samples and DPO: describe shows the latest step's samples (one line each, escaped)
// and the rewards; `samples` the samples in full, by step.
TEST_F(CliClusterTest, DescribeShowsTheLatestSamplesAndDpoRewardsAndSamplesShowsEveryStep) {
  EXPECT_EQ(Ok({"submit", "-f", "-"},
               "name: sampled\nlabels: {fake_pause: \"0.05\", fake_samples: \"1\"}\n"
               "model: {preset: tiny, tokenizer: /data/tok.model}\ndata: {train_path: "
               "/data/train.jsonl}\n"
               "training: {max_steps: 4, seq_len: 64}\nrun_policy: {max_restarts: 0}\n"
               "resources: {nodes: 2, gpus_per_node: 1}\n"),
            "job 1 created\n");
  Ok({"wait", "1", "--timeout", "30s"});
  const std::string described = Ok({"describe", "job", "1"});
  EXPECT_TRUE(absl::StrContains(
      described, "  DPO rewards:     chosen 0.5, rejected -0.25, accuracy 75%, margin 0.75\n"))
      << described;
  EXPECT_TRUE(absl::StrContains(described,
                                "Samples at step 4:\n"
                                "  #0 eos, 1 token, exact_match 1\n"
                                "    prompt: Q: 2+2?\n"
                                "    text:   4\n"
                                "    ref:    4\n"
                                "  #1 length, 3 tokens\n"
                                "    prompt: Say hi\n"
                                "    text:   hi\\nthere \\x1b[31mred\n"))
      << described;
  EXPECT_FALSE(absl::StrContains(described, "five")) << "only the latest step";
  EXPECT_LT(described.find("Samples at step 4:"), described.find("Checkpoints:")) << described;

  const std::string all = Ok({"samples", "1"});
  EXPECT_TRUE(absl::StartsWith(
      all,
      "== step 2 (attempt 1) ==\n#0 eos, 1 token, exact_match 0\n--- prompt\nQ: 2+2?\n"
      "--- text\nfive\n--- reference\n4\n\n== step 4 (attempt 1) ==\n"))
      << all;
  EXPECT_TRUE(absl::StrContains(all, "--- text\nhi\nthere \\x1b[31mred\n")) << all;
  EXPECT_TRUE(absl::EndsWith(all, "\nsteps with samples: 2 4\n")) << all;
  const std::string one = Ok({"samples", "1", "--step", "2"});
  EXPECT_TRUE(absl::StrContains(one, "five") && !absl::StrContains(one, "== step 4")) << one;
  EXPECT_EQ(Ok({"samples", "1", "--step", "3"}), "no samples at that step\n");
  v1::ListSamplesResponse latest;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  Ok({"samples", "1", "--latest", "-o", "json"}), &latest)
                  .ok());
  EXPECT_EQ(latest.samples_size(), 2);
  EXPECT_EQ(latest.steps_size(), 2);
  ExpectOneErrorLine(Cli({"samples", "99"}), 1, "job 99 not found");
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
      out, "\r\x1b[Kjob 1 SUCCEEDED [####################] 10/10 loss 90.5000 eval 1.2500 1,234 tok/s\r\n"))
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

}  // namespace
}  // namespace llamafleet
