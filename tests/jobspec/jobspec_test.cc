#include "jobspec/jobspec.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

constexpr char kValid[] = R"(
name: finetune-7b
queue: research
priority: 10
labels: {team: nlp}
model: {preset: llama2-7b, tokenizer: /fsx/tok/tokenizer.model}
data: {train_path: /fsx/data/train.jsonl, format: prompt_completion}
training: {max_steps: 100, micro_batch_size: 2, seq_len: 4096, lr: 2e-5}
fsdp: {sharding: hybrid_shard, hybrid_shard_group_size: 8}
resources: {nodes: 2, gpus_per_node: 8, efa_per_node: 32, instance_type: p5.48xlarge}
)";

v1::JobSpec ParseOne(const std::string& text) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 1u);
  v1::JobSpec spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  return spec;
}

TEST(JobSpecTest, ParsesValidSpecWithCaseInsensitiveEnums) {
  v1::JobSpec spec = ParseOne(kValid);
  EXPECT_EQ(spec.name(), "finetune-7b");
  EXPECT_EQ(spec.data().format(), v1::PROMPT_COMPLETION);
  EXPECT_EQ(spec.fsdp().sharding(), v1::HYBRID_SHARD);
  EXPECT_EQ(spec.labels().at("team"), "nlp");
  EXPECT_DOUBLE_EQ(spec.training().lr(), 2e-5);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpecTest, DefaultsAreFilledAndIdempotent) {
  v1::JobSpec spec = ParseOne("name: x\nmodel: {path: /m}\ndata: {train_path: /d}\n");
  EXPECT_EQ(spec.queue(), "default");
  EXPECT_EQ(spec.training().epochs(), 1);
  EXPECT_DOUBLE_EQ(spec.training().lr(), 1e-4);
  ASSERT_EQ(spec.training().betas_size(), 2);
  EXPECT_EQ(spec.fsdp().sharding(), v1::FULL_SHARD);
  EXPECT_EQ(spec.fsdp().mixed_precision(), v1::BF16);
  EXPECT_TRUE(spec.fsdp().activation_checkpointing());
  EXPECT_EQ(spec.resources().nodes(), 1);
  EXPECT_EQ(spec.run_policy().max_restarts(), 3);
  v1::JobSpec again = spec;
  ApplyDefaults(&again);
  EXPECT_EQ(again.SerializeAsString(), spec.SerializeAsString());
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpecTest, ActivationCheckpointingTakesModesAndBooleans) {
  // The YAML switch takes full | selective | none as well as true/false; each sets the
  // switch and the mode (true/false: defaults fill the mode), and a later true/false
  // replaces the mode.
  const std::string base = "name: x\nmodel: {path: /m}\ndata: {train_path: /d}\n";
  struct Case {
    std::string value;
    bool on;
    v1::ActivationCheckpointingMode stored, effective;
  };
  for (const Case& c :
       {Case{"selective", true, v1::AC_SELECTIVE, v1::AC_SELECTIVE},
        Case{"Full", true, v1::AC_FULL, v1::AC_FULL}, Case{"none", false, v1::AC_NONE, v1::AC_NONE},
        Case{"true", true, v1::AC_FULL, v1::AC_FULL},
        Case{"false", false, v1::AC_NONE, v1::AC_NONE}}) {
    v1::JobSpec spec = ParseOne(base + "fsdp: {activation_checkpointing: " + c.value + "}\n");
    EXPECT_EQ(spec.fsdp().activation_checkpointing(), c.on) << c.value;
    EXPECT_EQ(spec.fsdp().activation_checkpointing_mode(), c.stored) << c.value;
    EXPECT_EQ(ActivationCheckpointingOf(spec.fsdp()), c.effective) << c.value;
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << c.value << ": " << ValidateJobSpec(spec);
  }
  v1::JobSpec spec = ParseOne(base + "fsdp: {activation_checkpointing: selective}\n");
  ASSERT_TRUE(ApplySetOverride(&spec, "fsdp.activation_checkpointing=false").ok());
  EXPECT_EQ(ActivationCheckpointingOf(spec.fsdp()), v1::AC_NONE);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  // A gRPC client that sets only the mode gets the switch from it; a contradiction is refused.
  v1::JobSpec mode_only = ParseOne(base);
  mode_only.mutable_fsdp()->clear_activation_checkpointing();
  mode_only.mutable_fsdp()->set_activation_checkpointing_mode(v1::AC_NONE);
  ApplyDefaults(&mode_only);
  EXPECT_FALSE(mode_only.fsdp().activation_checkpointing());
  mode_only.mutable_fsdp()->set_activation_checkpointing(true);
  absl::Status s = ValidateJobSpec(mode_only);
  EXPECT_NE(s.message().find("fsdp.activation_checkpointing_mode AC_NONE contradicts "
                             "fsdp.activation_checkpointing true"),
            std::string::npos)
      << s;
}

TEST(JobSpecTest, JsonIsAcceptedToo) {
  v1::JobSpec spec = ParseOne(
      R"({"name": "j", "model": {"path": "/m"}, "data": {"train_path": "/d"},
          "training": {"lr": 0.001, "betas": [0.9, 0.95]}, "fsdp": {"sharding": "NO_SHARD"}})");
  EXPECT_EQ(spec.fsdp().sharding(), v1::NO_SHARD);
  EXPECT_DOUBLE_EQ(spec.training().betas(1), 0.95);
}

