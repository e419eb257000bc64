// The worker's GPU health: the parsers on captured tool output (nvidia-smi, dcgmi dmon,
// kernel log records) and on the test-only fake, the tracker that turns rounds of readings
// into samples (XID events counted, GPUs gone), the bounded probe command, and the monitor
// on this CPU machine (skipped, and the fake's samples).
#include "worker/gpu_health.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "tests/testing/process.h"
#include "worker/bounded_command.h"
#include "worker/gpu_health_parse.h"

namespace llamafleet::worker {
namespace {

// nvidia-smi --query-gpu=<kNvidiaSmiHealthFields> --format=csv,noheader,nounits on an
// 8 x H100 node under load, GPU 3 in a hardware thermal slowdown, GPU 5 with ECC off.
constexpr char kSmiH100[] =
    "0, 00000000:18:00.0, 97, 41, 61245, 64, 512.34, 1980, 0, 0x0000000000000000\n"
    "1, 00000000:2A:00.0, 98, 40, 61245, 66, 530.10, 1980, 0, 0x0000000000000004\n"
    "2, 00000000:3A:00.0, 97, 42, 61245, 63, 498.77, 1980, 0, 0x0000000000000000\n"
    "3, 00000000:5D:00.0, 95, 39, 61245, 91, 350.02, 1410, 0, 0x0000000000000040\n"
    "4, 00000000:9A:00.0, 97, 41, 61245, 65, 505.90, 1980, 2, 0x0000000000000000\n"
    "5, 00000000:AB:00.0, 96, 41, 61245, 62, 512.00, 1980, [N/A], 0x0000000000000000\n"
    "6, 00000000:BA:00.0, 97, 40, 61245, 64, 515.45, 1980, 0, 0x0000000000000000\n"
    "7, 00000000:DB:00.0, 0, 0, 4, 33, 69.12, 345, 0, 0x0000000000000001\n";

TEST(GpuHealthParse, NvidiaSmiRowsOfAnH100Node) {
  const std::vector<NvidiaSmiGpu> gpus = ParseNvidiaSmiHealth(kSmiH100);
  ASSERT_EQ(gpus.size(), 8u);
  EXPECT_EQ(gpus[0].pci, "0000:18:00");
  EXPECT_EQ(gpus[0].sample.index(), 0);
  EXPECT_DOUBLE_EQ(gpus[0].sample.gpu_util(), 97);
  EXPECT_DOUBLE_EQ(gpus[0].sample.mem_copy_util(), 41);
  EXPECT_EQ(gpus[0].sample.memory_used_bytes(), int64_t{61245} << 20);
  EXPECT_DOUBLE_EQ(gpus[0].sample.temperature_c(), 64);
  EXPECT_DOUBLE_EQ(gpus[0].sample.power_w(), 512.34);
  EXPECT_DOUBLE_EQ(gpus[0].sample.sm_clock_mhz(), 1980);
  ASSERT_TRUE(gpus[0].sample.has_ecc_uncorrected_volatile());
  EXPECT_EQ(gpus[0].sample.ecc_uncorrected_volatile(), 0);
  EXPECT_EQ(gpus[1].sample.clock_throttle_reasons(), 0x4u);  // the power cap: normal
  EXPECT_EQ(gpus[3].sample.clock_throttle_reasons(), 0x40u);
  EXPECT_EQ(gpus[3].pci, "0000:5d:00");
  EXPECT_EQ(gpus[4].sample.ecc_uncorrected_volatile(), 2);
  EXPECT_FALSE(gpus[5].sample.has_ecc_uncorrected_volatile()) << "ECC off reads [N/A]: unknown, not 0";
  for (const NvidiaSmiGpu& g : gpus) EXPECT_FALSE(g.sample.gone());
}

TEST(GpuHealthParse, NvidiaSmiHostileOutput) {
  struct Row {
    const char* what;
    std::string text;
    size_t rows;
  } rows[] = {
      {"an error instead of rows",
       "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n", 0},
      {"no devices", "No devices were found\n", 0},
      {"a field short", "0, 00000000:18:00.0, 97, 41, 61245, 64, 512.34, 1980, 0\n", 0},
      {"a field too many", "0, 00000000:18:00.0, 97, 41, 61245, 64, 512.34, 1980, 0, 0x0, 9\n", 0},
      {"index not a number", "x, 00000000:18:00.0, 97, 41, 61245, 64, 512.34, 1980, 0, 0x0\n", 0},
      {"index out of range", "4096, 00000000:18:00.0, 97, 41, 61245, 64, 512.34, 1980, 0, 0x0\n", 0},
      {"a negative index", "-1, 00000000:18:00.0, 97, 41, 61245, 64, 512.34, 1980, 0, 0x0\n", 0},
      {"a repeated index", "0, a, 1, 1, 1, 1, 1, 1, 0, 0x0\n0, b, 1, 1, 1, 1, 1, 1, 0, 0x0\n", 1},
      {"unsupported readings", "0, [N/A], [Not Supported], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]\n", 1},
      {"CRLF line ends", "0, 00000000:18:00.0, 97, 41, 61245, 64, 512.34, 1980, 0, 0x0\r\n", 1},
      {"a NUL inside", std::string("0, 00000000:18:00.0, 97, 41, 61245, 64, 5") + '\0' + "12, 1980, 0, 0x0\n", 1},
      {"a line of a megabyte", std::string(1 << 20, ','), 0},
  };
  for (const Row& row : rows) {
    const std::vector<NvidiaSmiGpu> gpus = ParseNvidiaSmiHealth(row.text);
    EXPECT_EQ(gpus.size(), row.rows) << row.what;
  }
  // Values past their bounds read as 0, never as inf, NaN or an overflow.
  const std::vector<NvidiaSmiGpu> odd =
      ParseNvidiaSmiHealth("0, zz, 1e400, nan, 1e300, -5, inf, 7, -3, 0x1ffffffffffffffff\n");
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_EQ(odd[0].pci, "");
  EXPECT_EQ(odd[0].sample.gpu_util(), 0);
  EXPECT_EQ(odd[0].sample.mem_copy_util(), 0);
  EXPECT_EQ(odd[0].sample.memory_used_bytes(), 0);
  EXPECT_EQ(odd[0].sample.temperature_c(), 0);
  EXPECT_EQ(odd[0].sample.power_w(), 0);
  EXPECT_FALSE(odd[0].sample.has_ecc_uncorrected_volatile());
  EXPECT_EQ(odd[0].sample.clock_throttle_reasons(), 0u);
  // At most kMaxGpus rows.
  std::string many;
  for (int i = 0; i < 200; ++i) many += std::to_string(i) + ", x, 1, 1, 1, 1, 1, 1, 0, 0x0\n";
  EXPECT_EQ(ParseNvidiaSmiHealth(many).size(), static_cast<size_t>(kMaxGpus));
}

TEST(GpuHealthParse, PciAddresses) {
  EXPECT_EQ(NormalizePciAddress("00000000:3B:00.0"), "0000:3b:00");
  EXPECT_EQ(NormalizePciAddress("0000:3b:00"), "0000:3b:00");
  EXPECT_EQ(NormalizePciAddress(" 00000001:DB:1f.3 "), "0001:db:1f");
  for (const char* bad : {"", "3b:00.0", "0000:3b:00:00", "0000:3g:00", "000000000:3b:00", "0000:3b:00.x",
                          "0000:3b:100", "[N/A]", "ffffffff:00:00.0"}) {
    EXPECT_EQ(NormalizePciAddress(bad), "") << bad;
  }
}

TEST(GpuHealthParse, DcgmiDmonXids) {
  // dcgmi dmon -e 230 -c 1 on 4 GPUs; GPU 2 saw XID 79 at some point.
  const std::map<int, int64_t> xids = ParseDcgmiXids(
      "#Entity   XIDER\n"
      "ID\n"
      "GPU 0     0\n"
      "GPU 1     0\n"
      "GPU 2     79\n"
      "GPU 3     N/A\n"
      "GPU 9999  13\n"
      "Error: unable to connect to the host engine\n");
  EXPECT_EQ(xids, (std::map<int, int64_t>{{0, 0}, {1, 0}, {2, 79}}));
}

TEST(GpuHealthParse, KernelLogXids) {
  struct Row {
    const char* record;
    std::optional<int64_t> xid;
    const char* pci;
  } rows[] = {
      // A /dev/kmsg record with its dictionary lines.
      {"4,1534,5623441234,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=2412, name=python, GPU has fallen off the "
       "bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n",
       79, "0000:3b:00"},
      // dmesg's form.
      {"[ 5623.441234] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping",
       63, "0000:10:1c"},
      {"6,1535,5623441240,-;NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception", 13, "0000:3b:00"},
      {"6,1,1,-;NVRM: GPU at PCI:0000:3b:00: GPU-1234", std::nullopt, ""},
      {"6,1,1,-;NVRM: Xid (43, pid: 5678): ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", std::nullopt, ""},
      {"6,1,1,-;NVRM: Xid (PCI:0000:3b:00): , pid=1", std::nullopt, ""},
      {"6,1,1,-;NVRM: Xid (PCI:0000:3b:00): 0", std::nullopt, ""},
      {"6,1,1,-;NVRM: Xid (PCI:zz): 79", std::nullopt, ""},
      {"6,1,1,-;NVRM: Xid (PCI:0000:3b:00): 99999999999999999999", 999999, "0000:3b:00"},
      {"", std::nullopt, ""},
  };
  for (const Row& row : rows) {
    const std::optional<KernelXid> x = ParseKernelXid(row.record);
    ASSERT_EQ(x.has_value(), row.xid.has_value()) << row.record;
    if (!x.has_value()) continue;
    EXPECT_EQ(x->xid, *row.xid) << row.record;
    EXPECT_EQ(x->pci, row.pci) << row.record;
  }
}

TEST(GpuHealthParse, FakeFile) {
  absl::StatusOr<std::vector<FakeGpuEvent>> events =
      ParseGpuHealthFake("# injected by the chaos harness\nxid 79 gpu 0\n\n  ecc 3 gpu 1\ngone gpu 2\n"
                         "throttle hw_thermal gpu 3\n");
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 4u);
  EXPECT_EQ((*events)[0].kind, FakeGpuEvent::kXid);
  EXPECT_EQ((*events)[0].value, 79);
  EXPECT_EQ((*events)[0].line, "xid 79 gpu 0");
  EXPECT_EQ((*events)[1].kind, FakeGpuEvent::kEcc);
  EXPECT_EQ((*events)[1].gpu, 1);
  EXPECT_EQ((*events)[2].kind, FakeGpuEvent::kGone);
  EXPECT_EQ((*events)[3].kind, FakeGpuEvent::kThrottle);
  EXPECT_EQ((*events)[3].value, 0x40);
  for (const char* bad : {"xid 79", "xid 0 gpu 0", "xid -1 gpu 0", "xid 79 gpu 1024", "xid 79 on 0",
                          "throttle warm gpu 0", "reboot gpu 0", "gone gpu"}) {
    absl::StatusOr<std::vector<FakeGpuEvent>> e = ParseGpuHealthFake(std::string("# c\n") + bad);
    EXPECT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("line 2"), absl::string_view::npos) << e.status();
  }
}

