// A submission's inputs and outputs checked on the storage before the job is queued
// (server/job_paths_check.h), through a dry run and a real SubmitJob against an in-process
// coordinator whose path root is a temporary directory.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "server/coordinator.h"
#include "server/tokenizer_vocab.h"
#include "tests/testing/in_process.h"
#include "tests/testing/process.h"
#include "tests/testing/spec_builder.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::SpecBuilder;

class JobPathsCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    // A shared path root as administrators make them: anyone may make a directory there.
    std::filesystem::create_directories(root_ + "/data");
    ::chmod(root_.c_str(), 01777);
    Write(root_ + "/data/train.jsonl", "{\"text\": \"a\"}\n");
    Write(root_ + "/tokenizer.model", "x");
    CoordinatorOptions options = testing::InProcessOptions(dir_.path() + "/coord");
    options.path_roots = {root_, dir_.path() + "/not-mounted"};
    options.check_job_paths = true;
    coordinator_ = testing::StartInProcess(options);
    ASSERT_NE(coordinator_, nullptr);
    stub_ = v1::JobService::NewStub(
        grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
    ::chmod(path.c_str(), 0644);
  }

  SpecBuilder Spec() {
    return std::move(SpecBuilder("paths")
                         .Tokenizer(root_ + "/tokenizer.model")
                         .TrainPath(root_ + "/data/train.jsonl"));
  }

  grpc::Status Submit(const v1::JobSpec& spec, bool dry_run, v1::Job* job = nullptr) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_dry_run(dry_run);
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-llamafleet-user", "alice");
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(&ctx, req, &resp);
    if (job != nullptr) *job = resp.job();
    return s;
  }

  // The refusal of `spec`, the same in a dry run and a real submission.
  std::string Refusal(const v1::JobSpec& spec, grpc::StatusCode code) {
    grpc::Status dry = Submit(spec, true);
    grpc::Status real = Submit(spec, false);
    EXPECT_EQ(dry.error_code(), code) << dry.error_message();
    EXPECT_EQ(real.error_code(), code) << real.error_message();
    EXPECT_EQ(dry.error_message(), real.error_message());
    return dry.error_message();
  }

  testing::TempDir dir_;
  std::string root_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

