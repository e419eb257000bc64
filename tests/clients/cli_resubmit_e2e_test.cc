// Running a job again with the real `llamafleet` binary against a real coordinator
// (cli_fixture.h): a submit that matches a finished job says how to run it again;
// `resubmit ID [--set k=v]` runs the spec as written with changes and names the job it
// derives from; `submit --set` changes fields of the file before validation; a job's
// export directory is handed over only by a job that never wrote it.
#include "tests/clients/cli_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cli;  // NOLINT: the fixture's names

class CliResubmitTest : public CliTest {
 protected:
  // `get job ID -o json`, parsed.
  v1::Job Job(const std::string& id) {
    const std::string out = Ok({"get", "job", id, "-o", "json"});
    v1::Job job;
    auto parsed = google::protobuf::util::JsonStringToMessage(out, &job);
    EXPECT_TRUE(parsed.ok()) << parsed.ToString() << "\n" << out;
    return job;
  }
};

TEST_F(CliResubmitTest, SubmitMatchingAFinishedJobSaysHowToRunItAgain) {
  const std::string file = WriteFile("job.yaml", Spec("again"));
  EXPECT_EQ(Ok({"submit", "-f", file}), "job 1 created\n");
  // Still queued: the usual answer.
  EXPECT_TRUE(
      absl::StartsWith(Ok({"submit", "-f", file}), "job 1 already exists (idempotency key auto-"));
  Ok({"cancel", "1"});
  const std::string out = Ok({"submit", "-f", file});
  EXPECT_TRUE(absl::StartsWith(out, "job 1 already exists (idempotency key auto-")) << out;
  EXPECT_TRUE(absl::StrContains(out, "it was CANCELLED")) << out;
  EXPECT_TRUE(absl::StrContains(out, "llamafleet resubmit 1")) << out;
  EXPECT_EQ(AllJobs().size(), 1u);
}

TEST_F(CliResubmitTest, ResubmitRunsTheSpecAsWrittenWithChangesAndNamesItsSource) {
  Ok({"submit", "-f", WriteFile("job.yaml", Spec("orig", "labels: {team: nlp}\n"))});
  EXPECT_EQ(Ok({"resubmit", "1", "--set", "training.lr=2e-5", "--set", "resources.nodes=2"}),
            "job 2 created (resubmitted from job 1)\n");
  const v1::Job job = Job("2");
  EXPECT_EQ(job.spec().name(), "orig");
  EXPECT_EQ(job.spec().labels().at("team"), "nlp");
  EXPECT_FLOAT_EQ(job.spec().training().lr(), 2e-5);
  EXPECT_EQ(job.spec().resources().nodes(), 2);
  EXPECT_EQ(job.spec().training().max_steps(), 5);
  // The spec as written is what a resubmission starts from: the changes, not the defaults.
  const std::string json = Ok({"get", "job", "2", "-o", "json"});
  EXPECT_TRUE(absl::StrContains(json, "\"derived_from\": \"1\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"submitted_spec\"")) << json;
  EXPECT_NE(job.idempotency_key(), Job("1").idempotency_key());
  const std::string described = Ok({"describe", "job", "2"});
  EXPECT_TRUE(absl::StrContains(described, "Derived from:")) << described;
  EXPECT_TRUE(absl::StrContains(described, "resubmitted from job 1")) << described;

  // Running the same command again is the same job; an unknown field or a bad value is
  // refused by name and stores nothing.
  EXPECT_TRUE(absl::StartsWith(
      Ok({"resubmit", "1", "--set", "training.lr=2e-5", "--set", "resources.nodes=2"}),
      "job 2 already exists"));
  ExpectOneErrorLine(Cli({"resubmit", "1", "--set", "training.lrr=1"}), 2,
                     "training.lrr: unknown field");
  ExpectOneErrorLine(Cli({"resubmit", "1", "--set", "resources.nodes=0"}), 1,
                     "resources.nodes must be >= 1");
  ExpectOneErrorLine(Cli({"resubmit", "7"}), 1, "job 7 not found");
  EXPECT_EQ(AllJobs().size(), 2u);
}

TEST_F(CliResubmitTest, SubmitSetChangesTheFileBeforeValidation) {
  const std::string file = WriteFile("job.yaml", Spec("set"));
  EXPECT_EQ(Ok({"submit", "-f", file, "--set", "training.max_steps=7"}), "job 1 created\n");
  EXPECT_EQ(Job("1").spec().training().max_steps(), 7);
  // Other values make another job; the same ones the same job.
  EXPECT_EQ(Ok({"submit", "-f", file}), "job 2 created\n");
  EXPECT_TRUE(absl::StartsWith(Ok({"submit", "-f", file, "--set", "training.max_steps=7"}),
                               "job 1 already exists"));
  ExpectOneErrorLine(Cli({"submit", "-f", file, "--set", "fsdp.shardng=FULL_SHARD"}), 2,
                     "fsdp.shardng: unknown field");
  ExpectOneErrorLine(Cli({"submit", "-f", file, "--set", "training.lr"}), 2,
                     "--set expects key=value");
  EXPECT_EQ(AllJobs().size(), 2u);
}

TEST_F(CliResubmitTest, AnExportDirIsHandedOverOnlyByAJobThatNeverWroteIt) {
  Ok({"submit", "-f",
      WriteFile("job.yaml", Spec("exp", "output: {export_dir: " + dir_.path() + "/out}\n"))});
  // Job 1 may still write its export: the new job needs a directory of its own.
  ExpectOneErrorLine(Cli({"resubmit", "1"}), 1, "--set output.export_dir=");
  EXPECT_EQ(Ok({"resubmit", "1", "--set", "output.export_dir=" + dir_.path() + "/out2"}),
            "job 2 created (resubmitted from job 1)\n");
  // Cancelled before it ran, job 1 never wrote there: the next resubmission takes it over.
  Ok({"cancel", "1"});
  EXPECT_EQ(Ok({"resubmit", "1"}), "job 3 created (resubmitted from job 1)\n");
  EXPECT_EQ(Job("3").spec().output().export_dir(), dir_.path() + "/out");
  // ... and holds it like any job's own: a fresh submission naming it is refused.
  ExpectOneErrorLine(
      Cli({"submit", "-f",
           WriteFile("other.yaml",
                     Spec("other", "output: {export_dir: " + dir_.path() + "/out}\n"))}),
      1, "is the export directory of job 3");
}

}  // namespace
}  // namespace llamafleet
