// The worker's pre-flight on this machine (a CPU worker: GEMM and loopback run, the GPU
// probe is skipped and says so), its fault injection, and the GPU rule from one health
// sample (worker/gpu_health.h).
#include "worker/preflight.h"

#include <fstream>
#include <optional>

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

TEST(Preflight, GpuRuleFromOneHealthSample) {
  auto sample = [](int index, std::optional<int64_t> ecc, uint64_t throttle, bool gone = false) {
    v1::GpuSample s;
    s.set_index(index);
    if (ecc.has_value()) s.set_ecc_uncorrected_volatile(*ecc);
    s.set_clock_throttle_reasons(throttle);
    s.set_gone(gone);
    return s;
  };
  struct Row {
    const char* what;
    std::vector<v1::GpuSample> samples;
    int expected;
    v1::PreflightCheck::State state;
    const char* says;
  } rows[] = {
      {"healthy", {sample(0, 0, 0)}, 1, v1::PreflightCheck::PASSED, "1 GPUs"},
      {"ECC off", {sample(0, std::nullopt, 0)}, 1, v1::PreflightCheck::PASSED, "no uncorrected"},
      {"at the power cap, idle", {sample(0, 0, 0x5)}, 1, v1::PreflightCheck::PASSED, "no clock slowdown"},
      {"uncorrected ECC", {sample(0, 3, 0)}, 1, v1::PreflightCheck::FAILED, "GPU 0: 3 uncorrected ECC errors"},
      {"thermal slowdown", {sample(0, 0, 0x40)}, 1, v1::PreflightCheck::FAILED, "hardware thermal slowdown active"},
      {"power brake", {sample(0, 0, 0x80)}, 1, v1::PreflightCheck::FAILED, "power brake slowdown active"},
      {"a GPU disappeared", {sample(0, 0, 0)}, 2, v1::PreflightCheck::FAILED, "sees 1 of the 2 GPUs"},
      {"a GPU gone", {sample(0, 0, 0), sample(1, 0, 0, true)}, 2, v1::PreflightCheck::FAILED, "sees 1 of the 2"},
      {"no answer at all", {}, 8, v1::PreflightCheck::FAILED, "sees 0 of the 8"},
  };
  for (const Row& row : rows) {
    const v1::PreflightCheck c = GpuCheckFromSamples(row.samples, row.expected);
    EXPECT_EQ(c.state(), row.state) << row.what << ": " << c.detail();
    EXPECT_NE(c.detail().find(row.says), std::string::npos) << row.what << ": " << c.detail();
  }
}

}  // namespace
}  // namespace llamafleet::worker
