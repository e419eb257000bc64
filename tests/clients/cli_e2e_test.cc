// The real `llamafleet` binary against a real `llamafleet-coordinator` process: what a
// user or a script sees (stdout, one stderr line, exit codes), and what got stored.

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
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::BinaryPath;
using ::llamafleet::testing::CommandResult;
using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::Subprocess;
using ::llamafleet::testing::TempDir;

// A valid spec with the fields every job needs; `extra` is appended as YAML.
std::string Spec(const std::string& name, const std::string& extra = "") {
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
    auto started = Subprocess::Start({BinaryPath("llamafleet-coordinator"), "--listen", listen, "--insecure-no-auth",
                                      "--data-dir", dir_.path() + "/data", "--log-level", "warn",
                                      "--config", config},
                                     {}, dir_.path() + "/coordinator.log");
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = std::move(*started);
    auto address = coordinator_->WaitForListening();
    ASSERT_TRUE(address.ok()) << address.status();
    address_ = *address;
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
void ExpectOneErrorLine(const CommandResult& r, int exit_code, const std::string& substring) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "llamafleet: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, substring)) << "want '" << substring << "' in: " << r.err;
}

using ::testing::ElementsAre;

// ---------------------------------------------------------------------------
// submit
// ---------------------------------------------------------------------------

TEST_F(CliTest, SubmitSingleDocumentCreatesOneJob) {
  const std::string file = WriteFile("job.yaml", Spec("one", "queue: research\npriority: 7\n"));
  EXPECT_EQ(Ok({"submit", "-f", file}), "job 1 created\n");

  v1::Job job;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(Ok({"get", "job", "1", "-o", "json"}), &job)
          .ok());
  EXPECT_EQ(job.spec().name(), "one");
  EXPECT_EQ(job.spec().queue(), "research");
  EXPECT_EQ(job.spec().priority(), 7);
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.spec().training().micro_batch_size(), 4) << "defaults are filled in";
}

TEST_F(CliTest, QueuesAndWhoAmI) {
  // The configured queue is listed before anything is queued in it.
  EXPECT_EQ(Ok({"queues"}),
            "QUEUE      QUEUED   RUNNING   GPUS   OLDEST-QUEUED\nresearch   0        0         0/-    -\n");
  Ok({"submit", "-f", WriteFile("a.yaml", Spec("a", "queue: research\n"))});
  Ok({"submit", "-f", WriteFile("b.yaml", Spec("b", "queue: research\n"))});
  Ok({"submit", "-f", WriteFile("c.yaml", Spec("c"))});
  const std::string table = Ok({"queues"});
  EXPECT_NE(table.find("QUEUE"), std::string::npos) << table;
  EXPECT_NE(table.find("research   2        0         0/-"), std::string::npos) << table;
  EXPECT_NE(table.find("default    1"), std::string::npos) << table;
  v1::ListQueuesResponse queues;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(Ok({"queues", "-o", "json"}), &queues).ok());
  ASSERT_EQ(queues.queues_size(), 2);
  // This coordinator runs with --insecure-no-auth: --user names the caller, an admin.
  EXPECT_EQ(Ok({"whoami"}, "", "bob"), "bob (admin); the coordinator runs without authentication\n");
}

TEST_F(CliTest, SubmitMultiDocumentFileIsOneBatch) {
  const std::string file =
      WriteFile("batch.yaml", absl::StrCat(Spec("a"), "---\n", Spec("b"), "---\n", Spec("c")));
  EXPECT_EQ(Ok({"submit", "-f", file}), "job 1 created\njob 2 created\njob 3 created\n");
  EXPECT_THAT(Names(AllJobs()), ElementsAre("c", "b", "a"));  // newest first
}

TEST_F(CliTest, SubmitSeveralFilesAndADirectoryIsOneBatch) {
  const std::string a = WriteFile("a.yaml", Spec("a"));
  const std::string bc = WriteFile("bc.yaml", absl::StrCat(Spec("b"), "---\n", Spec("c")));
  ASSERT_EQ(mkdir((dir_.path() + "/more").c_str(), 0755), 0);
  WriteFile("more/2.yml", Spec("e"));
  WriteFile("more/1.json", R"({"name": "d", "model": {"preset": "tiny", "tokenizer": "/t"},
                               "data": {"train_path": "/d"}})");
  WriteFile("more/notes.txt", "not a job");
  EXPECT_EQ(Ok({"submit", "-f", a, "-f", bc, "-f", dir_.path() + "/more"}),
            "job 1 created\njob 2 created\njob 3 created\njob 4 created\njob 5 created\n");
  // The files in the order given, a directory's files by name.
  EXPECT_THAT(Names(AllJobs()), ElementsAre("e", "d", "c", "b", "a"));
  // Each document keeps the key it has when its file is submitted alone.
  EXPECT_EQ(Ok({"submit", "-f", a}), absl::StrCat("job 1 already exists (idempotency key ",
                                                  AllJobs().back().idempotency_key(), ")\n"));
  EXPECT_EQ(AllJobs().size(), 5u);
}

