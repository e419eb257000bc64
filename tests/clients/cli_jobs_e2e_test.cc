// The real `llamafleet` binary against a real coordinator (cli_fixture.h): get, describe,
// cancel, delete and watch, across coordinator restarts too.
#include "tests/clients/cli_fixture.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using namespace testing_cli;  // NOLINT: the fixture's names
using ::testing::ElementsAre;

// ---------------------------------------------------------------------------
// get
// ---------------------------------------------------------------------------

TEST_F(CliTest, GetJobsFilters) {
  Ok({"submit", "-f", "-"}, Spec("a1", "queue: research\nlabels: {team: nlp}\n"), "alice");
  Ok({"submit", "-f", "-"}, Spec("a2", "labels: {team: vision}\n"), "alice");
  Ok({"submit", "-f", "-"}, Spec("b1", "queue: research\nlabels: {team: nlp}\n"), "bob");
  Ok({"cancel", "2"});

  EXPECT_THAT(Names(AllJobs({"--queue", "research"})), ElementsAre("b1", "a1"));
  EXPECT_THAT(Names(AllJobs({"--owner", "bob"})), ElementsAre("b1"));
  EXPECT_THAT(Names(AllJobs({"--label", "team=nlp", "--owner", "alice"})), ElementsAre("a1"));
  EXPECT_THAT(Names(AllJobs({"--state", "cancelled"})), ElementsAre("a2"));
  EXPECT_THAT(Names(AllJobs({"--state", "queued,cancelled"})), ElementsAre("b1", "a2", "a1"));
  EXPECT_THAT(Names(AllJobs({"--state", "QUEUED", "--state", "RUNNING"})), ElementsAre("b1", "a1"));
  ExpectOneErrorLine(Cli({"get", "jobs", "--state", "sleeping"}), 2, "--state: 'sleeping'");
}

TEST_F(CliTest, GetJobsTableAndPaging) {
  for (int i = 1; i <= 5; ++i) Ok({"submit", "-f", "-"}, Spec(absl::StrCat("job", i)));

  const std::string table = Ok({"get", "jobs"});
  std::vector<std::string> lines = absl::StrSplit(table, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 6u) << table;
  EXPECT_TRUE(absl::StartsWith(lines[0], "ID   NAME   OWNER   QUEUE     PRIORITY   STATE    AGE"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "REASON")) << lines[0];
  EXPECT_TRUE(absl::StartsWith(lines[1], "5    job5   alice   default   0          QUEUED"))
      << lines[1];
  EXPECT_TRUE(absl::StrContains(Ok({"get", "jobs", "-o", "wide"}), "SHARDING"));

  // --limit stops early and hands back the token; --page-token continues from it.
  v1::ListJobsResponse first;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  Ok({"get", "jobs", "--limit", "2", "-o", "json"}), &first)
                  .ok());
  EXPECT_THAT(Names({first.jobs().begin(), first.jobs().end()}), ElementsAre("job5", "job4"));
  ASSERT_FALSE(first.next_page_token().empty());
  v1::ListJobsResponse second;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(Ok({"get", "jobs", "--limit", "2", "--page-token",
                                                      first.next_page_token(), "-o", "json"}),
                                                  &second)
          .ok());
  EXPECT_THAT(Names({second.jobs().begin(), second.jobs().end()}), ElementsAre("job3", "job2"));

  // --all follows every token, here two jobs per request.
  EXPECT_THAT(Names(AllJobs({"--page-size", "2"})),
              ElementsAre("job5", "job4", "job3", "job2", "job1"));

  // A table cut short says so on stderr, so stdout stays just the table.
  CommandResult limited = Cli({"get", "jobs", "--limit", "3"});
  EXPECT_EQ(limited.exit_code, 0);
  EXPECT_EQ(std::count(limited.out.begin(), limited.out.end(), '\n'), 4) << limited.out;
  EXPECT_TRUE(absl::StrContains(limited.err, "--all")) << limited.err;
}

TEST_F(CliTest, GetJobYamlAndUnknownJob) {
  Ok({"submit", "-f", "-"}, Spec("y"));
  const std::string yaml = Ok({"get", "job", "1", "-o", "yaml"});
  EXPECT_TRUE(absl::StrContains(yaml, "state: QUEUED")) << yaml;
  EXPECT_TRUE(absl::StrContains(yaml, "owner: alice")) << yaml;
  ExpectOneErrorLine(Cli({"get", "job", "42"}), 1, "llamafleet: job 42 not found");
}

