// The step-time estimate (jobspec/step_time_estimate.h): moves the way its inputs say it
// must, gives the 7B p5 example a sane MFU, and refuses an unknown instance type the way
// the memory estimate leaves one to the scheduler. Its agreement with measured step times
// is the CPU bench's (tests/bench/step_time_bench.py).
#include "jobspec/step_time_estimate.h"

#include <gtest/gtest.h>

namespace llamafleet::sched {
namespace {

// The llama2-7b-2xp5 example: FULL_SHARD over 16 H100s, bf16 / fp32 reduce, checkpointing,
// micro-batch 3 x 4096.
StepTimeInputs Example7b() {
  MemoryInputs j;
  j.model = *PresetShape("llama2-7b");
  j.world_size = 16;
  j.micro_batch = 3;
  return StepTimeInputsOf(j);
}

Hardware P5() { return *HardwareOf("p5.48xlarge"); }

TEST(StepTimeEstimate, ModelFlopsPerTokenIsTorchtitansFigureFor7b) {
  // REFERENCE: Llama-2-7B at seq 4096 is about 4.61e10 FLOPs per token.
  EXPECT_NEAR(ModelFlopsPerToken(*PresetShape("llama2-7b"), 4096), 4.61e10, 0.01e10);
}

TEST(StepTimeEstimate, Llama7bOn2xP5HasASaneMfu) {
  const StepTimeEstimate e = EstimateStepTime(Example7b(), P5());
  EXPECT_GT(e.mfu, 0.20);
  EXPECT_LT(e.mfu, 0.70);
  EXPECT_GT(e.step_s, 0.5);
  EXPECT_LT(e.step_s, 5.0);
  // FULL_SHARD: two bf16 gathers of the model, one fp32 reduce-scatter, x 15/16 each.
  const double p = static_cast<double>(PresetShape("llama2-7b")->Parameters());
  EXPECT_NEAR(e.gathered_bytes, 2 * 2 * p * 15 / 16, 1);
  EXPECT_NEAR(e.reduced_bytes, 4 * p * 15 / 16, 1);
  EXPECT_NEAR(e.tokens_per_s, 16 * 3 * 4096 / e.step_s, 1e-6 * e.tokens_per_s);
}

TEST(StepTimeEstimate, GrowsWithTokensAndModel) {
  StepTimeInputs in = Example7b();
  const double base = EstimateStepTime(in, P5()).step_s;
  in.job.micro_batch = 6;
  EXPECT_GT(EstimateStepTime(in, P5()).step_s, base);
  in = Example7b();
  in.job.grad_accum = 2;
  EXPECT_GT(EstimateStepTime(in, P5()).step_s, 1.9 * base);
  in = Example7b();
  in.job.model = *PresetShape("llama2-13b");
  EXPECT_GT(EstimateStepTime(in, P5()).step_s, base);
}

TEST(StepTimeEstimate, RecomputeCostsTimeAndNoModelFlops) {
  StepTimeInputs in = Example7b();
  in.prefetch_under_checkpointing = false;  // every checkpointed backward collective exposed
  const StepTimeEstimate full = EstimateStepTime(in, P5());
  in.recompute = RecomputeMode::kSelective;
  const StepTimeEstimate selective = EstimateStepTime(in, P5());
  in.recompute = RecomputeMode::kNone;
  const StepTimeEstimate none = EstimateStepTime(in, P5());
  EXPECT_GT(full.step_s, selective.step_s);
  EXPECT_GT(selective.step_s, none.step_s);
  EXPECT_GT(full.gemm_flops, none.gemm_flops);
  EXPECT_EQ(full.model_flops, none.model_flops);
  // Without checkpointing the backward gathers hide behind compute.
  EXPECT_LT(none.exposed_communication_s, full.exposed_communication_s);
  in.recompute = RecomputeMode::kFull;
  in.prefetch_under_checkpointing = true;
  EXPECT_LT(EstimateStepTime(in, P5()).step_s, full.step_s);
}

TEST(StepTimeEstimate, LoraSkipsTheBaseWeightGradients) {
  StepTimeInputs in = Example7b();
  const StepTimeEstimate full = EstimateStepTime(in, P5());
  in.job.lora_r = 8;
  in.job.lora_modules = LoraModuleBit("q_proj") | LoraModuleBit("v_proj");
  const StepTimeEstimate lora = EstimateStepTime(in, P5());
  EXPECT_LT(lora.gemm_flops, full.gemm_flops);
  EXPECT_GT(lora.gemm_flops, 0.6 * full.gemm_flops);         // forward, recompute, input gradients
  EXPECT_LT(lora.reduced_bytes, 0.01 * full.reduced_bytes);  // adapters only
  EXPECT_GE(lora.gathered_bytes, full.gathered_bytes);       // the frozen base is gathered too
}

TEST(StepTimeEstimate, StrategiesMoveTheBytesTheyShould) {
  StepTimeInputs in = Example7b();
  in.job.strategy = Strategy::kShardGradOp;
  const StepTimeEstimate sgo = EstimateStepTime(in, P5());
  in.job.strategy = Strategy::kNoShard;
  const StepTimeEstimate ddp = EstimateStepTime(in, P5());
  in.job.strategy = Strategy::kHybridShard;
  in.job.shard_group_size = 8;
  const StepTimeEstimate hybrid = EstimateStepTime(in, P5());
  StepTimeInputs fsdp_in = Example7b();
  const StepTimeEstimate fsdp = EstimateStepTime(fsdp_in, P5());
  EXPECT_NEAR(sgo.gathered_bytes, fsdp.gathered_bytes / 2, 1);
  EXPECT_EQ(ddp.gathered_bytes, 0);
  EXPECT_NEAR(ddp.reduced_bytes, 2 * fsdp.reduced_bytes, 1);
  EXPECT_LT(hybrid.gathered_bytes, fsdp.gathered_bytes);  // 7/8 of it, inside the node
  // With every checkpointed backward collective exposed (no prefetch), SHARD_GRAD_OP's one
  // gather fewer shows in the step time.
  in = Example7b();
  in.prefetch_under_checkpointing = fsdp_in.prefetch_under_checkpointing = false;
  in.job.strategy = Strategy::kShardGradOp;
  EXPECT_LT(EstimateStepTime(in, P5()).step_s, EstimateStepTime(fsdp_in, P5()).step_s);
}

TEST(StepTimeEstimate, TensorParallelismAddsItsAllReduces) {
  MemoryInputs j;
  j.model = *PresetShape("llama2-70b");
  j.world_size = 32;
  j.micro_batch = 1;
  j.grad_accum = 4;
  j.tensor_parallel = 8;
  const StepTimeEstimate e = EstimateStepTime(StepTimeInputsOf(j), P5());
  EXPECT_GT(e.mfu, 0.10);
  EXPECT_LT(e.mfu, 0.70);
  j.tensor_parallel = 1;
  const StepTimeEstimate dp = EstimateStepTime(StepTimeInputsOf(j), P5());
  EXPECT_GT(e.reduced_bytes, 0);
  EXPECT_NEAR(e.model_flops * 8, dp.model_flops, 1e-6 * dp.model_flops);
}

TEST(StepTimeEstimate, AFasterGpuIsFaster) {
  EXPECT_LT(EstimateStepTime(Example7b(), *HardwareOf("p5.48xlarge")).step_s,
            EstimateStepTime(Example7b(), *HardwareOf("p4de.24xlarge")).step_s);
}

TEST(StepTimeEstimate, EveryKnownInstanceTypeHasFigures) {
  for (const InstanceType& t : KnownInstanceTypes()) {
    absl::StatusOr<Hardware> hw = HardwareOf(t.name);
    ASSERT_TRUE(hw.ok()) << t.name << ": " << hw.status();
    EXPECT_GT(hw->peak_flops, 0);
    EXPECT_GT(hw->inter_node_bytes_per_s, 0);
    EXPECT_EQ(hw->devices_per_node, t.gpus);
  }
}

TEST(StepTimeEstimate, UnknownInstanceTypeIsNotFoundNamingIt) {
  absl::StatusOr<Hardware> hw = HardwareOf("dgx-in-the-basement");
  ASSERT_FALSE(hw.ok());
  EXPECT_EQ(hw.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(hw.status().message().find("dgx-in-the-basement"), std::string::npos);
}

}  // namespace
}  // namespace llamafleet::sched