TEST(JobSpecTest, MultiDocumentAndListsAreBatches) {
  absl::StatusOr<std::vector<ParsedJob>> jobs =
      ParseJobDocuments("name: a\n---\nname: b\n---\n- name: c\n- name: a\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 4u);
  EXPECT_EQ((*jobs)[2].spec.name(), "c");
  // Same content twice gets distinct keys; the same file parsed again gets the same keys.
  EXPECT_NE((*jobs)[0].idempotency_key, (*jobs)[3].idempotency_key);
  absl::StatusOr<std::vector<ParsedJob>> again =
      ParseJobDocuments("name: a\n---\nname: b\n---\n- name: c\n- name: a\n");
  for (size_t i = 0; i < jobs->size(); ++i) {
    EXPECT_EQ((*jobs)[i].idempotency_key, (*again)[i].idempotency_key);
  }
  // Formatting and comments do not change the key; content does.
  absl::StatusOr<std::vector<ParsedJob>> reformatted = ParseJobDocuments("{name: a}  # comment");
  EXPECT_EQ((*reformatted)[0].idempotency_key, (*jobs)[0].idempotency_key);
}

TEST(JobSpecTest, ADependentsKeyCoversItsParentsInTheFile) {
  auto keys = [](const std::string& text) {
    absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    std::vector<std::string> out;
    for (const ParsedJob& j : *jobs) out.push_back(j.idempotency_key);
    return out;
  };
  const std::string child = "name: eval\ndepends_on: [{job: tune}]\n";
  const std::vector<std::string> first = keys("name: tune\ntraining: {lr: 1.0e-4}\n---\n" + child);
  EXPECT_EQ(keys("name: tune\ntraining: {lr: 1.0e-4}\n---\n" + child), first) << "the same file, the same jobs";
  const std::vector<std::string> changed = keys("name: tune\ntraining: {lr: 3.0e-4}\n---\n" + child);
  EXPECT_NE(changed[0], first[0]);
  EXPECT_NE(changed[1], first[1]) << "the same text depending on another parent is another job";
  // A point of a sweep document counts as that document.
  const std::string sweep = "name: tune\nsweep: {parameters: {training.lr: [1.0e-4, 3.0e-4]}}\n---\n";
  const std::string point_child = "name: eval\ndepends_on: [{job: tune-1}]\n";
  EXPECT_NE(keys(sweep + point_child)[1], keys(point_child)[0]);
  // Without a parent in the file the key is the content's alone.
  EXPECT_EQ(keys("name: other\n---\n" + child)[1], keys(child)[0]);
}

struct ParseCase {
  std::string yaml;
  std::string expected;  // substring of the error
};

class ParseErrorTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ParseErrorTest, NamesTheField) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(GetParam().yaml);
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(jobs.status().message().find(GetParam().expected), std::string::npos)
      << jobs.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseErrorTest,
    ::testing::Values(
        ParseCase{"name: x\ntraining: {lrr: 1}", "training.lrr: unknown field (did you mean lr?)"},
        ParseCase{"nmae: x", "nmae: unknown field (did you mean name?)"},
        ParseCase{"name: x\ntraining:\n\tlr: 0.001\n",
                  "line 3: tabs are not allowed for indentation; indent with spaces"},
        ParseCase{"name: x\ntrain_path: /d\n",
                  "train_path: unknown field (did you mean data.train_path?)"},
        ParseCase{"name: x\ntraining: {learning_rate: 1e-4}",
                  "training.learning_rate: unknown field (did you mean lr?)"},
        ParseCase{"name: x\nlearning_rate: 1e-4",
                  "learning_rate: unknown field (did you mean training.lr?)"},
        ParseCase{"training: {micro_batch_size: four}",
                  "training.micro_batch_size: expected an integer"},
        ParseCase{"training: {seq_len: 99999999999}", "training.seq_len: expected an integer"},
        ParseCase{"fsdp: {sharding: FULL}", "fsdp.sharding: unknown value 'FULL'"},
        ParseCase{"fsdp: {activation_checkpointing: maybe}",
                  "fsdp.activation_checkpointing: expected true, false, full, selective, none, got "
                  "'maybe'"},
        ParseCase{"training: {lr: .nan}", "training.lr: expected a finite number"},
        ParseCase{"training: 5", "training: expected a mapping"},
        ParseCase{"training: {betas: 0.9}", "training.betas: expected a list"},
        ParseCase{"labels: [a, b]", "labels: expected a mapping"},
        ParseCase{"name: [a]", "name: expected a scalar"},
        ParseCase{"name: x\nname: y", "name: given more than once"},
        ParseCase{"name: a\n---\nname: b\nbogus: 1", "document 2: bogus: unknown field"},
        ParseCase{"name: 'unterminated", "cannot parse job file"},
        ParseCase{"", "contains no job spec"},
        ParseCase{"42", "document: expected a mapping"},
        // yaml-cpp makes no progress past a top-level flow collection followed by more
        // text and would return the same empty document forever (found by fuzzing).
        ParseCase{"{},", "line 1, column 3: unexpected text here"},
        ParseCase{"[1],x", "line 1, column 4: unexpected text here"},
        ParseCase{"name: a\n---\n{name: b},\n", "line 3, column 10: unexpected text here"}));