TEST_F(CliTest, SubmitSeveralFilesNamesTheFileAndStoresNothingOnError) {
  const std::string good = WriteFile("good.yaml", Spec("good"));
  const std::string bad = WriteFile(
      "bad.yaml", absl::StrCat(Spec("fine"),
                               "---\nname: broken\nmodel: {preset: tiny, tokenizer: /t}\n"
                               "data: {train_path: /d}\ntraining: {lr: -1}\n"));
  ExpectOneErrorLine(Cli({"submit", "-f", good, "-f", bad}), 1,
                     absl::StrCat("invalid job spec: ", bad, ":9: training.lr must be > 0"));
  ExpectOneErrorLine(Cli({"submit", "-f", good, "-f", dir_.path() + "/missing.yaml"}), 1,
                     "missing.yaml");
  ASSERT_EQ(mkdir((dir_.path() + "/empty").c_str(), 0755), 0);
  ExpectOneErrorLine(Cli({"submit", "-f", dir_.path() + "/empty"}), 2,
                     "no *.yaml, *.yml or *.json files in it");
  ExpectOneErrorLine(Cli({"submit", "-f", good, "-f", good, "--idempotency-key", "k"}), 2,
                     "--idempotency-key applies to a single job");
  EXPECT_TRUE(AllJobs().empty());
}

TEST_F(CliTest, SubmitJsonListAndJsonOutput) {
  const std::string file = WriteFile(
      "jobs.json",
      R"([{"name": "j1", "model": {"preset": "tiny", "tokenizer": "/t"}, "data": {"train_path": "/d"}},
          {"name": "j2", "model": {"preset": "tiny", "tokenizer": "/t"}, "data": {"train_path": "/d"},
           "fsdp": {"sharding": "NO_SHARD"}}])");
  v1::SubmitJobsResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Ok({"submit", "-f", file, "-o", "json"}),
                                                          &response)
                  .ok());
  ASSERT_EQ(response.jobs_size(), 2);
  EXPECT_TRUE(response.jobs(0).created());
  EXPECT_EQ(response.jobs(1).job().spec().fsdp().sharding(), v1::NO_SHARD);
  EXPECT_THAT(Names(AllJobs()), ElementsAre("j2", "j1"));
}

TEST_F(CliTest, SubmitFromStdin) {
  EXPECT_EQ(Ok({"submit", "-f", "-"}, Spec("piped")), "job 1 created\n");
  EXPECT_THAT(Names(AllJobs()), ElementsAre("piped"));
}

TEST_F(CliTest, ResubmittingTheSameFileCreatesNothingNew) {
  // Two identical documents are still two jobs: the key counts occurrences.
  const std::string file =
      WriteFile("batch.yaml", absl::StrCat(Spec("a"), "---\n", Spec("b"), "---\n", Spec("b")));
  EXPECT_EQ(Ok({"submit", "-f", file}), "job 1 created\njob 2 created\njob 3 created\n");
  const std::string again = Ok({"submit", "-f", file});
  EXPECT_EQ(std::count(again.begin(), again.end(), '\n'), 3) << again;
  EXPECT_TRUE(absl::StartsWith(again, "job 1 already exists (idempotency key auto-")) << again;
  EXPECT_TRUE(absl::StrContains(again, "job 3 already exists")) << again;
  EXPECT_EQ(AllJobs().size(), 3u);
}

TEST_F(CliTest, ExplicitIdempotencyKey) {
  const std::string file = WriteFile("job.yaml", Spec("keyed"));
  EXPECT_EQ(Ok({"submit", "-f", file, "--idempotency-key", "release-7"}), "job 1 created\n");
  EXPECT_EQ(Ok({"submit", "-f", file, "--idempotency-key", "release-7"}),
            "job 1 already exists (idempotency key release-7)\n");
  EXPECT_EQ(Ok({"submit", "-f", file, "--idempotency-key", "release-8"}), "job 2 created\n");

  // A key names one job; a batch gets derived keys instead.
  const std::string batch = WriteFile("batch.yaml", absl::StrCat(Spec("a"), "---\n", Spec("b")));
  ExpectOneErrorLine(Cli({"submit", "-f", batch, "--idempotency-key", "k"}), 2,
                     "--idempotency-key applies to a single job");
  EXPECT_EQ(AllJobs().size(), 2u);
}

