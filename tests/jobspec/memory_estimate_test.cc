// The memory-fit estimate against figures from an independent Python transcription of
// the formula (memory_estimate_reference.py beside this file prints them) for the
// released Llama-2, Llama 3.x and Qwen2.5 shapes, and the instance-type table.
#include "jobspec/memory_estimate.h"

#include <cstdio>
#include <optional>

#include <gtest/gtest.h>

#include "jobspec/model_presets.h"

namespace llamafleet::sched {
namespace {

MemoryInputs Inputs(const char* preset, Strategy strategy, int world) {
  MemoryInputs in;
  in.model = *PresetShape(preset);
  in.strategy = strategy;
  in.world_size = world;
  return in;
}

TEST(MemoryEstimate, ParameterCountsAreTheReleasedModels) {
  // The counts Hugging Face reports for meta-llama/Llama-2-{7,13,70}b-hf.
  EXPECT_EQ(PresetShape("llama2-7b")->Parameters(), 6738415616);
  EXPECT_EQ(PresetShape("llama2-13b")->Parameters(), 13015864320);
  EXPECT_EQ(PresetShape("llama2-70b")->Parameters(), 68976648192);
  EXPECT_FALSE(PresetShape("llama3").has_value());
}

TEST(MemoryEstimate, TheNewerPresetsCountTheirPublishedParameters) {
  // The counts their model cards publish, to 3 significant figures (and Hugging Face's exact
  // count of the safetensors): Qwen2.5's q/k/v biases counted, Llama 3.2's tied head once.
  struct Case {
    const char* preset;
    const char* published;  // billions, 3 significant figures
    int64_t exact;
  };
  for (const Case& c : {Case{"llama3.1-8b", "8.03", 8030261248}, Case{"llama3.1-70b", "70.6", 70553706496},
                        Case{"llama3.1-405b", "406", 405853388800}, Case{"llama3.2-1b", "1.24", 1235814400},
                        Case{"llama3.2-3b", "3.21", 3212749824}, Case{"mistral-7b", "7.25", 7248023552},
                        Case{"qwen2.5-7b", "7.62", 7615616512}, Case{"qwen2.5-72b", "72.7", 72706203648}}) {
    std::optional<ModelShape> m = PresetShape(c.preset);
    ASSERT_TRUE(m.has_value()) << c.preset;
    char billions[32];
    std::snprintf(billions, sizeof billions, "%.3g", static_cast<double>(m->Parameters()) / 1e9);
    EXPECT_STREQ(billions, c.published) << c.preset;
    EXPECT_EQ(m->Parameters(), c.exact) << c.preset;
  }
  // Without its biases Qwen2.5 7B would be 28 x (3584 + 2 x 512) parameters short.
  ModelShape qwen = *PresetShape("qwen2.5-7b");
  qwen.qkv_bias = false;
  EXPECT_EQ(qwen.Parameters(), 7615616512 - 28 * (3584 + 2 * 512));
  // Untied, Llama 3.2 1B would hold a second 128256 x 2048 matrix.
  ModelShape tied = *PresetShape("llama3.2-1b");
  tied.tied_embeddings = false;
  EXPECT_EQ(tied.Parameters(), 1235814400 + 128256 * 2048);
}

TEST(MemoryEstimate, EveryPresetHasItsTableEntryAndMaxPositions) {
  for (const ModelPreset& p : ModelPresets()) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(PresetShape(p.name).has_value());
    EXPECT_EQ(PresetShape(p.name)->HeadDim(), p.head_dim);
    EXPECT_EQ(FindModelPreset(p.name), &p);
  }
  EXPECT_EQ(FindModelPreset("llama2-7b")->max_positions, 4096);
  EXPECT_EQ(FindModelPreset("llama3.1-8b")->max_positions, 131072);
  EXPECT_EQ(FindModelPreset("llama3.2-3b")->max_positions, 131072);
  EXPECT_EQ(FindModelPreset("mistral-7b")->max_positions, 32768);
  EXPECT_EQ(FindModelPreset("qwen2.5-72b")->max_positions, 32768);
  EXPECT_EQ(FindModelPreset("llama3"), nullptr);
}

TEST(MemoryEstimate, Llama7bFullShard16RanksPeaksEarlyInBackward) {
  // BF16 compute, FP32 reduce, activation checkpointing, micro-batch 4 x 4096 tokens.
  MemoryEstimate e = EstimateMemory(Inputs("llama2-7b", Strategy::kFullShard, 16));
  EXPECT_EQ(e.parameters, 1684603904);     // 4P/16
  EXPECT_EQ(e.gradients, 1684603904);      // 4P/16
  EXPECT_EQ(e.optimizer_state, 3369207808);  // 8P/16
  EXPECT_EQ(e.peak_phase, "backward");
  EXPECT_EQ(e.communication, 2580387840);   // 3 decoder layers (202383360 params) in fp32 + 1/16
  EXPECT_EQ(e.gathered_params, 1214300160);  // 3 decoder layers in bf16
  EXPECT_EQ(e.activations, 8933867520);
  EXPECT_EQ(e.workspace, 3020438937);       // 1 GiB + 10%
  EXPECT_EQ(e.total, 22487410073);          // 20.9 GiB
  EXPECT_EQ(FormatGiB(e.total), "20.9 GiB");
}

TEST(MemoryEstimate, AnEvaluationHoldsNoGradientsOptimizerStateOrReductions) {
  // The case above evaluated (kind evaluate): the fp32 master shards, the gathered units
  // and the activations stay; what only backward and the optimizer hold goes.
  MemoryInputs in = Inputs("llama2-7b", Strategy::kFullShard, 16);
  in.async_checkpoints = true;
  const MemoryEstimate train = EstimateMemory(in);
  in.forward_only = true;
  const MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.peak_phase, "forward");
  EXPECT_EQ(e.parameters, train.parameters);
  EXPECT_EQ(e.gathered_params, train.gathered_params);
  EXPECT_EQ(e.activations, train.activations);
  EXPECT_EQ(e.gradients, 0);
  EXPECT_EQ(e.optimizer_state, 0);
  EXPECT_EQ(e.communication, 0);
  EXPECT_EQ(e.checkpoint_staging, 0);
  EXPECT_EQ(e.total, e.parameters + e.gathered_params + e.activations + e.workspace);
  EXPECT_EQ(e.workspace, (int64_t{1} << 30) + (e.parameters + e.gathered_params + e.activations) / 10);
}