TEST(JobSpecTest, NodeCountIsCappedBeforeAnyNodeIsBuilt) {
  std::string list = "name: x\nlabels: [";
  for (int64_t i = 0; i < kMaxYamlNodes; ++i) list += "0,";
  list += "0]\n";
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(list);
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(jobs.status().message().find("more than 100000 YAML nodes"), std::string::npos)
      << jobs.status().message();
  // A full batch of ordinary specs stays well inside the cap.
  std::string batch;
  for (int i = 0; i < kMaxBatchSize; ++i) {
    batch += "- name: job\n  labels: {team: a, project: b}\n  training: {lr: 1e-4, betas: [0.9, 0.95]}\n";
  }
  absl::StatusOr<std::vector<ParsedJob>> ok = ParseJobDocuments(batch);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(), static_cast<size_t>(kMaxBatchSize));
}

struct ValidateCase {
  std::string yaml;
  std::string expected;
};

TEST(JobSpecTest, EachPresetTakesRowsUpToItsOwnMaxPositions) {
  // max_position_embeddings of the released configs: a Llama 3.1 job may train 32K rows,
  // which Llama-2's 4,096 refuses (no instance type: no memory fit in the way).
  for (const auto& [preset, longest] : std::vector<std::pair<std::string, int>>{
           {"llama2-7b", 4096}, {"llama3.1-8b", 131072}, {"llama3.2-1b", 131072},
           {"mistral-7b", 32768}, {"qwen2.5-72b", 32768}}) {
    SCOPED_TRACE(preset);
    v1::JobSpec spec = ParseOne(absl::StrCat("name: p\nmodel: {preset: ", preset,
                                             ", tokenizer: /t}\ndata: {train_path: /d}\n"
                                             "training: {seq_len: ", longest, "}\n"));
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    spec.mutable_training()->set_seq_len(longest + 1);
    EXPECT_NE(ValidateJobSpec(spec).message().find(absl::StrCat("training.seq_len must be <= ", longest)),
              std::string::npos)
        << ValidateJobSpec(spec);
  }
}

class ValidateErrorTest : public ::testing::TestWithParam<ValidateCase> {};