std::vector<NvidiaSmiGpu> Smi(std::initializer_list<int> indices) {
  std::vector<NvidiaSmiGpu> out;
  for (int i : indices) {
    NvidiaSmiGpu g;
    g.sample.set_index(i);
    g.sample.set_gpu_util(50);
    g.pci = "0000:0" + std::to_string(i) + ":00";
    out.push_back(g);
  }
  return out;
}

TEST(GpuHealthTracker, KernelXidsAreCountedOnTheirGpuByPciAddress) {
  GpuHealthTracker t({0, 1});
  std::vector<v1::GpuSample> s = t.Update({.smi = Smi({0, 1})});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].xid_count(), 0);
  s = t.Update({.smi = Smi({0, 1}), .kernel_xids = {{"0000:01:00", 13}, {"0000:01:00", 79}, {"0000:07:00", 48}}});
  EXPECT_EQ(s[0].xid_count(), 0);
  EXPECT_EQ(s[1].xid_count(), 2);
  EXPECT_EQ(s[1].xid_errors(), 79);
  EXPECT_EQ(std::vector<int64_t>(s[1].recent_xids().begin(), s[1].recent_xids().end()), (std::vector<int64_t>{13, 79}));
  // Counts are kept: the next round without new XIDs says the same.
  s = t.Update({.smi = Smi({0, 1})});
  EXPECT_EQ(s[1].xid_count(), 2);
  // recent_xids keeps the last 8.
  GpuHealthReadings many{.smi = Smi({0, 1})};
  for (int i = 0; i < 20; ++i) many.kernel_xids.push_back({"0000:00:00", 100 + i});
  s = t.Update(many);
  EXPECT_EQ(s[0].xid_count(), 20);
  ASSERT_EQ(s[0].recent_xids_size(), 8);
  EXPECT_EQ(s[0].recent_xids(7), 119);
}