TEST(MemoryEstimate, CommunicationDoesNotGrowWithTheLayerCount) {
  // The engine bounds the reductions in flight: only the largest unit matters.
  MemoryInputs in = Inputs("llama2-7b", Strategy::kFullShard, 16);
  const int64_t base = EstimateMemory(in).communication;
  in.model.layers *= 4;
  EXPECT_EQ(EstimateMemory(in).communication, base);
  in.max_inflight_reduces = 5;
  EXPECT_EQ(EstimateMemory(in).communication, base * 2);  // (5 + 1) / (2 + 1)
  in.gpu = false;  // Gloo's all-to-all receive buffer: 2 inputs + 1/16 per reduction
  EXPECT_EQ(EstimateMemory(in).communication, base * 2 * 33 / 17);
}

TEST(MemoryEstimate, SelectiveCheckpointingKeepsTheProjectionsOutputs) {
  // 7B, bf16, t = 4096 tokens: full keeps t x h x c per layer, selective adds the seven
  // projections' outputs, t x (2h + q + 2kv + 2f) x c, none everything.
  MemoryInputs in = Inputs("llama2-7b", Strategy::kFullShard, 8);
  in.micro_batch = 1;
  in.seq_len = 4096;
  in.activation_checkpointing = Checkpointing::kFull;
  const int64_t full = EstimateMemory(in).activations;
  in.activation_checkpointing = Checkpointing::kSelective;
  const int64_t selective = EstimateMemory(in).activations;
  in.activation_checkpointing = Checkpointing::kNone;
  const int64_t none = EstimateMemory(in).activations;
  const int64_t t = 4096, h = 4096, f = 11008, c = 2;
  EXPECT_EQ(selective - full, 32 * t * (2 * h + h + 2 * h + 2 * f) * c);
  EXPECT_LT(selective, none);
}

