// Scripted batch submission against a real cluster (tests/clients/cli_cluster.h): a
// pipeline whose second job reads the first's export, dependents cancelled with their
// parent, wait's exit codes, and sweeps with a concurrency limit.
#include "tests/clients/cli_cluster.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

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

  const CommandResult missing = Cli({"wait", "99"});
  ExpectOneErrorLine(missing, 1, "job 99 not found");
  EXPECT_EQ(missing.err, "llamafleet: job 99 not found\n") << "the job is named once";
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
  ASSERT_TRUE(WaitForReadyWorkers(3)) << "w3 did not register";
  const std::string file = dir_.path() + "/sweep.yaml";
  std::ofstream(file) << OneNode("lr-rank", 12, "0.25",
                                 "peft: {method: lora}\n"
                                 "sweep:\n  parameters:\n    training.lr: [1.0e-4, 3.0e-4]\n    peft.r: [8, 16]\n"
                                 "  max_concurrent: 2\n");
  const std::string out = Ok({"submit", "-f", file});
  EXPECT_EQ(out, "job 1 created\njob 2 created\njob 3 created\njob 4 created\n");

  // Sampled every 50 ms (the pacing is the measurement) until all four end: never more than two hold workers, and while
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
