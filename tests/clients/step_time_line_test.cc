// The step-time estimate as `submit --dry-run` and `describe` print it, for the p5 examples
// of deploy/examples (Llama-2, Llama 3.1, Qwen2.5), each job carrying what the coordinator adds to it
// (EstimateJobStepTime with its pricing: p5.48xlarge at 98.32 per instance-hour here).
// Prints the lines (the figures of docs/performance.md); < 1 s.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "clients/cli/output.h"
#include "gtest/gtest.h"
#include "jobspec/jobspec.h"

namespace llamafleet::cli {
namespace {

v1::Job ExampleJob(const std::string& name) {
  std::ifstream in(std::string(LLAMAFLEET_EXAMPLES_DIR) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text.str());
  EXPECT_TRUE(jobs.ok()) << name << ": " << jobs.status();
  v1::Job job;
  if (!jobs.ok() || jobs->empty()) return job;
  *job.mutable_spec() = (*jobs)[0].spec;
  ApplyDefaults(job.mutable_spec());
  if (std::optional<v1::StepTimeEstimate> e = EstimateJobStepTime(job.spec(), 98.32)) {
    *job.mutable_step_time_estimate() = *e;
  }
  return job;
}

TEST(StepTimeLine, P5ExamplesShowStepTimeMfuAndCost) {
  for (const char* name : {"llama2-7b-2xp5.yaml", "llama2-13b-2xp5.yaml", "llama2-70b-16xp5.yaml",
                           "llama2-70b-tp8-4xp5.yaml", "llama2-70b-lora-1xp5.yaml", "llama3.1-8b-1xp5.yaml",
                           "llama3.1-70b-4xp5.yaml", "llama3.1-405b-tp8-16xp5.yaml",
                           "qwen2.5-7b-lora-1gpu.yaml"}) {
    const v1::Job job = ExampleJob(name);
    ASSERT_TRUE(job.has_step_time_estimate()) << name;
    const std::string line = StepTimeLine(job.step_time_estimate());
    std::printf("%s: %s\n", name, line.c_str());
    EXPECT_TRUE(absl::StrContains(line, "s per step on p5.48xlarge (H100 80GB)")) << line;
    EXPECT_TRUE(absl::StrContains(line, "MFU ")) << line;
    EXPECT_TRUE(absl::StrContains(line, "GPU-hours per 1,000 steps costing ")) << line;
    const double mfu = job.step_time_estimate().mfu();
    EXPECT_GT(mfu, 0.15) << name;
    EXPECT_LT(mfu, 0.70) << name;
    EXPECT_TRUE(absl::StrContains(DescribeJob(job, {}, {}, absl::Now(), {}), "Step estimate:"))
        << name;
  }
}

TEST(StepTimeLine, SaysWhatIsNotPriced) {
  v1::StepTimeEstimate e;
  e.set_instance_type("p4d.24xlarge");
  e.set_gpu("A100 40GB");
  e.set_step_seconds(2);
  e.set_total_steps(100);
  e.set_gpu_hours(0.4);
  const std::string line = StepTimeLine(e);
  EXPECT_TRUE(absl::StrContains(line, "the job's 100 steps: 0.4 GPU-hours")) << line;
  EXPECT_TRUE(absl::StrContains(line, "no price for p4d.24xlarge")) << line;
}

}  // namespace
}  // namespace llamafleet::cli