TEST(MemoryEstimate, PackingAddsTheDocumentMaskOnce) {
  // Packing's block-diagonal mask: micro_batch x seq_len^2 in the compute dtype, one per
  // micro-batch (every layer shares it), with or without checkpointing, fused or not.
  for (Checkpointing ckpt : {Checkpointing::kNone, Checkpointing::kFull}) {
    MemoryInputs in = Inputs("llama2-7b", Strategy::kFullShard, 16);
    in.activation_checkpointing = ckpt;
    const MemoryEstimate plain = EstimateMemory(in);
    in.document_mask = true;
    const MemoryEstimate masked = EstimateMemory(in);
    EXPECT_EQ(masked.activations - plain.activations, int64_t{4} * 4096 * 4096 * 2);  // 128 MiB
    EXPECT_GT(masked.total, plain.total);
  }
}

TEST(MemoryEstimate, Llama13bHybridFp32WithoutCheckpointing) {
  MemoryInputs in = Inputs("llama2-13b", Strategy::kHybridShard, 16);
  in.shard_group_size = 8;
  in.compute_bytes = 4;
  in.activation_checkpointing = Checkpointing::kNone;
  in.micro_batch = 1;
  in.seq_len = 2048;
  in.fused_attention = false;  // the explicit T x T scores of the LibTorch 1.x path
  MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.parameters, 6507932160);  // 4P/8
  EXPECT_EQ(e.optimizer_state, 13015864320);
  EXPECT_EQ(e.gathered_params, 3806453760);  // 3 layers of 317194240 params, fp32
  EXPECT_EQ(e.activations, 63045632000);
  EXPECT_EQ(e.communication, 4282260480);
  EXPECT_EQ(e.total, 107956424192);
}

TEST(MemoryEstimate, ThePostsConfigurationsFitP5) {
  // FULL_SHARD, bf16, activation checkpointing, seq 4096: llama-recipes on EKS.
  struct Case {
    const char* preset;
    int world;
    int64_t micro;
    int64_t total;
  };
  for (const Case& c : {Case{"llama2-7b", 16, 3, 20318954905}, Case{"llama2-13b", 16, 3, 32477071513},
                        Case{"llama2-70b", 128, 3, 53291341772}, Case{"llama2-70b", 64, 1, 46881894297}}) {
    MemoryInputs in = Inputs(c.preset, Strategy::kFullShard, c.world);
    in.micro_batch = c.micro;
    const MemoryEstimate e = EstimateMemory(in);
    EXPECT_EQ(e.total, c.total) << c.preset << " on " << c.world;
    EXPECT_LT(e.total, FindInstanceType("p5.48xlarge")->gpu_memory_bytes) << c.preset << " on " << c.world;
  }
  MemoryInputs hybrid = Inputs("llama2-7b", Strategy::kHybridShard, 16);
  hybrid.shard_group_size = 8;
  hybrid.micro_batch = 3;
  EXPECT_EQ(EstimateMemory(hybrid).total, 27898178355);
}

TEST(MemoryEstimate, Llama70bNoShardIsFarBeyondAnyGpu) {
  MemoryInputs in = Inputs("llama2-70b", Strategy::kNoShard, 16);
  in.micro_batch = 1;
  MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.parameters, 275906592768);  // 4P, unsharded
  EXPECT_EQ(e.optimizer_state, 551813185536);
  EXPECT_EQ(e.total, 1387827152486);       // 1292.5 GiB
  for (const InstanceType& t : KnownInstanceTypes()) EXPECT_GT(e.total, t.gpu_memory_bytes) << t.name;
}