TEST_F(CliTest, DescribeShowsSpecAndEvents) {
  Ok({"submit", "-f", "-"}, Spec("described", "labels: {team: nlp}\n"));
  Ok({"cancel", "1", "--reason", "superseded"});
  const std::string out = Ok({"describe", "job", "1"});
  EXPECT_TRUE(absl::StrContains(out, "State:             CANCELLED")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Spec:\n  name: described\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "    team: nlp\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Events:\n  SEQ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "submitted")) << out;
  EXPECT_TRUE(absl::StrContains(out, "QUEUED   CANCELLED")) << out;
  EXPECT_TRUE(absl::StrContains(out, "superseded")) << out;

  const std::string json = Ok({"describe", "job", "1", "-o", "json"});
  EXPECT_TRUE(absl::StartsWith(json, "{\"job\":{\"id\":\"1\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"events\":[{\"job_id\":\"1\",\"seq\":\"1\"")) << json;
}

// ---------------------------------------------------------------------------
// cancel and watch
// ---------------------------------------------------------------------------

TEST_F(CliTest, CancelIsIdempotentAndUnknownJobFails) {
  Ok({"submit", "-f", "-"}, Spec("c"));
  EXPECT_EQ(Ok({"cancel", "1"}), "job 1 cancelled\n");
  // Already terminal: not an error, and the server's message says why nothing changed.
  const std::string again = Ok({"cancel", "1"});
  EXPECT_TRUE(absl::StrContains(again, "already CANCELLED")) << again;

  ExpectOneErrorLine(Cli({"cancel", "99"}), 1, "job 99 not found");
  ExpectOneErrorLine(Cli({"cancel", "not-a-number"}), 1, "job_id");
  EXPECT_EQ(AllJobs()[0].state(), v1::CANCELLED);
}

TEST_F(CliTest, DeleteJobTakesAFinishedJobAndItsDependentsNotice) {
  Ok({"submit", "-f", "-"}, Spec("parent"));
  Ok({"submit", "-f", "-"}, absl::StrCat(Spec("child"), "depends_on: [{job: \"1\", on: finished}]\n"));
  ExpectOneErrorLine(Cli({"delete", "job", "1"}), 1, "job 1 is QUEUED; cancel it first (llamafleet cancel 1)");
  Ok({"cancel", "1"});
  const std::string out = Ok({"delete", "job", "1"});
  EXPECT_TRUE(absl::StartsWith(out, "job 1 deleted\n  record, events, metrics, attempts and checkpoint list deleted\n"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "  logs removed\n")) << out;
  ExpectOneErrorLine(Cli({"get", "job", "1"}), 1, "job 1 not found");
  ExpectOneErrorLine(Cli({"delete", "job", "1"}), 1, "job 1 not found");
  // The dependent can no longer be satisfied: cancelled, never left waiting.
  v1::JobState state = v1::QUEUED;
  testing::WaitFor(
      [&] {
        for (const v1::Job& j : AllJobs()) state = j.id() == "2" ? j.state() : state;
        return state == v1::CANCELLED;
      },
      absl::Seconds(20), absl::Milliseconds(100));
  EXPECT_EQ(state, v1::CANCELLED);
}

// What stays is named with the reason: the checkpoint.dir the job named (its owner's), and
// the export without --artifacts; the default checkpoint dir it never used is not mentioned.
TEST_F(CliTest, DeleteJobSaysWhatItKeptAndWhy) {
  const std::string ck = dir_.path() + "/mine/ck", out = dir_.path() + "/mine/out";
  Ok({"submit", "-f", "-"},
     Spec("named", absl::StrCat("checkpoint: {dir: ", ck, "}\noutput: {export_dir: ", out, "}\n")));
  Ok({"cancel", "1"});
  const std::string said = Ok({"delete", "job", "1"});
  EXPECT_TRUE(absl::StrContains(said, "  checkpoint.dir " + ck +
                                          " kept: a directory the job named is its owner's to remove\n"))
      << said;
  EXPECT_TRUE(absl::StrContains(said, "  export dir " + out +
                                          " kept: delete with --artifacts to remove it too\n"))
      << said;
  EXPECT_FALSE(absl::StrContains(said, "was not there")) << said;
  EXPECT_FALSE(absl::StrContains(said, "checkpoint dir ")) << said;
}

TEST_F(CliTest, WatchEndsWhenTheJobIsCancelledElsewhere) {
  Ok({"submit", "-f", "-"}, Spec("watched"));
  auto watch = Subprocess::Start(Argv({"watch", "1"}), {}, dir_.path() + "/watch.err");
  ASSERT_TRUE(watch.ok()) << watch.status();
  // The first line is the current state; once it is out, the watch is live.
  auto first = (*watch)->ReadLineWithPrefix("job 1 ", absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(absl::StrContains(*first, "(watched) is QUEUED")) << *first;

  Ok({"cancel", "1", "--reason", "enough"});
  auto event = (*watch)->ReadLineWithPrefix("2 ", absl::Seconds(10));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(absl::StrContains(*event, "QUEUED -> CANCELLED cancelled by alice: enough"))
      << *event;
  // A job that did not succeed is not a watch that did: 4 for a cancelled one.
  auto code = (*watch)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 4);

  // Watching a finished job prints where it ended and returns at once.
  CommandResult done = Cli({"watch", "1", "--history"});
  EXPECT_TRUE(absl::StartsWith(done.out, "job 1 (watched) is CANCELLED")) << done.out;
  EXPECT_TRUE(absl::StrContains(done.out, "\n1 ")) << done.out;
  ExpectOneErrorLine(done, 4, "job 1 was CANCELLED");
  ExpectOneErrorLine(Cli({"watch", "7"}), 1, "job 7 not found");
}

TEST_F(CliTest, WatchResumesAcrossACoordinatorRestart) {
  Ok({"submit", "-f", "-"}, Spec("resumed"));
  const std::string watch_err = dir_.path() + "/watch.err";
  auto watch = Subprocess::Start(Argv({"watch", "1"}), {}, watch_err);
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE((*watch)->ReadLineWithPrefix("job 1 ", absl::Seconds(10)).ok());

  // Same port, same database: the job is still there, and so is the watch.
  const std::string address = address_;
  StopCoordinator();
  StartCoordinator(address);
  Ok({"cancel", "1"});
  auto event = (*watch)->ReadLineWithPrefix("2 ", absl::Seconds(20));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(absl::StrContains(*event, "QUEUED -> CANCELLED")) << *event;
  auto code = (*watch)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 4);  // cancelled
  std::ifstream err_file(watch_err);
  const std::string err((std::istreambuf_iterator<char>(err_file)),
                        std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(err, "resuming")) << err;
}