TEST(GpuHealthTracker, DcgmFirstReadIsTheBaselineAndAChangeIsAnEvent) {
  GpuHealthTracker t({0, 1});
  std::vector<v1::GpuSample> s = t.Update({.smi = Smi({0, 1}), .dcgm_xids = std::map<int, int64_t>{{0, 13}, {1, 0}}});
  EXPECT_EQ(s[0].xid_count(), 0) << "an XID from before the worker started";
  s = t.Update({.smi = Smi({0, 1}), .dcgm_xids = std::map<int, int64_t>{{0, 13}, {1, 79}}});
  EXPECT_EQ(s[0].xid_count(), 0);
  EXPECT_EQ(s[1].xid_count(), 1);
  EXPECT_EQ(s[1].xid_errors(), 79);
  s = t.Update({.smi = Smi({0, 1}), .dcgm_xids = std::nullopt});  // dcgmi failed this round
  EXPECT_EQ(s[1].xid_count(), 1);
  s = t.Update({.smi = Smi({0, 1}), .dcgm_xids = std::map<int, int64_t>{{0, 48}, {1, 79}}});
  EXPECT_EQ(s[0].xid_count(), 1);
  EXPECT_EQ(s[0].xid_errors(), 48);
  EXPECT_EQ(s[1].xid_count(), 1);
}

