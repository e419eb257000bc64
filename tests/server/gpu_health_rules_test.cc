// The GPU health rule (server/cluster/gpu_health_rules.h) as tables on explicit times:
// which sample changes are events, which of them are fatal, and when they drain a worker.
#include "server/cluster/gpu_health_rules.h"

#include <gtest/gtest.h>

#include "common/clock.h"

namespace llamafleet {
namespace {

struct Gpu {
  int index = 0;
  int64_t xid_count = 0;
  std::vector<int64_t> xids = {};  // recent_xids; the last is xid_errors
  std::optional<int64_t> ecc = std::nullopt;
  uint64_t throttle = 0;
  bool gone = false;
};

google::protobuf::RepeatedPtrField<v1::GpuSample> Samples(const std::vector<Gpu>& gpus) {
  google::protobuf::RepeatedPtrField<v1::GpuSample> out;
  for (const Gpu& g : gpus) {
    v1::GpuSample* s = out.Add();
    s->set_index(g.index);
    s->set_xid_count(g.xid_count);
    for (int64_t x : g.xids) s->add_recent_xids(x);
    if (!g.xids.empty()) s->set_xid_errors(g.xids.back());
    if (g.ecc.has_value()) s->set_ecc_uncorrected_volatile(*g.ecc);
    s->set_clock_throttle_reasons(g.throttle);
    s->set_gone(g.gone);
  }
  return out;
}

TEST(GpuHealthRules, TheFatalXidSet) {
  for (int64_t xid : {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120}) EXPECT_TRUE(IsFatalXid(xid)) << xid;
  for (int64_t xid : {0, 13, 31, 43, 45, 69, 80, 121, -79}) EXPECT_FALSE(IsFatalXid(xid)) << xid;
  EXPECT_EQ(DescribeXid(79), "XID 79 (GPU has fallen off the bus)");
  EXPECT_EQ(DescribeXid(13), "XID 13");
}

TEST(GpuHealthRules, EventsFromOneSampleAfterAnother) {
  struct Row {
    const char* what;
    std::vector<Gpu> before;  // the samples seen first (their events are not checked)
    std::vector<Gpu> now;
    std::vector<std::string> events;  // "kind fatal|shown: detail"
  } rows[] = {
      {"nothing new", {{.index = 0, .ecc = 0}}, {{.index = 0, .ecc = 0}}, {}},
      {"a fatal XID", {{.index = 0}}, {{.index = 0, .xid_count = 1, .xids = {79}}},
       {"xid fatal: GPU 0: XID 79 (GPU has fallen off the bus)"}},
      {"a fatal XID in the first sample (the worker's count starts at 0)", {},
       {{.index = 2, .xid_count = 1, .xids = {48}}}, {"xid fatal: GPU 2: XID 48 (double-bit ECC error)"}},
      {"an application's XID: shown", {{.index = 0}}, {{.index = 0, .xid_count = 1, .xids = {13}}},
       {"xid shown: GPU 0: XID 13"}},
      {"a fatal one before a harmless one", {{.index = 0}}, {{.index = 0, .xid_count = 2, .xids = {79, 13}}},
       {"xid fatal: GPU 0: XID 79 (GPU has fallen off the bus) (2 new XID events)"}},
      {"only the new ones count", {{.index = 0, .xid_count = 1, .xids = {79}}},
       {{.index = 0, .xid_count = 2, .xids = {79, 13}}}, {"xid shown: GPU 0: XID 13"}},
      {"the same count again", {{.index = 0, .xid_count = 1, .xids = {79}}},
       {{.index = 0, .xid_count = 1, .xids = {79}}}, {}},
      {"a smaller count: the worker restarted", {{.index = 0, .xid_count = 5, .xids = {79}}},
       {{.index = 0, .xid_count = 0}}, {}},
      {"new uncorrectable ECC errors", {{.index = 1, .ecc = 2}}, {{.index = 1, .ecc = 5}},
       {"ecc fatal: GPU 1: 3 new uncorrectable ECC errors (5 since the driver loaded)"}},
      {"ECC first seen: the baseline", {}, {{.index = 1, .ecc = 5}}, {}},
      {"ECC turned off", {{.index = 1, .ecc = 2}}, {{.index = 1}}, {}},
      {"ECC reset by a driver reload", {{.index = 1, .ecc = 2}}, {{.index = 1, .ecc = 0}}, {}},
      {"a GPU gone", {{.index = 3}}, {{.index = 3, .gone = true}},
       {"gone fatal: GPU 3: gone (the worker no longer finds it)"}},
      {"still gone: one event", {{.index = 3, .gone = true}}, {{.index = 3, .gone = true}}, {}},
      {"thermal throttling", {{.index = 0}}, {{.index = 0, .throttle = 0x40}},
       {"throttle shown: GPU 0: clocks held down: hardware thermal slowdown"}},
      {"still throttled", {{.index = 0, .throttle = 0x40}}, {{.index = 0, .throttle = 0x40}}, {}},
      {"a second reason", {{.index = 0, .throttle = 0x40}}, {{.index = 0, .throttle = 0xc0}},
       {"throttle shown: GPU 0: clocks held down: power brake slowdown"}},
      {"idle and the power cap are normal", {{.index = 0}}, {{.index = 0, .throttle = 0x5}}, {}},
      {"an index out of range", {}, {{.index = 5000, .xid_count = 1, .xids = {79}}, {.index = -1, .gone = true}}, {}},
      {"a negative count", {}, {{.index = 0, .xid_count = -4, .xids = {79}}}, {}},
  };
  FakeClock clock;
  for (const Row& row : rows) {
    GpuHealthState state;
    (void)ObserveGpuSamples(state, Samples(row.before), clock.Now());
    clock.Advance(absl::Seconds(5));
    std::vector<std::string> got;
    for (const GpuHealthEvent& e : ObserveGpuSamples(state, Samples(row.now), clock.Now())) {
      got.push_back(std::string(GpuHealthEventName(e.kind)) + (e.fatal ? " fatal: " : " shown: ") + e.detail);
      EXPECT_EQ(e.time, clock.Now()) << row.what;
    }
    EXPECT_EQ(got, row.events) << row.what;
  }
}

TEST(GpuHealthRules, OnlyTheFirstSamplesOfAWorkerAreRead) {
  std::vector<Gpu> many;
  for (int i = 0; i < 1000; ++i) many.push_back({.index = i % 1000, .gone = true});
  GpuHealthState state;
  EXPECT_EQ(ObserveGpuSamples(state, Samples(many), absl::UnixEpoch()).size(), static_cast<size_t>(kMaxGpuSamples));
  EXPECT_EQ(state.size(), static_cast<size_t>(kMaxGpuSamples));
}

TEST(GpuHealthRules, AFatalEventDrainsAWorkerNotDrainedYet) {
  const absl::Time t = absl::FromUnixSeconds(1700000000);
  const GpuHealthEvent xid{GpuHealthEvent::kXid, 0, true, "GPU 0: XID 79 (GPU has fallen off the bus)", t};
  const GpuHealthEvent gone{GpuHealthEvent::kGone, 1, true, "GPU 1: gone (the worker no longer finds it)", t};
  const GpuHealthEvent hot{GpuHealthEvent::kThrottle, 0, false, "GPU 0: clocks held down: hardware thermal slowdown", t};
  const WorkerDrainRecord by_operator{"w1", "bad DIMM", kDrainByOperator, t - absl::Hours(1)};
  const WorkerDrainRecord by_preflight{"w1", "pre-flight failed: gemm", kDrainByPreflight, t - absl::Hours(1)};
  struct Row {
    const char* what;
    std::optional<WorkerDrainRecord> drain;
    std::vector<GpuHealthEvent> events;
    HealthDecision::Action action;
    std::string reason;
  } rows[] = {
      {"no events", std::nullopt, {}, HealthDecision::kNone, ""},
      {"throttling only: shown, not drained", std::nullopt, {hot}, HealthDecision::kNone, ""},
      {"a fatal XID", std::nullopt, {hot, xid}, HealthDecision::kDrain, "GPU 0: XID 79 (GPU has fallen off the bus)"},
      {"two fatal events", std::nullopt, {xid, gone}, HealthDecision::kDrain,
       "GPU 0: XID 79 (GPU has fallen off the bus) (and 1 more)"},
      {"drained by an operator: their reason stands", by_operator, {xid}, HealthDecision::kNone, ""},
      {"drained by a pre-flight: its drain stands", by_preflight, {xid}, HealthDecision::kNone, ""},
  };
  for (const Row& row : rows) {
    const HealthDecision d = DecideGpuHealth(row.drain, row.events);
    EXPECT_EQ(d.action, row.action) << row.what;
    EXPECT_EQ(d.reason, row.reason) << row.what;
  }
}

}  // namespace
}  // namespace llamafleet