TEST_F(CliTest, UnknownFieldIsRejectedByNameAndNothingIsStored) {
  const std::string file = WriteFile("typo.yaml", Spec("typo", "fsdp: {shardng: FULL_SHARD}\n"));
  ExpectOneErrorLine(Cli({"submit", "-f", file}), 1, "fsdp.shardng: unknown field");
  EXPECT_TRUE(AllJobs().empty());
}

TEST_F(CliTest, InvalidSpecNamesTheFieldAndNothingIsStored) {
  const std::string bad = WriteFile("bad.yaml", Spec("bad", "resources: {nodes: 0}\n"));
  ExpectOneErrorLine(Cli({"submit", "-f", bad}), 1,
                     absl::StrCat("llamafleet: invalid job spec: ", bad,
                                  ":5: resources.nodes must be >= 1"));

  // In a batch the error names the file's line, and the valid documents are not stored either.
  const std::string batch = WriteFile(
      "batch.yaml", absl::StrCat(Spec("fine"),
                                 "---\nname: broken\nmodel: {preset: tiny, tokenizer: /t}\n"
                                 "data: {train_path: /d}\ntraining: {lr: -1}\n"));
  ExpectOneErrorLine(Cli({"submit", "-f", batch}), 1,
                     absl::StrCat("invalid job spec: ", batch, ":9: training.lr must be > 0"));
  EXPECT_TRUE(AllJobs().empty());
}

TEST_F(CliTest, DryRunPrintsTheEffectiveSpecAndStoresNothing) {
  const std::string file = WriteFile("job.yaml", Spec("dry"));
  const std::string out = Ok({"submit", "-f", file, "--dry-run"});
  EXPECT_TRUE(absl::StrContains(out, "name: dry")) << out;
  EXPECT_TRUE(absl::StrContains(out, "sharding: FULL_SHARD")) << "defaults shown: " << out;
  EXPECT_TRUE(absl::StrContains(out, "nothing stored")) << out;

  // Validation is the coordinator's: a bad spec fails the dry run with the field named.
  const std::string bad = WriteFile("bad.yaml", Spec("bad", "priority: 5000\n"));
  ExpectOneErrorLine(Cli({"submit", "-f", bad, "--dry-run"}), 1, "priority must be in");
  EXPECT_TRUE(AllJobs().empty());
}

TEST_F(CliTest, EveryExampleInDeployExamplesPassesDryRun) {
  std::vector<std::string> files;
  DIR* dir = opendir(LLAMAFLEET_EXAMPLES_DIR);
  ASSERT_NE(dir, nullptr) << LLAMAFLEET_EXAMPLES_DIR;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (absl::EndsWith(name, ".yaml") || absl::EndsWith(name, ".json")) files.push_back(name);
  }
  closedir(dir);
  for (const char* expected : {"tiny-fullshard.yaml", "tiny-lora.yaml", "batch.yaml", "llama2-7b-hybrid.yaml",
                               "llama2-7b-2xp5.yaml", "llama2-13b-2xp5.yaml", "llama2-70b-16xp5.yaml",
                               "llama2-70b-lora-1xp5.yaml", "llama2-7b-lora-1gpu.yaml", "llama2-70b-tp8-4xp5.yaml",
                               "pipeline.yaml", "sweep.yaml"}) {
    EXPECT_NE(std::find(files.begin(), files.end(), expected), files.end()) << expected;
  }
  for (const std::string& name : files) {
    SCOPED_TRACE(name);
    const std::string path = absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/", name);
    v1::SubmitJobsResponse response;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                    Ok({"submit", "-f", path, "--dry-run", "-o", "json"}), &response)
                    .ok());
    EXPECT_GE(response.jobs_size(), 1);
    if (name == "batch.yaml") {
      EXPECT_EQ(response.jobs_size(), 3);
    }
    if (name == "sweep.yaml") {  // 2 x 2 points
      ASSERT_EQ(response.jobs_size(), 4);
      EXPECT_EQ(response.jobs(3).job().spec().name(), "lr-rank-3");
    }
  }
  EXPECT_TRUE(AllJobs().empty());
}