TEST_F(CliTest, ADependentIsCancelledEvenIfTheCoordinatorDiesRightAfterItsParentEnds) {
  // No workers: both jobs stay queued. The parent's cancel is durable before the reply;
  // the coordinator is killed at once, before or after it cancelled the dependent. Either
  // way the restarted one converges: the rule is re-read from the stored states.
  Ok({"submit", "-f", "-"}, absl::StrCat(Spec("parent"), "---\n", Spec("child", "depends_on: [{job: parent}]\n")));
  EXPECT_EQ(AllJobs()[0].state(), v1::QUEUED);
  Ok({"cancel", "1"});
  const std::string address = address_;
  coordinator_->Signal(SIGKILL);
  ASSERT_TRUE(coordinator_->Wait(absl::Seconds(10)).ok());
  coordinator_.reset();
  StartCoordinator(address);
  CommandResult waited = Cli({"wait", "2", "--timeout", "20s"});
  EXPECT_EQ(waited.out, "job 2 CANCELLED: dependency job 1 CANCELLED (depends_on: succeeded)\n");
  EXPECT_EQ(waited.exit_code, 4) << waited.err;

  // Refused at submission: a cycle, and a name that is not in the batch.
  ExpectOneErrorLine(Cli({"submit", "-f", "-"},
                         absl::StrCat(Spec("a", "depends_on: [{job: b}]\n"), "---\n", Spec("b", "depends_on: [{job: a}]\n"))),
                     1, "forms a cycle: a -> b -> a");
  ExpectOneErrorLine(Cli({"submit", "-f", "-"}, Spec("c", "depends_on: [{job: nope}]\n")), 1,
                     "depends_on[0].job names \"nope\"");
  EXPECT_EQ(AllJobs().size(), 2u);
}

TEST_F(CliTest, WatchWithTimeoutGivesUpOnAJobThatDoesNotFinish) {
  Ok({"submit", "-f", "-"}, Spec("slow"));
  CommandResult r = Cli({"watch", "1", "--timeout", "500ms"});
  EXPECT_TRUE(absl::StartsWith(r.out, "job 1 (slow) is QUEUED")) << r.out;
  ExpectOneErrorLine(r, 5, "job 1 is still QUEUED after --timeout 500ms");
}

}  // namespace
}  // namespace llamafleet
