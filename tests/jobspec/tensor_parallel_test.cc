// The parallelism block: tensor_parallel's rules (each refusal names the field and the
// degrees that would do), the data-parallel world it leaves for the batch rules, and its
// memory estimate, with the 70B example on 4 x p5.48xlarge.
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "jobspec/jobspec.h"
#include "tests/testing/spec_builder.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

// A valid 7B job on 2 x 8 ranks with the case's YAML merged over it, defaults applied.
v1::JobSpec Spec(const std::string& overrides) {
  return testing::SpecBuilder("tp")
      .Preset("llama2-7b")
      .Tokenizer("")
      .TrainPath("/d.jsonl")
      .Format(v1::TOKENS)
      .Nodes(2, 8)
      .Yaml(overrides)
      .WithDefaults();
}

// The one violation of `spec`: its field and its line of the status message.
void ExpectOnly(const v1::JobSpec& spec, const std::string& field, const std::string& line) {
  const absl::Status s = ValidateJobSpec(spec);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), line);
  ASSERT_EQ(FieldViolationsOf(s).size(), 1u) << s;
  EXPECT_EQ(FieldViolationsOf(s)[0].field(), field);
}

TEST(TensorParallel, UnsetIsOneAndAnEmptyBlockIsDroppedByTheDefaults) {
  v1::JobSpec spec = Spec("{}");
  EXPECT_EQ(TensorParallelOf(spec), 1);
  EXPECT_FALSE(spec.has_parallelism());
  v1::JobSpec empty = Spec("parallelism: {}");
  EXPECT_FALSE(empty.has_parallelism());
  EXPECT_TRUE(ValidateJobSpec(empty).ok()) << ValidateJobSpec(empty);
  v1::JobSpec two = Spec("parallelism: {tensor_parallel: 2}");
  EXPECT_EQ(TensorParallelOf(two), 2);
  EXPECT_TRUE(ValidateJobSpec(two).ok()) << ValidateJobSpec(two);
  // Written back and read again unchanged; --set reaches it as any other field.
  v1::JobSpec again = Spec(MessageToYaml(two));
  EXPECT_EQ(again.SerializeAsString(), two.SerializeAsString()) << MessageToYaml(two);
  ASSERT_TRUE(ApplySetOverride(&two, "parallelism.tensor_parallel=4").ok());
  EXPECT_EQ(TensorParallelOf(two), 4);
  ASSERT_TRUE(ApplySetOverride(&two, "parallelism.tensorParallel=8").ok());
  EXPECT_EQ(TensorParallelOf(two), 8);
  EXPECT_TRUE(ValidateJobSpec(two).ok()) << ValidateJobSpec(two);
}

TEST(TensorParallel, BelowOneIsRefusedEvenWhenWrittenAsZero) {
  ExpectOnly(Spec("parallelism: {tensor_parallel: 0}"), "parallelism.tensor_parallel",
             "parallelism.tensor_parallel must be >= 1 (got 0)");
  ExpectOnly(Spec("parallelism: {tensor_parallel: -2}"), "parallelism.tensor_parallel",
             "parallelism.tensor_parallel must be >= 1 (got -2)");
}

TEST(TensorParallel, MustDivideTheNodeAndThePresetsShapeAndSaysWhichDegreesWould) {
  ExpectOnly(Spec("parallelism: {tensor_parallel: 3}"), "parallelism.tensor_parallel",
             "parallelism.tensor_parallel (3) must divide resources.gpus_per_node 8, the model's 32 attention "
             "heads, 32 KV heads, 11008 MLP width and 32000 vocabulary (1, 2, 4, 8 would)");
  // A group never crosses a node: 16 ranks on 2 nodes is not one group of 16.
  ExpectOnly(Spec("parallelism: {tensor_parallel: 16}"), "parallelism.tensor_parallel",
             "parallelism.tensor_parallel (16) must divide resources.gpus_per_node 8, the model's 32 attention "
             "heads, 32 KV heads, 11008 MLP width and 32000 vocabulary (1, 2, 4, 8 would)");
  // GQA: tiny-gqa has 2 KV heads, so 4 ranks of a 4-GPU node cannot split them.
  ExpectOnly(Spec("model: {preset: tiny-gqa}\nresources: {gpus_per_node: 4}\nparallelism: {tensor_parallel: 4}"),
             "parallelism.tensor_parallel",
             "parallelism.tensor_parallel (4) must divide resources.gpus_per_node 4, the model's 4 attention heads, "
             "2 KV heads, 176 MLP width and 32000 vocabulary (1, 2 would)");
  // 70B: 64 heads, 8 KV heads; every degree of an 8-GPU node works.
  EXPECT_TRUE(ValidateJobSpec(Spec("model: {preset: llama2-70b}\nparallelism: {tensor_parallel: 8}")).ok());
}