TEST(MemoryEstimate, ShardGradOpWithAccumulationKeepsAnUnshardedAccumulator) {
  MemoryInputs in = Inputs("llama2-7b", Strategy::kShardGradOp, 8);
  in.reduce_bytes = 2;
  in.micro_batch = 2;
  in.grad_accum = 4;
  MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.gradients, 30322870272);  // 4P/8 + 4P
  EXPECT_EQ(e.gathered_params, 13476831232);  // the whole model in bf16
  EXPECT_EQ(e.activations, 4991221760);
  EXPECT_EQ(e.total, 67364839628);
  in.grad_accum = 1;
  EXPECT_EQ(EstimateMemory(in).gradients, 3369207808);
}

TEST(MemoryEstimate, LargeVocabulariesCountChunkedLogitsAndTheHeadsFp32Gradient) {
  // Llama 3.1 8B on one p5.48xlarge, micro-batch 2 x 8192: 16,382 target positions, whose
  // logits the trainer holds 1,024 positions at a time; the 128,256 x 4,096 output
  // projection's gradient is summed over the chunks in fp32.
  MemoryInputs in = Inputs("llama3.1-8b", Strategy::kFullShard, 8);
  in.micro_batch = 2;
  in.seq_len = 8192;
  const MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.gathered_params, 3152044032);  // 3 x the lm_head (norm + 128256 x 4096) in bf16
  EXPECT_EQ(e.activations, 12322865152);
  EXPECT_EQ(e.total, 43564025651);  // 40.6 GiB
  EXPECT_LT(e.total, FindInstanceType("p5.48xlarge")->gpu_memory_bytes);
  // Everything else grows with the tokens; the chunk's logits and the gradient do not.
  in.micro_batch = 4;
  const int64_t four = EstimateMemory(in).activations;
  EXPECT_EQ(2 * e.activations - four, kLossChunkPositions * 128256 * 16 + 4 * 128256 * 4096);
  // At most 1,024 target positions (micro-batch 1 x 1024 tokens): no chunks, all logits.
  MemoryInputs one = Inputs("llama3.2-1b", Strategy::kFullShard, 1);
  one.micro_batch = 1;
  one.seq_len = 1024;
  EXPECT_EQ(EstimateMemory(one).total, 30550926950);  // tied: the head is the embedding
  one.micro_batch = 4;
  one.seq_len = 4096;
  EXPECT_EQ(EstimateMemory(one).total, 34924747161);
  // LoRA freezes the head: chunked logits without the fp32 gradient. Qwen2.5 7B r 8 on all
  // seven projections, one GPU, micro-batch 4 x 4096.
  MemoryInputs lora = Inputs("qwen2.5-7b", Strategy::kFullShard, 1);
  lora.lora_r = 8;
  for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) {
    lora.lora_modules |= LoraModuleBit(m);
  }
  const MemoryEstimate q = EstimateMemory(lora);
  EXPECT_EQ(q.total, 32729186304);  // 30.5 GiB
  EXPECT_EQ(q.model_parameters, 7615616512);
}

TEST(MemoryEstimate, Llama31SeventyBNeedsFourP5And405bSixteenWithTensorParallelism) {
  // Full finetuning at micro-batch 1 x 4096, bf16, activation checkpointing: 70B fits 4
  // p5.48xlarge (32 GPUs), not 3.
  const int64_t p5 = FindInstanceType("p5.48xlarge")->gpu_memory_bytes;
  MemoryInputs in = Inputs("llama3.1-70b", Strategy::kFullShard, 32);
  in.micro_batch = 1;
  EXPECT_EQ(EstimateMemory(in).total, 76040607846);  // 70.8 GiB
  EXPECT_LT(EstimateMemory(in).total, p5);
  in.world_size = 24;
  EXPECT_EQ(EstimateMemory(in).total, 89119922723);  // 83.0 GiB
  EXPECT_GT(EstimateMemory(in).total, p5);
  // 405B on all 16 nodes: T 8 in each node, FULL_SHARD over 16, bf16 reduction, one
  // gather in flight. Vocabulary-parallel logits are never chunked.
  MemoryInputs big = Inputs("llama3.1-405b", Strategy::kFullShard, 128);
  big.micro_batch = 1;
  big.tensor_parallel = 8;
  big.reduce_bytes = 2;
  big.max_inflight_all_gathers = 1;
  EXPECT_EQ(EstimateMemory(big).total, 83387120435);  // 77.7 GiB
  EXPECT_LT(EstimateMemory(big).total, p5);
}