TEST_P(ValidateErrorTest, NamesTheField) {
  // A valid base spec with the case's fields merged over it.
  absl::StatusOr<std::vector<ParsedJob>> jobs =
      ParseJobDocuments("name: ok\nmodel: {path: /m}\ndata: {train_path: /d}\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  std::vector<std::string> errors;
  MergeYamlIntoMessage(YAML::Load(GetParam().yaml), "", &spec, &errors);
  ASSERT_TRUE(errors.empty()) << errors[0];
  ApplyDefaults(&spec);
  absl::Status status = ValidateJobSpec(spec);
  ASSERT_FALSE(status.ok()) << GetParam().yaml;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(GetParam().expected), std::string::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(
    Table, ValidateErrorTest,
    ::testing::Values(
        ValidateCase{"resources: {nodes: 0}", "resources.nodes must be >= 1"},
        ValidateCase{"resources: {nodes: -2}", "resources.nodes must be >= 1"},
        ValidateCase{"resources: {gpus_per_node: 0}", "resources.gpus_per_node must be >= 1"},
        ValidateCase{"resources: {nodes: 2, gpus_per_node: 8}\n"
                     "fsdp: {sharding: HYBRID_SHARD, hybrid_shard_group_size: 3}",
                     "fsdp.hybrid_shard_group_size (3) must divide the world size (16)"},
        ValidateCase{"fsdp: {hybrid_shard_group_size: 2}",
                     "fsdp.hybrid_shard_group_size is only valid with sharding HYBRID_SHARD"},
        ValidateCase{"training: {lr: 0}", "training.lr must be > 0"},
        ValidateCase{"training: {lr: -1e-4}", "training.lr must be > 0"},
        ValidateCase{"training: {betas: [0.9]}", "training.betas must have 2 values"},
        ValidateCase{"training: {betas: [0.9, 1.0]}", "training.betas[1] must be in [0, 1)"},
        ValidateCase{"training: {eps: 0}", "training.eps must be > 0"},
        ValidateCase{"training: {micro_batch_size: 0}", "training.micro_batch_size must be >= 1"},
        ValidateCase{"training: {grad_accum: 0}", "training.grad_accum must be >= 1"},
        ValidateCase{"training: {seq_len: 1}", "training.seq_len must be >= 2"},
        ValidateCase{
            "{model: {path: '', preset: tiny, tokenizer: /t}, training: {seq_len: 100000}}",
            "training.seq_len must be <= 4096, preset tiny's max_position_embeddings "
            "(got 100000)"},
        ValidateCase{
            "{model: {path: '', preset: mistral-7b, tokenizer: /t}, training: {seq_len: 32769}}",
            "training.seq_len must be <= 32768, preset mistral-7b's max_position_embeddings "
            "(got 32769)"},
        ValidateCase{
            "{model: {path: '', preset: qwen2.5-7b, tokenizer: /t}, training: {seq_len: 65536}}",
            "training.seq_len must be <= 32768, preset qwen2.5-7b's max_position_embeddings"},
        ValidateCase{"training: {seq_len: 200000}",
                     "training.seq_len must be <= 131072 (got 200000)"},
        ValidateCase{"resources: {nodes: 5000}", "resources.nodes must be <= 4096 (got 5000)"},
        ValidateCase{"peft: {method: lora, r: 5000}", "peft.r must be in [1, 4096] (got 5000)"},
        ValidateCase{"peft: {method: qlora, r: 5000}", "peft.r must be in [1, 4096] (got 5000)"},
        ValidateCase{"peft: {method: qlora, target_modules: [lm_head]}",
                     "peft.target_modules[0] unknown module \"lm_head\""},
        ValidateCase{"peft: {method: dora}", "peft.method must be \"lora\" or \"qlora\""},
        ValidateCase{"training: {epochs: 0}", "training.epochs must be >= 1"},
        ValidateCase{"training: {max_steps: -1}", "training.max_steps must be >= 0"},
        ValidateCase{"training: {weight_decay: -0.1}", "training.weight_decay must be >= 0"},
        ValidateCase{"training: {lr_schedule: {type: step, gamma: 1.5}}",
                     "training.lr_schedule.gamma must be in (0, 1]"},
        ValidateCase{"training: {log_every: 0}", "training.log_every must be >= 1"},
        ValidateCase{"training: {eval_every_steps: -1}", "training.eval_every_steps must be >= 0"},
        ValidateCase{"training: {eval_every_steps: 10}",
                     "training.eval_every_steps needs data.eval_path"},
        ValidateCase{
            "{data: {train_path: /d, eval_path: /e}, training: {early_stopping: {patience: 3}}}",
            "training.early_stopping needs training.eval_every_steps"},
        ValidateCase{"{data: {train_path: /d, eval_path: /e}, training: {eval_every_steps: 5, "
                     "early_stopping: {patience: -1}}}",
                     "training.early_stopping.patience must be >= 0"},
        ValidateCase{"{data: {train_path: /d, eval_path: /e}, training: {eval_every_steps: 5, "
                     "early_stopping: {patience: 3, min_delta: -0.1}}}",
                     "training.early_stopping.min_delta must be in [0, 1e6)"},
        ValidateCase{"output: {export: best, export_dir: /x}",
                     "output.export best needs training.eval_every_steps"},
        ValidateCase{"{data: {train_path: /d, eval_path: /e}, training: {eval_every_steps: 5}, "
                     "output: {export: best}}",
                     "output.export best needs output.export_dir"},
        ValidateCase{"output: {gguf: {dtype: q8_0}}", "output.gguf needs output.export_dir"},
        ValidateCase{"output: {export_dir: /x, gguf: {}}", "output.gguf.dtype is required: f16, bf16 or q8_0"},
        ValidateCase{"{peft: {method: lora}, output: {export_dir: /x, gguf: {dtype: f16}}}",
                     "output.gguf with peft needs output.merge: true"},
        ValidateCase{"{model: {path: '', preset: tiny}, data: {train_path: /d, format: tokens}, "
                     "output: {export_dir: /x, gguf: {dtype: bf16}}}",
                     "output.gguf needs a tokenizer (model.tokenizer)"},
        ValidateCase{"name: ''", "name is required"},
        ValidateCase{"name: 'has space'", "name may contain only"},
        ValidateCase{"priority: 5000", "priority must be in [-1000, 1000]"},
        ValidateCase{"queue: 'a b'", "queue must be 1..63 characters"},
        ValidateCase{"model: {path: /m, preset: tiny}", "must set exactly one of model.path"},
        ValidateCase{"model: {path: '', preset: llama3}", "model.preset 'llama3' is not one of"},
        ValidateCase{"data: {train_path: ''}", "data.train_path is required"},
        ValidateCase{"data: {train_path: /d, chat_template: llama3}",
                     "data.chat_template applies only to data.format CHAT"},
        ValidateCase{"data: {train_path: /d, train_on: all}",
                     "data.train_on applies only to data.format CHAT"},
        ValidateCase{"training: {objective: ppo}", "training.objective 'ppo' is not one of sft, dpo"},
        ValidateCase{"data: {train_path: /d, format: preference}",
                     "data.format PREFERENCE data needs training.objective: dpo"},
        ValidateCase{"data: {train_path: /d, format: preference}\ntraining: {objective: dpo, batching: padding}",
                     "peft.method training.objective dpo needs peft.method lora"},
        ValidateCase{"data: {train_path: /d, format: preference}\ntraining: {objective: dpo}\n"
                     "peft: {method: lora}",
                     "training.batching training.objective dpo needs PADDING"},
        ValidateCase{"data: {train_path: /d, format: preference}\n"
                     "training: {objective: dpo, batching: padding, dpo: {beta: 0}}\npeft: {method: lora}",
                     "training.dpo.beta must be in (0, 100] (got 0)"},
        ValidateCase{"training: {dpo: {beta: 0.5}}", "training.dpo applies only to training.objective dpo"},
        ValidateCase{
            "data: {train_path: /d, format: chat, chat_template: vicuna}",
            "data.chat_template 'vicuna' is not one of model, llama2, llama3, chatml, mistral"},
        ValidateCase{"labels: {'bad key!': x}", "labels.bad key! key must be"},
        ValidateCase{"resources: {nodes: 2, min_nodes: 3}", "resources.min_nodes (3) must be <="},
        ValidateCase{"resources: {nodes: 2, max_nodes: 1}", "resources.max_nodes (1) must be >="},
        ValidateCase{"resources: {nodes: 2, max_nodes: 3}",
                     "resources.max_nodes (3) above resources.nodes (2) is not supported"},
        ValidateCase{"resources: {nodes: 3, min_nodes: 2}",
                     "training.global_batch_size is required for an elastic job"},
        ValidateCase{"resources: {elastic_cooldown_seconds: -1}",
                     "resources.elastic_cooldown_seconds must be >= 0"},
        ValidateCase{
            "{training: {global_batch_size: 12, micro_batch_size: 2}, resources: {nodes: 5}}",
            "training.global_batch_size (12) must be a multiple of micro_batch_size (2) x ranks (5 "
            "= nodes 5 x gpus_per_node 1); world sizes that work: 1, 2, 3, 6"},
        ValidateCase{"{training: {global_batch_size: 12, micro_batch_size: 2, grad_accum: 3}, "
                     "resources: {nodes: 3}}",
                     "training.grad_accum (3) must equal global_batch_size / (micro_batch_size x "
                     "ranks) = 2"},
        ValidateCase{"{training: {global_batch_size: 12, micro_batch_size: 2}, resources: {nodes: "
                     "6, min_nodes: 4}}",
                     "it is not for 4, 5 nodes"},
        ValidateCase{"{training: {global_batch_size: 0}}",
                     "training.global_batch_size must be >= 1"},
        ValidateCase{"run_policy: {max_restarts: -1}", "run_policy.max_restarts must be >= 0"},
        ValidateCase{"run_policy: {stall_timeout_seconds: 0}",
                     "run_policy.stall_timeout_seconds must be >= 1"},
        ValidateCase{"checkpoint: {every_steps: -5}", "checkpoint.every_steps must be >= 0"},
        ValidateCase{"output: {max_shard_size_mb: 0}", "output.max_shard_size_mb must be >= 1"},
        ValidateCase{"fsdp: {max_inflight_all_gathers: 0}",
                     "fsdp.max_inflight_all_gathers must be >= 1"}));

// Chat data with a renderer and the tokens with loss named in lower case, as users write them.
TEST(JobSpecTest, ChatDataIsAccepted) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(
      "name: ok\nmodel: {path: /m}\ndata: {train_path: /d, format: chat, chat_template: chatml, "
      "train_on: "
      "last_assistant}\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(spec.data().format(), v1::CHAT);
  EXPECT_EQ(spec.data().chat_template(), "chatml");
  EXPECT_EQ(spec.data().train_on(), v1::LAST_ASSISTANT);
  // Unwritten: the model's template and the assistant turns.
  jobs = ParseJobDocuments("name: ok\nmodel: {path: /m}\ndata: {train_path: /d, format: CHAT}\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(spec.data().chat_template(), "model");
  EXPECT_EQ(spec.data().train_on(), v1::ASSISTANT);
}

// A GGUF beside the export: the dtype by name in any case; with LoRA when merged.
TEST(JobSpecTest, GgufExportIsAccepted) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(
      "name: g\nmodel: {path: /m}\ndata: {train_path: /d}\npeft: {method: lora}\n"
      "output: {export_dir: /x, merge: true, gguf: {dtype: Q8_0}}\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(spec.output().gguf().dtype(), v1::GgufSpec::Q8_0);
  spec.mutable_output()->mutable_gguf()->set_dtype(static_cast<v1::GgufSpec::Type>(9));
  EXPECT_NE(ValidateJobSpec(spec).message().find("output.gguf.dtype must be F16, BF16 or Q8_0"), std::string::npos);
}

// Evaluation every N steps with early stopping and the best export: accepted with an eval
// set; export defaults to LAST and the metric to EVAL_LOSS.
TEST(JobSpecTest, EarlyStoppingAndExportBestAreAccepted) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(
      "name: es\nmodel: {path: /m}\ndata: {train_path: /d, eval_path: /e}\n"
      "training: {eval_every_steps: 50, early_stopping: {patience: 3, min_delta: 0.01}}\n"
      "output: {export_dir: /x, export: best}\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(spec.training().eval_every_steps(), 50);
  EXPECT_EQ(spec.training().early_stopping().patience(), 3);
  EXPECT_EQ(spec.training().early_stopping().metric(), v1::EVAL_LOSS);
  EXPECT_EQ(spec.output().export_(), v1::BEST);
  v1::JobSpec plain;
  ApplyDefaults(&plain);
  EXPECT_EQ(plain.output().export_(), v1::LAST);
  EXPECT_FALSE(plain.training().has_early_stopping());
}

TEST(JobSpecTest, EveryViolationIsReportedAtOnce) {
  v1::JobSpec spec = ParseOne(
      "name: x\nmodel: {path: /m}\ndata: {train_path: /d}\n"
      "resources: {nodes: 0}\ntraining: {lr: -1}\n");
  absl::Status status = ValidateJobSpec(spec, "jobs[3].spec.");
  EXPECT_NE(status.message().find("jobs[3].spec.resources.nodes must be >= 1"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("jobs[3].spec.training.lr must be > 0"), std::string::npos)
      << status.message();
}

TEST(JobSpecTest, SetOverride) {
  v1::JobSpec spec = ParseOne(kValid);
  ASSERT_TRUE(ApplySetOverride(&spec, "training.lr=3e-4").ok());
  EXPECT_DOUBLE_EQ(spec.training().lr(), 3e-4);
  ASSERT_TRUE(ApplySetOverride(&spec, "fsdp.sharding=no_shard").ok());
  EXPECT_EQ(spec.fsdp().sharding(), v1::NO_SHARD);
  ASSERT_TRUE(ApplySetOverride(&spec, "training.betas=[0.8, 0.9]").ok());
  EXPECT_DOUBLE_EQ(spec.training().betas(0), 0.8);
  absl::Status bad = ApplySetOverride(&spec, "training.lrr=1");
  EXPECT_NE(bad.message().find("training.lrr: unknown field"), std::string::npos) << bad;
  EXPECT_DOUBLE_EQ(spec.training().lr(), 3e-4);  // unchanged on error
  EXPECT_FALSE(ApplySetOverride(&spec, "novalue").ok());
}

TEST(JobSpecTest, YamlAndJsonRoundTrip) {
  v1::JobSpec spec = ParseOne(kValid);
  v1::JobSpec from_yaml = ParseOne(MessageToYaml(spec));
  EXPECT_EQ(from_yaml.SerializeAsString(), spec.SerializeAsString()) << MessageToYaml(spec);
  v1::JobSpec from_json = ParseOne(MessageToJson(spec));
  EXPECT_EQ(from_json.SerializeAsString(), spec.SerializeAsString()) << MessageToJson(spec);
}

TEST(JobSpecTest, YamlKeepsExplicitZeros) {
  // Zeros the user wrote are not defaults: they survive MessageToYaml and a second parse.
  v1::JobSpec spec = ParseOne(
      "name: z\nmodel: {path: /m}\ndata: {train_path: /d}\ntraining: {seed: 0}\n"
      "run_policy: {max_restarts: 0, restart_backoff_seconds: 0}\n");
  const std::string yaml = MessageToYaml(spec);
  EXPECT_NE(yaml.find("seed: 0"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("max_restarts: 0"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("restart_backoff_seconds: 0"), std::string::npos) << yaml;
  v1::JobSpec again = ParseOne(yaml);  // ParseOne applies defaults again
  EXPECT_TRUE(again.training().has_seed());
  EXPECT_EQ(again.training().seed(), 0u);
  EXPECT_EQ(again.run_policy().max_restarts(), 0);
  EXPECT_EQ(again.run_policy().restart_backoff_seconds(), 0);
  EXPECT_EQ(again.SerializeAsString(), spec.SerializeAsString()) << yaml;

  // And what is unset stays unset: no field appears that the message does not have.
  absl::StatusOr<std::vector<ParsedJob>> raw = ParseJobDocuments("name: z\ntraining: {lr: 0.5}\n");
  ASSERT_TRUE(raw.ok()) << raw.status();
  const std::string sparse = MessageToYaml((*raw)[0].spec);
  EXPECT_EQ(sparse.find("seed"), std::string::npos) << sparse;
  EXPECT_EQ(sparse.find("max_restarts"), std::string::npos) << sparse;
  absl::StatusOr<std::vector<ParsedJob>> reparsed = ParseJobDocuments(sparse);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_EQ((*reparsed)[0].spec.SerializeAsString(), (*raw)[0].spec.SerializeAsString()) << sparse;
}

// A valid spec written in block style, seven lines; line 7 is `  lr: 2e-5`.
constexpr char kBlockSpec[] =
    "name: located\n"              // 1
    "model:\n"                     // 2
    "  path: /m\n"                 // 3
    "data:\n"                      // 4
    "  train_path: /d\n"           // 5
    "training:\n"                  // 6
    "  lr: 2e-5\n";                // 7

TEST(JobSpecPositions, UnknownFieldOnLine7IsReportedOnLine7) {
  std::string text = kBlockSpec;
  text.replace(text.find("lr: 2e-5"), 8, "lrr: 2e-5");
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text);
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(jobs.status().message().find("training.lrr: unknown field (did you mean lr?)"),
            std::string::npos) << jobs.status();
  std::vector<LocatedFieldViolation> v = LocatedFieldViolationsOf(jobs.status());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].violation.field(), "training.lrr");
  EXPECT_EQ(v[0].violation.description(), "unknown field (did you mean lr?)");
  EXPECT_EQ(v[0].position.line, 7);
  EXPECT_EQ(v[0].position.column, 3);
  ASSERT_EQ(FieldViolationsOf(jobs.status()).size(), 1u);  // the plain view agrees
}

TEST(JobSpecPositions, BadValueOnLine7IsReportedOnLine7) {
  std::string text = kBlockSpec;
  text.replace(text.find("lr: 2e-5"), 8, "lr: -1");
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ParsedJob& job = (*jobs)[0];
  ApplyDefaults(&job.spec);
  // The server's prefix for a single submission.
  absl::Status s = LocateFieldViolations(ValidateJobSpec(job.spec, "spec."), job.positions, "spec.");
  std::vector<LocatedFieldViolation> v = LocatedFieldViolationsOf(s);
  ASSERT_EQ(v.size(), 1u) << s;
  EXPECT_EQ(v[0].violation.field(), "spec.training.lr");
  EXPECT_EQ(v[0].position.line, 7);
  EXPECT_EQ(v[0].position.column, 3);
  EXPECT_EQ(s.message(), ValidateJobSpec(job.spec, "spec.").message());  // text unchanged

  // A type error in a value is placed at its field too.
  text.replace(text.find("lr: -1"), 6, "lr: fast");
  jobs = ParseJobDocuments(text);
  ASSERT_FALSE(jobs.ok());
  ASSERT_EQ(LocatedFieldViolationsOf(jobs.status()).size(), 1u);
  EXPECT_EQ(LocatedFieldViolationsOf(jobs.status())[0].position.line, 7);
}

TEST(JobSpecPositions, LaterDocumentsAreCountedFromTheStartOfTheFile) {
  const std::string text = std::string(kBlockSpec) +  // lines 1-7
                           "---\n"                     // 8
                           "name: second\n"            // 9
                           "model: {path: /m}\n"       // 10
                           "data: {train_path: /d}\n"  // 11
                           "resources:\n"              // 12
                           "  nodes: 0\n"              // 13
                           "---\n"                     // 14
                           "- name: third\n"           // 15
                           "  model: {path: /m}\n"     // 16
                           "  data: {train_path: /d}\n"  // 17
                           "  training: {betas: [0.9, 1.5]}\n";  // 18
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 3u);
  absl::Status batch = absl::OkStatus();
  std::vector<v1::FieldViolation> all;
  for (size_t i = 0; i < jobs->size(); ++i) {
    ApplyDefaults(&(*jobs)[i].spec);
    absl::Status s = ValidateJobSpec((*jobs)[i].spec, absl::StrCat("jobs[", i, "].spec."));
    for (v1::FieldViolation& f : FieldViolationsOf(s)) all.push_back(std::move(f));
  }
  // One status for the batch, placed document by document.
  batch = WithFieldViolations(absl::InvalidArgumentError("batch"), all);
  for (size_t i = 0; i < jobs->size(); ++i) {
    batch = LocateFieldViolations(batch, (*jobs)[i].positions, absl::StrCat("jobs[", i, "].spec."));
  }
  std::vector<LocatedFieldViolation> v = LocatedFieldViolationsOf(batch);
  ASSERT_EQ(v.size(), 2u) << batch;
  EXPECT_EQ(v[0].violation.field(), "jobs[1].spec.resources.nodes");
  EXPECT_EQ(v[0].position.line, 13);
  EXPECT_EQ(v[0].position.column, 3);
  EXPECT_EQ(v[1].violation.field(), "jobs[2].spec.training.betas[1]");
  EXPECT_EQ(v[1].position.line, 18);
  EXPECT_EQ(v[1].position.column, 27);

  // Parse problems in a later document are placed in the file, too.
  absl::StatusOr<std::vector<ParsedJob>> bad =
      ParseJobDocuments(std::string(kBlockSpec) + "---\nname: b\nbogus: 1\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("document 2: bogus: unknown field"), std::string::npos)
      << bad.status();
  std::vector<LocatedFieldViolation> p = LocatedFieldViolationsOf(bad.status());
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].violation.field(), "bogus");
  EXPECT_EQ(p[0].position.line, 10);
}

TEST(JobSpecPositions, UnwrittenFieldsPointAtTheirSection) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(kBlockSpec);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  const FieldPositions& at = (*jobs)[0].positions;
  EXPECT_EQ(at.Find("training.lr").line, 7);
  EXPECT_EQ(at.Find("training.lr_schedule.gamma").line, 6);  // only training: is written
  EXPECT_EQ(at.Find("data.train_path").line, 5);
  EXPECT_EQ(at.Find("resources.nodes").line, 0);              // nothing of it is written
  EXPECT_EQ(at.Find("").line, 0);
}

