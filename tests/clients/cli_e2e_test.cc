// The real `llamafleet` binary against a real `llamafleet-coordinator` process (cli_fixture.h):
// submit in every form, what it stores and what it refuses. get, cancel and watch are
// cli_jobs_e2e_test.cc's; errors and global flags cli_errors_e2e_test.cc's.
#include <cstdio>

#include "tests/clients/cli_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cli;  // NOLINT: the fixture's names
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
                               "llama3.1-8b-1xp5.yaml", "llama3.1-70b-4xp5.yaml", "llama3.1-405b-tp8-16xp5.yaml",
                               "qwen2.5-7b-lora-1gpu.yaml", "pipeline.yaml", "sweep.yaml"}) {
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

TEST_F(CliTest, TheNewerModelsExamplesShowWhatFitsAndTheirPublishedSizes) {
  // Llama 3.1 8B on one p5, 70B on the fewest p5 that hold it (4), 405B on the seed's 16
  // with tensor parallelism 8, Qwen2.5 7B LoRA on one GPU: memory_estimate_test's figures,
  // the published parameter counts, and the step estimate.
  struct Case {
    const char* file;
    const char* memory;
    const char* count;
  };
  for (const Case& c : {Case{"llama3.1-8b-1xp5.yaml", "40.8 GiB per GPU on 8 ranks", "# finetuning: full: 8.03B trainable of 8.03B"},
                        Case{"llama3.1-70b-4xp5.yaml", "70.9 GiB per GPU on 32 ranks", "of 70.55B parameters"},
                        Case{"llama3.1-405b-tp8-16xp5.yaml", "77.7 GiB per GPU on 128 ranks", "of 405.85B parameters"},
                        Case{"qwen2.5-7b-lora-1gpu.yaml", "30.6 GiB per GPU on 1 rank", "trainable of 7.62B parameters"}}) {
    SCOPED_TRACE(c.file);
    const std::string out = Ok({"submit", "-f", absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/", c.file), "--dry-run"});
    std::printf("%s: %s\n", c.file, out.substr(0, out.find("\nname:")).c_str());
    EXPECT_TRUE(absl::StrContains(out, absl::StrCat("# memory estimate: ", c.memory))) << out;
    EXPECT_TRUE(absl::StrContains(out, c.count)) << out;
    EXPECT_TRUE(absl::StrContains(out, "s per step on p5.48xlarge (H100 80GB)")) << out;
  }
  // 70B on one node fewer does not fit; the refusal says what would.
  std::ifstream in(absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/llama3.1-70b-4xp5.yaml"));
  std::string spec((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  spec = absl::StrReplaceAll(spec, {{"nodes: 4", "nodes: 3"}, {"global_batch_size: 32", "global_batch_size: 24"}});
  ExpectOneErrorLine(Cli({"submit", "-f", WriteFile("70b-3xp5.yaml", spec), "--dry-run"}), 1,
                     "resources.instance_type p5.48xlarge: estimated 83.0 GiB per GPU");
  EXPECT_TRUE(AllJobs().empty());
}

TEST_F(CliTest, DryRunShowsTensorParallelismAndItsDataParallelWorld) {
  const std::string out =
      Ok({"submit", "-f", absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/llama2-70b-tp8-4xp5.yaml"), "--dry-run"});
  EXPECT_TRUE(absl::StrContains(out, "# memory estimate: 45.5 GiB per GPU on 32 ranks")) << out;
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

}  // namespace
}  // namespace llamafleet