TEST(MemoryEstimate, ShardingMoreRanksNeverNeedsMore) {
  for (const char* preset : {"llama2-7b", "llama2-13b", "llama2-70b"}) {
    int64_t previous = INT64_MAX;
    for (int world : {1, 2, 8, 16, 64, 512}) {
      const int64_t total = EstimateMemory(Inputs(preset, Strategy::kFullShard, world)).total;
      EXPECT_LE(total, previous) << preset << " on " << world;
      previous = total;
    }
  }
}

TEST(MemoryEstimate, CpuWorkspaceIsTheProcessItself) {
  MemoryInputs in = Inputs("tiny", Strategy::kFullShard, 1);
  in.gpu = false;
  in.cpu_runtime_bytes = 123456789;
  MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.workspace, 123456789);
  EXPECT_EQ(e.total, e.parameters + e.gradients + e.optimizer_state + e.gathered_params + e.activations +
                         e.communication + e.workspace);
}

TEST(MemoryEstimate, BackgroundCheckpointsStageTwelveBytesPerShardedParameterOnTheHost) {
  MemoryInputs in = Inputs("llama2-70b", Strategy::kFullShard, 128);
  const MemoryEstimate sync = EstimateMemory(in);
  in.async_checkpoints = true;
  const MemoryEstimate async = EstimateMemory(in);
  EXPECT_EQ(async.checkpoint_staging, (12 * PresetShape("llama2-70b")->Parameters() + 127) / 128);
  EXPECT_EQ(sync.checkpoint_staging, 0);
  EXPECT_EQ(async.total, sync.total);  // host memory, not the GPU's
  in.gpu = false;
  in.async_checkpoints = false;
  const int64_t cpu_sync = EstimateMemory(in).total;
  in.async_checkpoints = true;
  EXPECT_EQ(EstimateMemory(in).total, cpu_sync + async.checkpoint_staging);  // on a CPU it is
}

TEST(MemoryEstimate, LoraHoldsTheFrozenBaseInTheComputeDtypeAndTrainsOnlyTheAdapters) {
  // 70B, r 16 on q/v, one p5.48xlarge (8 GPUs), micro-batch 1.
  MemoryInputs in = Inputs("llama2-70b", Strategy::kFullShard, 8);
  in.micro_batch = 1;
  in.lora_r = 16;
  in.lora_modules = LoraModuleBit("q_proj") | LoraModuleBit("v_proj");
  EXPECT_EQ(LoraLayerParameters(in.model, 16, in.lora_modules), 16 * (2 * 8192) + 16 * (8192 + 1024));
  MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.parameters, 17260546048);  // 2 x base / 8 + 4 x adapter / 8
  EXPECT_EQ(e.gradients, 16384000);
  EXPECT_EQ(e.optimizer_state, 32768000);
  EXPECT_EQ(e.gathered_params, 5136384000);
  EXPECT_EQ(e.activations, 7788822528);
  EXPECT_EQ(e.communication, 5529600);
  EXPECT_EQ(e.total, 34338219417);  // 32.0 GiB: fits an 80 GB H100
  // 7B, r 8 on all seven projections, one GPU, micro-batch 4.
  MemoryInputs one = Inputs("llama2-7b", Strategy::kFullShard, 1);
  one.lora_r = 8;
  for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) {
    one.lora_modules |= LoraModuleBit(m);
  }
  EXPECT_EQ(EstimateMemory(one).total, 26848688947);  // 25.0 GiB
  EXPECT_EQ(LoraModuleBit("qkv"), 0u);
}