TEST(JobSpecPositions, PlainViolationsReplaceStalePositions) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments("nmae: x\n");
  ASSERT_FALSE(jobs.ok());
  ASSERT_EQ(LocatedFieldViolationsOf(jobs.status())[0].position.line, 1);
  v1::FieldViolation other;
  other.set_field("spec.name");
  absl::Status s = WithFieldViolations(jobs.status(), {other});
  std::vector<LocatedFieldViolation> v = LocatedFieldViolationsOf(s);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].violation.field(), "spec.name");
  EXPECT_EQ(v[0].position.line, 0);
}

TEST(JobSpecTest, IdempotencyKeyLimits) {
  EXPECT_TRUE(ValidateIdempotencyKey("abc-123", "idempotency_key").ok());
  EXPECT_FALSE(ValidateIdempotencyKey(std::string(200, 'a'), "idempotency_key").ok());
  EXPECT_FALSE(ValidateIdempotencyKey("tab\there", "idempotency_key").ok());
}

TEST(JobSpecTest, Sha256) {
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace llamafleet

namespace llamafleet {
namespace {

// Memory fit against the named instance type: refusals name the estimate and what would fit.
constexpr char kFitBase[] = R"(
name: fit
model: {preset: llama2-70b, tokenizer: /fsx/tok/tokenizer.model}
data: {train_path: /fsx/data/train.jsonl}
training: {max_steps: 10, micro_batch_size: 1}
resources: {nodes: 2, gpus_per_node: 8, instance_type: p5.48xlarge}
)";

TEST(JobSpecGlobalBatch, GradAccumIsDerivedAndElasticRangesAccepted) {
  v1::JobSpec spec = ParseOne(R"(
name: elastic
model: {preset: tiny, tokenizer: /t/tokenizer.model}
data: {train_path: /d.jsonl}
training: {global_batch_size: 12, micro_batch_size: 2}
resources: {nodes: 3, min_nodes: 2, max_nodes: 3}
)");
  EXPECT_EQ(spec.training().grad_accum(), 2);  // 12 / (2 x 3)
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  v1::JobSpec again = spec;
  ApplyDefaults(&again);
  EXPECT_EQ(again.SerializeAsString(), spec.SerializeAsString());
}

TEST(JobSpecMemoryFit, Llama70bNoShardOnP5IsRefusedWithTheEstimateInGiB) {
  v1::JobSpec spec = ParseOne(kFitBase);
  spec.mutable_fsdp()->set_sharding(v1::NO_SHARD);
  absl::Status s = ValidateJobSpec(spec);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string m(s.message());
  EXPECT_NE(m.find("resources.instance_type p5.48xlarge: estimated 1292.5 GiB per GPU"), std::string::npos) << m;
  EXPECT_NE(m.find("does not fit its 79.6 GiB H100 80GB GPUs"), std::string::npos) << m;
  ASSERT_EQ(FieldViolationsOf(s).size(), 1u);
  EXPECT_EQ(FieldViolationsOf(s)[0].field(), "resources.instance_type");
  std::optional<v1::MemoryEstimate> e = EstimateJobMemory(spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->world_size(), 16);
  // memory_estimate_test's reference figure (1387827152486) + packing's document mask,
  // 1 x 4096^2 x 2 bytes, and the 10% workspace on it.
  EXPECT_EQ(e->total_bytes(), 1387864062361);
}

TEST(JobSpecMemoryFit, Llama7bFullShardOn2x8IsAcceptedAndEstimated) {
  v1::JobSpec spec = ParseOne(kFitBase);
  spec.mutable_model()->set_preset("llama2-7b");
  spec.mutable_training()->set_micro_batch_size(4);
  spec.mutable_fsdp()->set_sharding(v1::FULL_SHARD);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  std::optional<v1::MemoryEstimate> e = EstimateJobMemory(spec);
  ASSERT_TRUE(e.has_value());
  // memory_estimate_test's 22487410073 + packing's document mask (4 x 4096^2 x 2 bytes)
  // and the 10% workspace on it.
  EXPECT_EQ(e->total_bytes(), 22635049574);
  EXPECT_EQ(e->peak_phase(), "backward");
}

TEST(JobSpecMemoryFit, RefusalSaysWhatWouldFit) {
  // 13B NO_SHARD without checkpointing on 40 GB A100s: FULL_SHARD would fit.
  v1::JobSpec spec = ParseOne(kFitBase);
  spec.mutable_model()->set_preset("llama2-13b");
  spec.mutable_resources()->set_instance_type("p4de.24xlarge");
  spec.mutable_fsdp()->set_sharding(v1::NO_SHARD);
  spec.mutable_fsdp()->set_activation_checkpointing(false);
  absl::Status s = ValidateJobSpec(spec);
  ASSERT_FALSE(s.ok());
  const std::string m(s.message());
  EXPECT_NE(m.find("would fit: fsdp.sharding FULL_SHARD ("), std::string::npos) << m;
  EXPECT_NE(m.find("nodes x 8 GPUs with FULL_SHARD and activation checkpointing"), std::string::npos) << m;
}

TEST(JobSpecMemoryFit, QloraFitsSeventyBOnOneH100AndSevenBOnA24GbGpu) {
  auto example = [](const char* name) {
    std::ifstream in(absl::StrCat(LLAMAFLEET_EXAMPLES_DIR, "/", name));
    return ParseOne(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  };
  for (const char* name : {"llama2-70b-qlora-1gpu.yaml", "llama2-7b-qlora-24gb.yaml"}) {
    SCOPED_TRACE(name);
    const v1::JobSpec spec = example(name);
    EXPECT_EQ(spec.peft().method(), "qlora");
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    std::optional<v1::MemoryEstimate> e = EstimateJobMemory(spec);
    ASSERT_TRUE(e.has_value());
    std::printf("%s: %.1f GiB per GPU (parameters %.1f GiB)\n", name, e->total_bytes() / 1073741824.0,
                e->parameters_bytes() / 1073741824.0);
  }
  // The 70B job as LoRA (a bf16 base) or as a full finetune does not fit its one GPU; the
  // refusal names QLoRA.
  v1::JobSpec lora = example("llama2-70b-qlora-1gpu.yaml");
  lora.mutable_peft()->set_method("lora");
  EXPECT_NE(std::string(ValidateJobSpec(lora).message()).find("peft.method qlora on all seven projections (55.4 GiB)"),
            std::string::npos)
      << ValidateJobSpec(lora);
  v1::JobSpec full = example("llama2-70b-qlora-1gpu.yaml");
  full.clear_peft();
  absl::Status s = ValidateJobSpec(full);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("peft.method qlora on all seven projections (53.7 GiB)"),
            std::string::npos)
      << s;
}

TEST(JobSpecMemoryFit, MoreGpusPerNodeThanTheInstanceHasIsRefused) {
  v1::JobSpec spec = ParseOne(kFitBase);
  spec.mutable_resources()->set_gpus_per_node(16);
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_NE(std::string(s.message()).find("resources.gpus_per_node (16) exceeds the 8 GPUs of p5.48xlarge"),
            std::string::npos)
      << s;
}

TEST(JobSpecMemoryFit, ModelPathAndUnknownInstanceTypesAreNotEstimatedHere) {
  v1::JobSpec spec = ParseOne(kFitBase);
  spec.mutable_resources()->set_instance_type("my-site-gpu");
  spec.mutable_fsdp()->set_sharding(v1::NO_SHARD);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());  // the scheduler checks the real workers
  spec.mutable_model()->clear_preset();
  spec.mutable_model()->set_path("/fsx/models/llama");
  EXPECT_FALSE(EstimateJobMemory(spec).has_value());
}

}  // namespace
}  // namespace llamafleet
