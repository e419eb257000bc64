// JobSpec.kind (jobspec/job_kind.h): an evaluation job's defaults and its refusals, each
// naming the field.
#include "jobspec/job_kind.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jobspec/jobspec.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

constexpr char kEvaluate[] = R"(
name: score
kind: evaluate
model: {path: /fsx/out/finetune}
data: {eval: [{name: held_out, path: /fsx/data/eval.jsonl}], format: tokens}
)";

// kEvaluate with `yaml` merged over it, defaults applied.
v1::JobSpec EvaluateSpec(const std::string& yaml = "{}") {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(kEvaluate);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  std::vector<std::string> errors;
  MergeYamlIntoMessage(YAML::Load(yaml), "", &spec, &errors);
  EXPECT_TRUE(errors.empty()) << errors[0];
  ApplyDefaults(&spec);
  return spec;
}

TEST(JobKindTest, AnEvaluationJobNeedsOnlyAModelAndEvalSets) {
  const v1::JobSpec spec = EvaluateSpec();
  EXPECT_TRUE(IsEvaluateJob(spec));
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // What an evaluation reads is defaulted, as for a training job...
  EXPECT_EQ(spec.training().micro_batch_size(), 4);
  EXPECT_EQ(spec.training().seq_len(), 4096);
  EXPECT_EQ(spec.training().batching(), v1::PACKING);
  // ...and nothing only training reads: the stored spec says what the job does.
  EXPECT_FALSE(spec.training().has_epochs());
  EXPECT_FALSE(spec.training().has_lr());
  EXPECT_EQ(spec.training().betas_size(), 0);
  EXPECT_FALSE(spec.training().has_lr_schedule());
  EXPECT_FALSE(spec.has_output());
  v1::JobSpec again = spec;
  ApplyDefaults(&again);
  EXPECT_EQ(again.SerializeAsString(), spec.SerializeAsString());
}

TEST(JobKindTest, TheAttemptsCheckpointDirAndAnAdapterAreAccepted) {
  // The coordinator gives every attempt a checkpoint.dir (TensorBoard events go there);
  // the trainer validates the spec again with it.
  const v1::JobSpec spec = EvaluateSpec(
      "{checkpoint: {dir: /fsx/ckpt/job-1}, data: {eval: [], eval_path: /fsx/e.jsonl},"
      " peft: {method: lora, adapter_path: /fsx/out/adapter},"
      " training: {micro_batch_size: 2, seq_len: 512, batching: padding, seed: 7},"
      " fsdp: {sharding: no_shard, mixed_precision: fp32}, resources: {gpus_per_node: 2}}");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // The adapter's own r, alpha and targets apply: none are defaulted in.
  EXPECT_FALSE(spec.peft().has_r());
  EXPECT_EQ(spec.peft().target_modules_size(), 0);
}