TEST_F(JobPathsCheckTest, ASpecWhosePathsAreThereIsAccepted) {
  v1::Job job;
  grpc::Status s =
      Submit(Spec().CheckpointDir(root_ + "/ck/run-1").ExportDir(root_ + "/export/run-1").Build(),
             true, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(absl::StartsWith(job.status_reason(), "dry run: valid, not stored"))
      << job.status_reason();
  EXPECT_FALSE(absl::StrContains(job.status_reason(), "not checked")) << job.status_reason();
}

TEST_F(JobPathsCheckTest, MissingInputsAreRefusedNamingTheFieldAndThePath) {
  const std::string message =
      Refusal(Spec().TrainPath(root_ + "/data/trian.jsonl").Tokenizer(root_ + "/tok.model").Build(),
              grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(
      message, "spec.data.train_path " + root_ + "/data/trian.jsonl does not exist"))
      << message;
  EXPECT_TRUE(
      absl::StrContains(message, "spec.model.tokenizer " + root_ + "/tok.model does not exist"))
      << message;
}

TEST_F(JobPathsCheckTest, EveryMixtureSourceAndEvalSetIsCheckedByItsElement) {
  v1::JobSpec spec = Spec().Build();
  spec.mutable_data()->clear_train_path();
  spec.mutable_data()->add_train()->set_path(root_ + "/data/train.jsonl");
  spec.mutable_data()->add_train()->set_path(root_ + "/data/missing.jsonl");
  v1::EvalSet* eval = spec.mutable_data()->add_eval();
  eval->set_name("held-out");
  eval->set_path(root_ + "/data/gone.jsonl");
  const std::string message = Refusal(spec, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(
      message, "spec.data.train[1].path " + root_ + "/data/missing.jsonl does not exist"))
      << message;
  EXPECT_TRUE(absl::StrContains(
      message, "spec.data.eval[0].path " + root_ + "/data/gone.jsonl does not exist"))
      << message;
  EXPECT_FALSE(absl::StrContains(message, "data.train[0]")) << message;
  // Outside the path roots: refused before the storage is looked at.
  spec.mutable_data()->mutable_train(1)->set_path("/etc/passwd");
  const std::string outside = Refusal(spec, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(outside, "data.train[1].path must be inside a path root"))
      << outside;
}

TEST_F(JobPathsCheckTest, AModelFolderNeedsItsConfigAndTokenizer) {
  std::filesystem::create_directories(root_ + "/models/empty");
  const std::string message =
      Refusal(Spec().ModelPath(root_ + "/models/empty").Tokenizer("").Build(),
              grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(
      absl::StrContains(message, "spec.model.path " + root_ + "/models/empty has no config.json"))
      << message;
  EXPECT_TRUE(absl::StrContains(
      message, "spec.model.tokenizer " + root_ + "/models/empty has no tokenizer.model"))
      << message;
}

TEST_F(JobPathsCheckTest, AModelFolderWithATokenizerJsonNeedsNoTokenizerModel) {
  const std::string model = root_ + "/models/llama3";
  std::filesystem::create_directories(model);
  Write(model + "/config.json", "{\"max_position_embeddings\": 8192}");
  Write(model + "/tokenizer.json", "{}");
  grpc::Status s = Submit(Spec().ModelPath(model).Tokenizer("").Build(), true);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(JobPathsCheckTest, ChatDataWithTheModelsTemplateNeedsItsTokenizerConfig) {
  const std::string model = root_ + "/models/chat";
  std::filesystem::create_directories(model);
  Write(model + "/config.json", "{\"max_position_embeddings\": 8192}");
  Write(model + "/tokenizer.json", "{}");
  v1::JobSpec spec = Spec().ModelPath(model).Tokenizer("").Build();
  spec.mutable_data()->set_format(v1::CHAT);
  const std::string message = Refusal(spec, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(
      message, "spec.data.chat_template " + model + " has no tokenizer_config.json"))
      << message;
  Write(model + "/tokenizer_config.json", "{}");
  grpc::Status s = Submit(spec, true);
  EXPECT_TRUE(s.ok()) << s.error_message();
  // A named renderer needs no file of the model's.
  ::unlink((model + "/tokenizer_config.json").c_str());
  spec.mutable_data()->set_chat_template("llama3");
  s = Submit(spec, true);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(JobPathsCheckTest, SeqLenOverTheModelsLimitIsRefusedWithTheValueAndTheLimit) {
  const std::string model = root_ + "/models/short";
  std::filesystem::create_directories(model);
  Write(model + "/config.json", "{\"max_position_embeddings\": 2048, \"vocab_size\": 32000}");
  Write(model + "/tokenizer.model", "x");
  const std::string message =
      Refusal(Spec().ModelPath(model).Tokenizer("").Yaml("training: {seq_len: 100000}").Build(),
              grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(
      message, "spec.training.seq_len must be <= 2048, max_position_embeddings in " + model +
                   "/config.json (got 100000)"))
      << message;
  // Not written: the default is the trainer's to cap.
  grpc::Status s = Submit(Spec().ModelPath(model).Tokenizer("").Build(), true);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(JobPathsCheckTest, AnOutputTheJobCannotCreateIsRefusedBeforeItRuns) {
  std::filesystem::create_directories(root_ + "/readonly");
  ::chmod((root_ + "/readonly").c_str(), 0555);
  const std::string message = Refusal(Spec().ExportDir(root_ + "/readonly/export").Build(),
                                      grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(
      absl::StrContains(message, "spec.output.export_dir " + root_ +
                                     "/readonly/export cannot be created by the job's identity"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, root_ + "/readonly, the nearest existing directory, is"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "mode 0555")) << message;
  const std::string checkpoint = Refusal(Spec().CheckpointDir(root_ + "/readonly/ck").Build(),
                                         grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(checkpoint,
                                "spec.checkpoint.dir " + root_ + "/readonly/ck cannot be created"))
      << checkpoint;
  // A file on the way.
  const std::string file = Refusal(Spec().ExportDir(root_ + "/data/train.jsonl/out").Build(),
                                   grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(file, "is a regular file, not a directory")) << file;
}

TEST_F(JobPathsCheckTest, AnInputTheJobCannotReadIsRefused) {
  Write(root_ + "/data/closed.jsonl", "{}\n");
  ::chmod((root_ + "/data/closed.jsonl").c_str(), 0);
  const std::string message = Refusal(Spec().TrainPath(root_ + "/data/closed.jsonl").Build(),
                                      grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(
      message,
      "spec.data.train_path " + root_ + "/data/closed.jsonl is not readable by the job's identity"))
      << message;
  const std::string dir =
      Refusal(Spec().TrainPath(root_ + "/data").Build(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(dir, "is a directory, not a regular file")) << dir;
}

TEST_F(JobPathsCheckTest, AnInputAJobItDependsOnWillMakeIsNotRefused) {
  v1::Job parent;
  ASSERT_TRUE(Submit(Spec().ExportDir(root_ + "/export/parent").Build(), false, &parent).ok());
  v1::Job child;
  grpc::Status s = Submit(Spec()
                              .ModelPath(root_ + "/export/parent")
                              .Tokenizer(root_ + "/tokenizer.model")
                              .DependsOn(parent.id())
                              .Build(),
                          true, &child);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(absl::StrContains(child.status_reason(),
                                "spec.model.path not checked: " + root_ +
                                    "/export/parent does not exist yet: a job this one depends on "
                                    "may make it"))
      << child.status_reason();
}

TEST_F(JobPathsCheckTest, ARootNotMountedHereIsNotCheckedAndTheDryRunSaysSo) {
  v1::Job job;
  grpc::Status s =
      Submit(Spec().TrainPath(dir_.path() + "/not-mounted/train.jsonl").Build(), true, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(absl::StrContains(job.status_reason(), "spec.data.train_path not checked: its root"))
      << job.status_reason();
}

// The tiny preset's parameters with a vocabulary of `v` (hidden 64, MLP 176, 2 layers, 4
// heads of 16, untied embedding and head), written out from its shape.
int64_t TinyParameters(int64_t v) {
  const int64_t h = 64, layer = 2 * h + 4 * h * h + 3 * h * 176;
  return v * h + 2 * layer + h + v * h;
}

TEST_F(JobPathsCheckTest, ATinyPresetIsEstimatedWithItsTokenizersVocabulary) {
  std::filesystem::copy_file(std::string(LLAMAFLEET_SOURCE_DIR) +
                                 "/tests/trainer/fixtures/tokenizers/llama3_style/tokenizer.json",
                             root_ + "/tokenizer.json");
  ::chmod((root_ + "/tokenizer.json").c_str(), 0644);
  v1::Job job;
  grpc::Status s = Submit(Spec().Tokenizer(root_ + "/tokenizer.json").Build(), true, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(job.memory_estimate().parameters(), TinyParameters(3261));
  EXPECT_TRUE(absl::StrContains(
      job.status_reason(), "the estimates count spec.model.tokenizer's vocabulary of 3261 pieces"))
      << job.status_reason();

  // Not a tokenizer the coordinator can size: the table's vocabulary, and the answer says so.
  s = Submit(Spec().Build(), true, &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(job.memory_estimate().parameters(), TinyParameters(32000));
  EXPECT_TRUE(
      absl::StrContains(job.status_reason(),
                        "the estimates count spec.model.preset's vocabulary of 32000 pieces, "
                        "as spec.model.tokenizer could not be read here: " +
                            root_ + "/tokenizer.model: not a tokenizer.json"))
      << job.status_reason();
}

// Expected sizes from the reference libraries on the same files (Debian sid root):
// tokenizers' Tokenizer.get_vocab_size(with_added_tokens=True), sentencepiece's
// get_piece_size(), and tiktoken's load_tiktoken_bpe (259 ranks) plus the trainer's 256
// special tokens.
TEST(TokenizerVocabSizeTest, CountsAsTheReferenceLibrariesDo) {
  const std::string fixtures = std::string(LLAMAFLEET_SOURCE_DIR) + "/tests/";
  const std::pair<const char*, int64_t> cases[] = {
      {"trainer/fixtures/tokenizers/llama3_style/tokenizer.json", 3261},
      {"trainer/fixtures/tokenizers/qwen2_style/tokenizer.json", 3263},
      {"trainer/fixtures/chat/tokenizer/tokenizer.json", 3268},
      {"trainer/fixtures/gguf/spm/tokenizer.model", 512},
      {"fuzz/corpus/tiktoken_ranks/bytes_and_merges.tiktoken", 259 + 256},
  };
  for (const auto& [file, want] : cases) {
    absl::StatusOr<int64_t> got = TokenizerVocabSize(testing::ReadFile(fixtures + file), file);
    ASSERT_TRUE(got.ok()) << file << ": " << got.status();
    EXPECT_EQ(*got, want) << file;
  }
}

TEST(TokenizerVocabSizeTest, WhatIsNoTokenizerIsRefusedNamingTheFile) {
  const std::string spm = testing::ReadFile(std::string(LLAMAFLEET_SOURCE_DIR) +
                                            "/tests/trainer/fixtures/gguf/spm/tokenizer.model");
  for (const std::string& bytes :
       {std::string("x"), std::string("{\"model\": {\"vocab\": {}}}"), std::string("{\"model\""),
        spm.substr(0, spm.size() - 3), std::string()}) {
    absl::StatusOr<int64_t> got = TokenizerVocabSize(bytes, "/d/tok");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bytes.size();
    EXPECT_TRUE(absl::StartsWith(got.status().message(), "/d/tok: ")) << got.status();
  }
}

}  // namespace
}  // namespace llamafleet