TEST(MemoryEstimate, QloraHoldsTheTargetedBaseAsNf4) {
  // 70B, r 16 on all seven projections, one 80 GB GPU, micro-batch 1.
  MemoryInputs in = Inputs("llama2-70b", Strategy::kFullShard, 1);
  in.micro_batch = 1;
  in.lora_r = 16;
  for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) {
    in.lora_modules |= LoraModuleBit(m);
  }
  const MemoryEstimate lora = EstimateMemory(in);
  in.nf4_base = true;
  const MemoryEstimate q = EstimateMemory(in);
  const int64_t layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672;  // q, o; k, v; MLP
  const int64_t nf4 = layer / 2 + layer / 64 + 4 * ((layer + 16383) / 16384) + 4;  // nf4.h's count
  EXPECT_EQ(lora.parameters - q.parameters, 80 * (2 * layer - nf4));
  EXPECT_NEAR(static_cast<double>(nf4) / layer, 0.516, 0.001);
  EXPECT_EQ(q.gathered_params - lora.gathered_params, nf4);  // one layer's packed bytes
  EXPECT_EQ(q.trainable_parameters, lora.trainable_parameters);
  EXPECT_GT(lora.total, int64_t{80} << 30);
  EXPECT_LT(q.total, int64_t{60} << 30);
  // With tensor parallelism the slices are held dequantized: LoRA's memory.
  in.tensor_parallel = 2;
  in.world_size = 2;
  MemoryInputs tp_lora = in;
  tp_lora.nf4_base = false;
  EXPECT_EQ(EstimateMemory(in).total, EstimateMemory(tp_lora).total);
}

TEST(MemoryEstimate, TensorParallelismSplitsTheMatricesAndKeepsTheNormsWhole) {
  const ModelShape m = *PresetShape("llama2-70b");
  const int64_t norms = (2 * 80 + 1) * 8192;
  EXPECT_EQ(m.Parameters(1), m.Parameters());
  EXPECT_EQ(m.Parameters(8), (m.Parameters() - norms) / 8 + norms);
  EXPECT_EQ(m.Parameters(8), 8623235072);
  EXPECT_EQ(m.LargestUnitParameters(8), 2 * 8192 + (m.LargestUnitParameters() - 2 * 8192) / 8);  // a layer
  // LoRA: q (column-parallel) keeps A whole and splits B; o (row-parallel) splits A.
  const unsigned q = LoraModuleBit("q_proj"), o = LoraModuleBit("o_proj");
  EXPECT_EQ(LoraLayerParameters(m, 16, q, 8), 16 * 8192 + 16 * 8192 / 8);
  EXPECT_EQ(LoraLayerParameters(m, 16, o, 8), 16 * 8192 / 8 + 16 * 8192);
  EXPECT_EQ(LoraLayerParameters(m, 16, q | o, 1), LoraLayerParameters(m, 16, q | o));
}

TEST(MemoryEstimate, Llama70bTensorParallel8FitsFourP5WithFullShardAcrossNodes) {
  // deploy/examples/llama2-70b-tp8-4xp5.yaml: 32 H100s, T 8 inside each node, FULL_SHARD
  // over the 4 data-parallel ranks, bf16, activation checkpointing, micro-batch 1 x 4096.
  MemoryInputs in = Inputs("llama2-70b", Strategy::kFullShard, 32);
  in.micro_batch = 1;
  in.tensor_parallel = 8;
  const MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.parameters, 8623235072);       // 4 x P_8 / 4
  EXPECT_EQ(e.gradients, 8623235072);
  EXPECT_EQ(e.optimizer_state, 17246470144);
  EXPECT_EQ(e.gathered_params, 641826816);   // 3 layer slices in bf16
  EXPECT_EQ(e.activations, 6572474368);
  EXPECT_EQ(e.communication, 1671675904);    // + one [1, 4096, 8192] bf16 all-reduce buffer
  EXPECT_EQ(e.workspace, 5411633561);
  EXPECT_EQ(e.total, 48790550937);           // 45.4 GiB
  EXPECT_EQ(FormatGiB(e.total), "45.4 GiB");
  EXPECT_LT(e.total, FindInstanceType("p5.48xlarge")->gpu_memory_bytes);
  EXPECT_EQ(e.model_parameters, 68976648192);  // whole-model counts
  EXPECT_EQ(e.trainable_parameters, 68976648192);
  // The same 32 GPUs without tensor parallelism need more: FULL_SHARD's state per rank is
  // the same (P / world either way), the gathered units, activations and reductions are not.
  int64_t previous = INT64_MAX;
  for (int t : {1, 2, 4, 8}) {
    in.tensor_parallel = t;
    const MemoryEstimate at = EstimateMemory(in);
    EXPECT_LT(at.total, previous) << t;
    EXPECT_NEAR(static_cast<double>(at.optimizer_state), static_cast<double>(e.optimizer_state),
                1e-3 * static_cast<double>(e.optimizer_state));
    previous = at.total;
  }
  in.tensor_parallel = 8;
  in.max_inflight_tp_all_reduces = 2;
  EXPECT_EQ(EstimateMemory(in).communication, e.communication + int64_t{4096} * 8192 * 2);
}