TEST(JobKindTest, ATrainingJobIsUnchanged) {
  absl::StatusOr<std::vector<ParsedJob>> jobs =
      ParseJobDocuments("name: x\nkind: train\nmodel: {path: /m}\ndata: {train_path: /d}\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  EXPECT_FALSE(IsEvaluateJob(spec));
  EXPECT_DOUBLE_EQ(spec.training().lr(), 1e-4);
  EXPECT_EQ(spec.training().epochs(), 1);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

struct RefusalCase {
  std::string yaml;      // merged over kEvaluate
  std::string expected;  // in the status message: the field and its rule
};

class JobKindRefusalTest : public ::testing::TestWithParam<RefusalCase> {};

TEST_P(JobKindRefusalTest, NamesTheField) {
  const v1::JobSpec spec = EvaluateSpec(GetParam().yaml);
  const absl::Status status = ValidateJobSpec(spec);
  ASSERT_FALSE(status.ok()) << GetParam().yaml;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(GetParam().expected), std::string::npos) << status.message();
  // The field is in the status's field violations too (what clients mark).
  const std::string field = GetParam().expected.substr(0, GetParam().expected.find(' '));
  bool found = false;
  for (const v1::FieldViolation& v : FieldViolationsOf(status)) found = found || v.field() == field;
  EXPECT_TRUE(found) << field << ": " << status.message();
}

constexpr char kOnlyTraining[] = " applies only to kind train";

INSTANTIATE_TEST_SUITE_P(
    Fields, JobKindRefusalTest,
    ::testing::Values(
        RefusalCase{"{kind: score}", "kind 'score' is not one of train, evaluate"},
        RefusalCase{"{model: {path: '', preset: llama2-7b, tokenizer: /t}}",
                    "model.path is required with kind evaluate"},
        RefusalCase{"{data: {eval: []}}", "data.eval is required with kind evaluate"},
        RefusalCase{"{data: {train_path: /d}}", std::string("data.train_path") + kOnlyTraining},
        RefusalCase{"{data: {train: [{path: /d}]}}", std::string("data.train") + kOnlyTraining},
        RefusalCase{"{training: {epochs: 2}}", std::string("training.epochs") + kOnlyTraining},
        RefusalCase{"{training: {max_steps: 1}}",
                    std::string("training.max_steps") + kOnlyTraining},
        RefusalCase{"{training: {grad_accum: 2}}",
                    std::string("training.grad_accum") + kOnlyTraining},
        RefusalCase{"{training: {global_batch_size: 8}}",
                    std::string("training.global_batch_size") + kOnlyTraining},
        RefusalCase{"{training: {optimizer: adamw}}",
                    std::string("training.optimizer") + kOnlyTraining},
        RefusalCase{"{training: {lr: 1e-9}}", std::string("training.lr") + kOnlyTraining},
        RefusalCase{"{training: {betas: [0.9, 0.95]}}",
                    std::string("training.betas") + kOnlyTraining},
        RefusalCase{"{training: {eps: 1e-6}}", std::string("training.eps") + kOnlyTraining},
        RefusalCase{"{training: {weight_decay: 0.1}}",
                    std::string("training.weight_decay") + kOnlyTraining},
        RefusalCase{"{training: {lr_schedule: {type: cosine}}}",
                    std::string("training.lr_schedule") + kOnlyTraining},
        RefusalCase{"{training: {grad_clip: 1}}",
                    std::string("training.grad_clip") + kOnlyTraining},
        RefusalCase{"{training: {eval_every_steps: 5}}",
                    std::string("training.eval_every_steps") + kOnlyTraining},
        RefusalCase{"{training: {early_stopping: {patience: 2}}}",
                    std::string("training.early_stopping") + kOnlyTraining},
        RefusalCase{"{training: {objective: dpo}}",
                    std::string("training.objective") + kOnlyTraining},
        RefusalCase{"{checkpoint: {every_steps: 10}}",
                    std::string("checkpoint.every_steps") + kOnlyTraining},
        RefusalCase{"{checkpoint: {keep_last: 2}}",
                    std::string("checkpoint.keep_last") + kOnlyTraining},
        RefusalCase{"{checkpoint: {resume: latest}}",
                    std::string("checkpoint.resume") + kOnlyTraining},
        RefusalCase{"{checkpoint: {async: false}}",
                    std::string("checkpoint.async") + kOnlyTraining},
        RefusalCase{"{output: {export_dir: /fsx/out/x}}",
                    std::string("output.export_dir") + kOnlyTraining},
        RefusalCase{"{output: {export_dtype: fp32}}",
                    std::string("output.export_dtype") + kOnlyTraining},
        RefusalCase{"{output: {max_shard_size_mb: 100}}",
                    std::string("output.max_shard_size_mb") + kOnlyTraining},
        RefusalCase{"{output: {merge: true}}", std::string("output.merge") + kOnlyTraining},
        RefusalCase{"{output: {export: best}}", std::string("output.export") + kOnlyTraining},
        RefusalCase{"{output: {gguf: {dtype: f16}}}", std::string("output.gguf") + kOnlyTraining},
        RefusalCase{"{peft: {method: lora}}",
                    "peft.adapter_path is required with kind evaluate and peft"},
        // The rows' rules still hold.
        RefusalCase{"{training: {micro_batch_size: 0}}",
                    "training.micro_batch_size must be >= 1"}));

}  // namespace
}  // namespace llamafleet