TEST(GpuHealthTracker, MissingGpusAreGoneAndAFailingNvidiaSmiTwiceInARowMakesThemAllGone) {
  GpuHealthTracker t({0, 1, 2});
  std::vector<v1::GpuSample> s = t.Update({.smi = Smi({0, 2})});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_FALSE(s[0].gone());
  EXPECT_TRUE(s[1].gone());
  EXPECT_EQ(s[1].index(), 1);
  EXPECT_EQ(s[1].gpu_util(), 0);
  s = t.Update({.smi = Smi({0, 1, 2})});
  for (const v1::GpuSample& g : s) EXPECT_FALSE(g.gone());
  s = t.Update({.smi = std::nullopt});  // one failure: the last answer stands
  ASSERT_EQ(s.size(), 3u);
  for (const v1::GpuSample& g : s) EXPECT_FALSE(g.gone());
  s = t.Update({.smi = std::nullopt});
  ASSERT_EQ(s.size(), 3u);
  for (const v1::GpuSample& g : s) EXPECT_TRUE(g.gone()) << g.index();
  s = t.Update({.smi = Smi({0, 1, 2})});
  for (const v1::GpuSample& g : s) EXPECT_FALSE(g.gone());
}

TEST(GpuHealthTracker, FakeEventsOverTheSamplesAndAnXidLineIsOneEventWhileItStays) {
  GpuHealthTracker t({});  // a CPU worker: the fake makes its samples
  const std::vector<FakeGpuEvent> fake = *ParseGpuHealthFake("xid 79 gpu 0\nthrottle power_brake gpu 1\n");
  std::vector<v1::GpuSample> s = t.WithFake({}, fake);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].xid_count(), 1);
  EXPECT_EQ(s[0].xid_errors(), 79);
  EXPECT_EQ(s[1].clock_throttle_reasons(), 0x80u);
  s = t.WithFake({}, fake);
  EXPECT_EQ(s[0].xid_count(), 1) << "the same line, the same event";
  s = t.WithFake({}, std::nullopt);  // the file is gone: the XID stays counted
  ASSERT_EQ(s.size(), 0u);
  s = t.WithFake({}, fake);  // written again: a new event
  EXPECT_EQ(s[0].xid_count(), 2);
  // On a GPU worker the fake changes its samples; ECC and gone.
  GpuHealthTracker g({0, 1});
  std::vector<v1::GpuSample> real = g.Update({.smi = Smi({0, 1})});
  s = g.WithFake(real, *ParseGpuHealthFake("ecc 2 gpu 0\ngone gpu 1\n"));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].ecc_uncorrected_volatile(), 2);
  EXPECT_EQ(s[0].gpu_util(), 50);
  EXPECT_TRUE(s[1].gone());
}