TEST_F(CliTest, ThePostsP5ConfigurationsFitAndSeventyBNoShardDoesNot) {
  // Llama-2 7B and 13B on 2 x p5.48xlarge, 70B on 16, as the EKS post runs them.
  for (const char* name : {"llama2-7b-2xp5.yaml", "llama2-13b-2xp5.yaml", "llama2-70b-16xp5.yaml"}) {
    SCOPED_TRACE(name);
    const std::string out = Ok({"submit", "-f", absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/", name), "--dry-run"});
    EXPECT_TRUE(absl::StrContains(out, "# memory estimate: ")) << out;
    EXPECT_TRUE(absl::StrContains(out, "nothing stored")) << out;
  }
  std::ifstream in(absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/llama2-70b-16xp5.yaml"));
  std::string spec((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  spec = absl::StrReplaceAll(spec, {{"sharding: FULL_SHARD", "sharding: NO_SHARD"}});
  ExpectOneErrorLine(Cli({"submit", "-f", WriteFile("70b-noshard.yaml", spec), "--dry-run"}), 1,
                     "resources.instance_type p5.48xlarge: estimated");
  EXPECT_TRUE(AllJobs().empty());
}

TEST_F(CliTest, DryRunShowsTensorParallelismAndItsDataParallelWorld) {
  const std::string out =
      Ok({"submit", "-f", absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/llama2-70b-tp8-4xp5.yaml"), "--dry-run"});
  EXPECT_TRUE(absl::StrContains(out, "# memory estimate: 45.4 GiB per GPU on 32 ranks")) << out;
  EXPECT_TRUE(absl::StrContains(out, "# parallelism: tensor parallel 8 x data parallel 4 (32 ranks)\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "tensor_parallel: 8")) << out;
  EXPECT_TRUE(absl::StrContains(out, "grad_accum: 4")) << "16 / (1 x 4 data-parallel ranks): " << out;
  ExpectOneErrorLine(Cli({"submit", "-f", WriteFile("bad-tp.yaml", Spec("bad", "parallelism: {tensor_parallel: 3}\n")),
                          "--dry-run"}),
                     1, "parallelism.tensor_parallel (3) must divide resources.gpus_per_node 1");
  EXPECT_TRUE(AllJobs().empty());
}

TEST_F(CliTest, LoraFitsSeventyBOnOneP5AndSevenBOnOneGpu) {
  for (const char* name : {"llama2-70b-lora-1xp5.yaml", "llama2-7b-lora-1gpu.yaml"}) {
    SCOPED_TRACE(name);
    const std::string out = Ok({"submit", "-f", absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/", name), "--dry-run"});
    EXPECT_TRUE(absl::StrContains(out, "# memory estimate: ")) << out;
    EXPECT_TRUE(absl::StrContains(out, "method: lora")) << out;
    EXPECT_TRUE(absl::StrContains(out, "# finetuning: LoRA r ")) << out;
    EXPECT_TRUE(absl::StrContains(out, "trainable of ")) << out;
  }
  // The same 70B job as a full finetune does not fit one node; the refusal names LoRA.
  std::ifstream in(absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/llama2-70b-lora-1xp5.yaml"));
  std::string spec((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t peft = spec.find("peft:"), resources = spec.find("resources:");
  ASSERT_NE(peft, std::string::npos);
  spec.erase(peft, resources - peft);
  ExpectOneErrorLine(Cli({"submit", "-f", WriteFile("70b-full-1node.yaml", spec), "--dry-run"}), 1,
                     "peft.method lora (");
  // Field-named refusals.
  ExpectOneErrorLine(Cli({"submit", "-f", WriteFile("bad-r.yaml", Spec("bad", "peft: {method: lora, r: 0}\n")),
                          "--dry-run"}),
                     1, "peft.r must be in [1, 4096]");
  ExpectOneErrorLine(Cli({"submit", "-f",
                          WriteFile("bad-m.yaml", Spec("bad", "peft: {method: lora, target_modules: [q_proj, qkv]}\n")),
                          "--dry-run"}),
                     1, "peft.target_modules[1]");
  ExpectOneErrorLine(Cli({"submit", "-f", WriteFile("bad-merge.yaml", Spec("bad", "output: {merge: true, export_dir: /data/out}\n")),
                          "--dry-run"}),
                     1, "output.merge");
  EXPECT_TRUE(AllJobs().empty());
}

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
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  v1::JobState state = v1::QUEUED;
  while (state != v1::CANCELLED && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    for (const v1::Job& j : AllJobs()) state = j.id() == "2" ? j.state() : state;
  }
  EXPECT_EQ(state, v1::CANCELLED);
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
