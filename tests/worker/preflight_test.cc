// The worker's pre-flight on this machine (a CPU worker: GEMM and loopback run, the GPU
// probe is skipped and says so), its fault injection, and the GPU rule from nvidia-smi's
// answers.
#include "worker/preflight.h"

#include <fstream>

#include <gtest/gtest.h>

#include "tests/testing/process.h"

namespace llamafleet::worker {
namespace {

TEST(Preflight, CpuWorkerRunsGemmAndLoopbackAndSaysTheGpuProbeIsSkipped) {
  const v1::PreflightResult r = RunPreflight({}, 1);
  EXPECT_TRUE(r.passed()) << r.DebugString();
  EXPECT_EQ(r.sequence(), 1);
  ASSERT_EQ(r.checks_size(), 3);
  EXPECT_EQ(r.checks(0).name(), "gemm");
  EXPECT_EQ(r.checks(0).state(), v1::PreflightCheck::PASSED);
  EXPECT_EQ(r.checks(1).name(), "loopback");
  EXPECT_EQ(r.checks(1).state(), v1::PreflightCheck::PASSED) << r.checks(1).detail();
  EXPECT_EQ(r.checks(2).name(), "gpu");
  EXPECT_EQ(r.checks(2).state(), v1::PreflightCheck::SKIPPED);
  EXPECT_EQ(r.checks(2).detail(), "no GPU");
  EXPECT_GT(r.seconds(), 0);
  EXPECT_LT(r.seconds(), 2);
  EXPECT_TRUE(r.has_time());
}

TEST(Preflight, InjectedFailureHoldsWhileItsFileExists) {
  testing::TempDir dir;
  const std::string knob = dir.path() + "/fail";
  EXPECT_TRUE(RunPreflight({.fail_while_exists = knob}, 1).passed());
  std::ofstream(knob) << "x";
  const v1::PreflightResult r = RunPreflight({.fail_while_exists = knob}, 2);
  EXPECT_FALSE(r.passed());
  ASSERT_EQ(r.checks_size(), 4);
  EXPECT_EQ(r.checks(3).name(), "injected");
  EXPECT_NE(r.checks(3).detail().find("--preflight-fail-for-test"), std::string::npos);
}

TEST(Preflight, GpuRuleFromNvidiaSmi) {
  struct Row {
    const char* what;
    std::vector<std::string> lines;
    int expected;
    v1::PreflightCheck::State state;
    const char* says;
  } rows[] = {
      {"healthy", {"0, 0, Not Active, Not Active, Not Active, Not Active"}, 1, v1::PreflightCheck::PASSED,
       "1 GPUs"},
      {"ECC off reads [N/A]", {"0, [N/A], Not Active, Not Active, Not Active, Not Active"}, 1,
       v1::PreflightCheck::PASSED, "no uncorrected"},
      {"uncorrected ECC", {"0, 3, Not Active, Not Active, Not Active, Not Active"}, 1,
       v1::PreflightCheck::FAILED, "GPU 0: 3 uncorrected ECC errors"},
      {"thermal slowdown", {"0, 0, Not Active, Active, Not Active, Not Active"}, 1, v1::PreflightCheck::FAILED,
       "hardware thermal slowdown active"},
      {"a GPU disappeared", {"0, 0, Not Active, Not Active, Not Active, Not Active"}, 2,
       v1::PreflightCheck::FAILED, "sees 1 of the 2 GPUs"},
      {"no answer at all", {}, 8, v1::PreflightCheck::FAILED, "sees 0 of the 8"},
  };
  for (const Row& row : rows) {
    const v1::PreflightCheck c = GpuCheckFromQuery(row.lines, row.expected);
    EXPECT_EQ(c.state(), row.state) << row.what << ": " << c.detail();
    EXPECT_NE(c.detail().find(row.says), std::string::npos) << row.what << ": " << c.detail();
  }
}

}  // namespace
}  // namespace llamafleet::worker