TEST(BoundedCommand, DeadlineOutputCapAndMissingTools) {
  const absl::Time start = absl::Now();
  CommandOutput slow = RunBoundedCommand({"sleep", "30"}, absl::Milliseconds(200));
  EXPECT_TRUE(slow.started);
  EXPECT_TRUE(slow.timed_out);
  EXPECT_FALSE(slow.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  CommandOutput endless = RunBoundedCommand({"yes"}, absl::Milliseconds(500), 1000);
  EXPECT_EQ(endless.out.size(), 1000u);
  EXPECT_TRUE(endless.truncated);
  CommandOutput echo = RunBoundedCommand({"echo", "0, x"}, absl::Seconds(5));
  EXPECT_TRUE(echo.ok());
  EXPECT_EQ(echo.out, "0, x\n");
  CommandOutput failed = RunBoundedCommand({"false"}, absl::Seconds(5));
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_FALSE(failed.ok());
  CommandOutput missing = RunBoundedCommand({"llamafleet-no-such-tool"}, absl::Seconds(5));
  EXPECT_FALSE(missing.started);
  EXPECT_FALSE(OnPath("llamafleet-no-such-tool"));
  EXPECT_TRUE(OnPath("sh"));
}

TEST(GpuHealthMonitor, CpuWorkerSkipsAndSaysSoAndReportsTheFakeWhileItsFileExists) {
  GpuHealthMonitor quiet(GpuHealthOptions{});
  EXPECT_EQ(quiet.Sources(), "skipped: no GPU");
  EXPECT_TRUE(quiet.Latest().empty());

  testing::TempDir dir;
  const std::string knob = dir.path() + "/gpu-fake";
  GpuHealthMonitor faked({.fake_for_test = knob});
  EXPECT_TRUE(faked.Latest().empty());
  std::ofstream(knob) << "xid 79 gpu 0\n";
  std::vector<v1::GpuSample> s = faked.Latest();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].xid_errors(), 79);
  EXPECT_EQ(s[0].xid_count(), 1);
  std::ofstream(knob) << "xid 79 on gpu 0\n";  // unreadable: logged, nothing reported
  EXPECT_TRUE(faked.Latest().empty());
  std::filesystem::remove(knob);
  EXPECT_TRUE(faked.Latest().empty());
}

}  // namespace
}  // namespace llamafleet::worker
