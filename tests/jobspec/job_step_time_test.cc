// A spec's step-time estimate (EstimateJobStepTime, jobspec/jobspec.h): set for a known
// preset on a known instance type, priced at the instance-hour price split over its GPUs,
// with the whole job's GPU-hours when training.max_steps bounds it; unset otherwise.
#include <gtest/gtest.h>

#include "jobspec/jobspec.h"
#include "tests/testing/spec_builder.h"

namespace llamafleet {
namespace {

v1::JobSpec Llama7bOn2xP5(const std::string& extra = "") {
  testing::SpecBuilder b("7b");
  b.Yaml(
      "model: {preset: llama2-7b}\n"
      "training: {micro_batch_size: 3, seq_len: 4096}\n"
      "fsdp: {sharding: FULL_SHARD, mixed_precision: BF16, reduce_precision: FP32,"
      " activation_checkpointing: true}\n"
      "resources: {nodes: 2, gpus_per_node: 8, instance_type: p5.48xlarge}\n");
  if (!extra.empty()) b.Yaml(extra);  // merged over the above, field by field
  return b.WithDefaults();
}

TEST(JobStepTime, PricesTheExampleOnItsInstanceType) {
  std::optional<v1::StepTimeEstimate> e = EstimateJobStepTime(Llama7bOn2xP5(), 98.32);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->instance_type(), "p5.48xlarge");
  EXPECT_EQ(e->gpu(), "H100 80GB");
  EXPECT_GT(e->mfu(), 0.2);
  EXPECT_LT(e->mfu(), 0.7);
  EXPECT_NEAR(e->tokens_per_second(), 16 * 3 * 4096 / e->step_seconds(),
              1e-6 * e->tokens_per_second());
  // 1,000 steps on 16 GPUs; a GPU-hour is an eighth of the instance-hour.
  EXPECT_NEAR(e->gpu_hours_per_1000_steps(), 1000 * e->step_seconds() * 16 / 3600, 1e-9);
  ASSERT_TRUE(e->has_cost_per_1000_steps());
  EXPECT_NEAR(e->cost_per_1000_steps(), e->gpu_hours_per_1000_steps() * 98.32 / 8, 1e-9);
  // Epochs bound it: no whole-job figure before the trainer reads the data.
  EXPECT_EQ(e->total_steps(), 0);
  EXPECT_FALSE(e->has_cost());
}

TEST(JobStepTime, MaxStepsGivesTheWholeJob) {
  std::optional<v1::StepTimeEstimate> e =
      EstimateJobStepTime(Llama7bOn2xP5("training: {max_steps: 500}\n"), 98.32);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->total_steps(), 500);
  EXPECT_NEAR(e->gpu_hours(), e->gpu_hours_per_1000_steps() / 2, 1e-9);
  ASSERT_TRUE(e->has_cost());
  EXPECT_NEAR(e->cost(), e->cost_per_1000_steps() / 2, 1e-9);
}

TEST(JobStepTime, UnpricedTypeHasTimesButNoCost) {
  std::optional<v1::StepTimeEstimate> e = EstimateJobStepTime(Llama7bOn2xP5(), std::nullopt);
  ASSERT_TRUE(e.has_value());
  EXPECT_GT(e->step_seconds(), 0);
  EXPECT_FALSE(e->has_cost_per_1000_steps());
}

TEST(JobStepTime, UnknownInstanceTypeOrShapeGivesNone) {
  EXPECT_FALSE(EstimateJobStepTime(Llama7bOn2xP5("resources: {instance_type: my-lab-box}\n"), 1.0)
                   .has_value());
  EXPECT_FALSE(
      EstimateJobStepTime(testing::SpecBuilder("p").ModelPath("/m/llama").WithDefaults(), 1.0)
          .has_value());
}

}  // namespace
}  // namespace llamafleet