TEST(MemoryEstimate, TensorParallelWithHybridShardShardsOverTheGroupsDataParallelRanks) {
  // 7B, T 2, HYBRID groups of one node (8 ranks: 4 data-parallel copies of each slice).
  MemoryInputs in = Inputs("llama2-7b", Strategy::kHybridShard, 16);
  in.shard_group_size = 8;
  in.micro_batch = 3;
  in.tensor_parallel = 2;
  const MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.parameters, 3369340928);  // 4 x P_2 / 4
  EXPECT_EQ(e.gathered_params, 607174656);
  EXPECT_EQ(e.activations, 8317304832);
  EXPECT_EQ(e.communication, 1618599936);
  EXPECT_EQ(e.total, 27496229273);
  // 13B, T 4, fp32 without checkpointing, the explicit attention scores split by heads.
  MemoryInputs fp32 = Inputs("llama2-13b", Strategy::kFullShard, 16);
  fp32.compute_bytes = 4;
  fp32.activation_checkpointing = Checkpointing::kNone;
  fp32.micro_batch = 1;
  fp32.seq_len = 2048;
  fp32.fused_attention = false;
  fp32.tensor_parallel = 4;
  const MemoryEstimate f = EstimateMemory(fp32);
  EXPECT_EQ(f.activations, 23372759040);
  EXPECT_EQ(f.total, 43504204800);
}

TEST(MemoryEstimate, LoraAdaptersFollowTheirBaseProjectionsTensorParallelSplit) {
  // 70B, r 16 on all seven projections, T 8 on one p5.48xlarge (no data parallelism).
  MemoryInputs in = Inputs("llama2-70b", Strategy::kFullShard, 8);
  in.micro_batch = 1;
  in.tensor_parallel = 8;
  in.lora_r = 16;
  for (const char* m : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) {
    in.lora_modules |= LoraModuleBit(m);
  }
  const MemoryEstimate e = EstimateMemory(in);
  EXPECT_EQ(e.parameters, 17606918144);  // 2 x P_8 (the frozen slice) + 4 x the adapters' slice
  EXPECT_EQ(e.gradients, 360448000);
  EXPECT_EQ(e.optimizer_state, 720896000);
  EXPECT_EQ(e.communication, 80625664);
  EXPECT_EQ(e.total, 29662683955);
  EXPECT_EQ(e.trainable_parameters, 80 * LoraLayerParameters(in.model, 16, in.lora_modules));
}

TEST(InstanceTypes, KnownTable) {
  ASSERT_NE(FindInstanceType("p5.48xlarge"), nullptr);
  EXPECT_EQ(FindInstanceType("p5.48xlarge")->gpus, 8);
  EXPECT_EQ(FindInstanceType("p4d.24xlarge")->gpu_memory_bytes, int64_t{40960} << 20);
  EXPECT_EQ(FindInstanceType("p5en.48xlarge")->gpu, "H200 141GB");
  EXPECT_EQ(FindInstanceType("m5.large"), nullptr);
}

}  // namespace
}  // namespace llamafleet::sched