TEST(TensorParallel, WithModelPathOnlyTheResourcesAreKnownHere) {
  ExpectOnly(Spec("model: {preset: '', path: /m}\nparallelism: {tensor_parallel: 3}"), "parallelism.tensor_parallel",
             "parallelism.tensor_parallel (3) must divide resources.gpus_per_node 8 (1, 2, 4, 8 would); it must "
             "also divide the model's heads, KV heads, MLP width and vocabulary (config.json)");
  EXPECT_TRUE(ValidateJobSpec(Spec("model: {preset: '', path: /m}\nparallelism: {tensor_parallel: 8}")).ok());
}

TEST(TensorParallel, MustDivideTheHybridShardGroup) {
  ExpectOnly(Spec("fsdp: {sharding: HYBRID_SHARD, hybrid_shard_group_size: 2}\nparallelism: {tensor_parallel: 4}"),
             "parallelism.tensor_parallel",
             "parallelism.tensor_parallel (4) must divide resources.gpus_per_node 8, fsdp.hybrid_shard_group_size 2, "
             "the model's 32 attention heads, 32 KV heads, 11008 MLP width and 32000 vocabulary (1, 2 would)");
  // The default group is the node, which every valid degree divides.
  EXPECT_TRUE(ValidateJobSpec(Spec("fsdp: {sharding: HYBRID_SHARD}\nparallelism: {tensor_parallel: 8}")).ok());
}

TEST(TensorParallel, LoraIsAllowed) {
  const v1::JobSpec spec = Spec("peft: {method: lora, r: 16, target_modules: [q_proj, o_proj, down_proj]}\n"
                                "parallelism: {tensor_parallel: 4}");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(TensorParallel, TheGlobalBatchCountsDataParallelRanks) {
  // 2 nodes x 8 GPUs / T 4 = 4 data-parallel ranks: 16 = 2 x 4 x grad_accum 2.
  const v1::JobSpec ok =
      Spec("training: {global_batch_size: 16, micro_batch_size: 2}\nparallelism: {tensor_parallel: 4}");
  EXPECT_EQ(ok.training().grad_accum(), 2);
  EXPECT_TRUE(ValidateJobSpec(ok).ok()) << ValidateJobSpec(ok);
  // Without tensor parallelism 16 ranks x micro 2 would need 32.
  EXPECT_FALSE(ValidateJobSpec(Spec("training: {global_batch_size: 16, micro_batch_size: 2}")).ok());
  ExpectOnly(Spec("training: {global_batch_size: 12, micro_batch_size: 2}\nparallelism: {tensor_parallel: 4}"),
             "training.global_batch_size",
             "training.global_batch_size (12) must be a multiple of micro_batch_size (2) x data-parallel ranks (4 = "
             "nodes 2 x gpus_per_node 8 / parallelism.tensor_parallel 4); data-parallel world sizes that work: 1, 2, "
             "3, 6");
  ExpectOnly(Spec("training: {global_batch_size: 12, micro_batch_size: 8}\nparallelism: {tensor_parallel: 2}"),
             "training.global_batch_size",
             "training.global_batch_size (12) must be a multiple of micro_batch_size (8) x data-parallel ranks (8 = "
             "nodes 2 x gpus_per_node 8 / parallelism.tensor_parallel 2); no data-parallel world size works with "
             "micro_batch_size 8");
  ExpectOnly(Spec("training: {global_batch_size: 16, micro_batch_size: 2, grad_accum: 1}\n"
                  "parallelism: {tensor_parallel: 4}"),
             "training.grad_accum",
             "training.grad_accum (1) must equal global_batch_size / (micro_batch_size x data-parallel ranks) = 2, or "
             "be left unset");
  // A degree that does not divide the node leaves no whole data-parallel world: only its
  // own field is reported, and grad_accum is not derived.
  const v1::JobSpec bad =
      Spec("training: {global_batch_size: 16, micro_batch_size: 2}\nparallelism: {tensor_parallel: 3}");
  EXPECT_FALSE(bad.training().has_grad_accum());
  ASSERT_EQ(FieldViolationsOf(ValidateJobSpec(bad)).size(), 1u) << ValidateJobSpec(bad);
  EXPECT_EQ(FieldViolationsOf(ValidateJobSpec(bad))[0].field(), "parallelism.tensor_parallel");
}

TEST(TensorParallel, AnElasticGangsBatchDividesEveryDataParallelWorldItMayRunOn) {
  // T 8: one data-parallel rank per node, so 6 sequences divide 2 and 3 nodes alike (with
  // T 1 they would need multiples of 16 and 24).
  const v1::JobSpec ok = Spec("training: {global_batch_size: 6, micro_batch_size: 1}\n"
                              "resources: {nodes: 3, min_nodes: 2}\nparallelism: {tensor_parallel: 8}");
  EXPECT_TRUE(ValidateJobSpec(ok).ok()) << ValidateJobSpec(ok);
  ExpectOnly(Spec("training: {global_batch_size: 18, micro_batch_size: 1}\n"
                  "resources: {nodes: 3, min_nodes: 2}\nparallelism: {tensor_parallel: 4}"),
             "training.global_batch_size",
             "training.global_batch_size (18) must be a multiple of micro_batch_size x gpus_per_node / "
             "parallelism.tensor_parallel x nodes for every node count the elastic gang may run on; it is not for 2 "
             "nodes");
}

std::string ReadExample(const std::string& name) {
  std::ifstream in(std::string(LLAMAFLEET_EXAMPLES_DIR) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(TensorParallel, SeventyBWithEightWayTensorParallelismFitsFourP5) {
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(ReadExample("llama2-70b-tp8-4xp5.yaml"));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);  // includes the p5 memory fit
  EXPECT_EQ(TensorParallelOf(spec), 8);
  EXPECT_EQ(spec.training().grad_accum(), 4);  // 16 / (1 x 4 data-parallel ranks)
  std::optional<v1::MemoryEstimate> e = EstimateJobMemory(spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->world_size(), 32);
  // memory_estimate_test's reference figure (48790550937) + packing's document mask, 1 x
  // 4096^2 x 2 bytes (not split by tensor parallelism), and the 10% workspace on it: 45.5 GiB.
  EXPECT_EQ(e->total_bytes(), 48827460812);
  EXPECT_LT(e->total_bytes(), int64_t{80} * 1000 * 1000 * 1000);
}

TEST(TensorParallel, AMemoryRefusalNamesTheDegreeThatWouldFit) {
  // 70B on 4 x p5 at micro-batch 4 does not fit without tensor parallelism; T 2 does
  // (packing's document masks, 4 x 4096^2 x 2 bytes, included).
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(ReadExample("llama2-70b-tp8-4xp5.yaml"));
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  spec.clear_parallelism();
  spec.mutable_training()->clear_global_batch_size();
  spec.mutable_training()->set_micro_batch_size(4);
  ApplyDefaults(&spec);
  const absl::Status s = ValidateJobSpec(spec);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("resources.instance_type p5.48xlarge: estimated 84.0 GiB per GPU"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("parallelism.tensor_parallel 2 (76.8 GiB)"), std::string::npos) << s;
  spec.mutable_parallelism()->set_tensor_parallel(2);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

}  // namespace
}  // namespace llamafleet
