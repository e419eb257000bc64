// Hangs inside collectives (server/cluster/hang_rules.h): the bound from the step times
// with its floor, and which rank a hung gang is waiting for, as tables on a fake clock.
#include "server/cluster/hang_rules.h"

#include <gtest/gtest.h>

#include <limits>

namespace llamafleet {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TEST(HangBoundTest, FloorOrFactorTimesMedian) {
  HangPolicy policy;
  policy.floor = absl::Seconds(60);
  policy.step_factor = 5;
  struct Case {
    std::deque<double> steps;
    absl::Duration want;
  } cases[] = {
      {{}, absl::Seconds(60)},                            // no step times yet: the floor
      {{1, 1, 1}, absl::Seconds(60)},                     // 5 s < floor
      {{20}, absl::Seconds(100)},                         // 5 x 20 s
      {{10, 20, 30}, absl::Seconds(100)},                 // median of odd count
      {{10, 20, 30, 40}, absl::Seconds(125)},             // median of even count: 25
      {{20, 20, 20, 20, 500}, absl::Seconds(100)},        // one slow step does not move it
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HangBound(c.steps, policy), c.want) << c.steps.size();
  }
}

v1::RankProgress P(int rank, int64_t step, int64_t collectives, bool in, double age = 0.5) {
  v1::RankProgress p;
  p.set_task_id("t");
  p.set_rank(rank);
  p.set_step(step);
  p.set_collectives(collectives);
  p.set_in_collective(in);
  p.set_age_seconds(age);
  return p;
}

HangPolicy TestPolicy() {
  HangPolicy policy;
  policy.floor = absl::Seconds(10);
  policy.step_factor = 5;
  policy.silent_after = absl::Seconds(3);
  return policy;
}

TEST(GangProgressTest, StepTimesComeFromStepReports) {
  GangProgress g;
  for (int s = 1; s <= 4; ++s) g.OnStep(s * 2, kT0 + absl::Seconds(s * 8));  // 2 steps per 8 s: 4 s a step
  EXPECT_EQ(g.Bound(TestPolicy()), absl::Seconds(20));
  g.OnStep(8, kT0 + absl::Seconds(100));  // not newer: ignored
  EXPECT_EQ(g.Bound(TestPolicy()), absl::Seconds(20));
}

// The gang of three ranks on w0..w2 reports at kT0 (after step 5), then nothing moves:
// each row gives what the ranks last said and when the check runs.
TEST(GangProgressTest, WhoIsBlamed) {
  struct Row {
    const char* name;
    v1::RankProgress ranks[3];
    absl::Duration check_after;
    bool hung;
    int rank;  // -1: nobody
    const char* reason_has;
  } rows[] = {
      {"within the bound", {P(0, 5, 40, true), P(1, 5, 40, true), P(2, 5, 39, false, 9)}, absl::Seconds(9), false, 0, ""},
      {"silent rank", {P(0, 5, 40, true), P(1, 5, 40, true), P(2, 5, 39, false, 11)}, absl::Seconds(11), true, 2,
       "rank 2 on worker w2 stopped reporting progress 11 s before"},
      {"silent longest wins", {P(0, 5, 40, true, 4), P(1, 5, 40, true, 12), P(2, 5, 39, false, 11)},
       absl::Seconds(11), true, 1, "rank 1 on worker w1 stopped"},
      {"not in the collective", {P(0, 5, 40, true), P(1, 5, 39, false), P(2, 5, 40, true)}, absl::Seconds(11), true,
       1, "rank 1 on worker w1 has not entered collective 40 that ranks 0,2 wait in: it is not in a collective"},
      {"in an earlier collective", {P(0, 5, 41, true), P(1, 5, 41, true), P(2, 5, 40, true)}, absl::Seconds(11),
       true, 2, "has not entered collective 41 that ranks 0,1 wait in: it waits in collective 40"},
      {"furthest behind", {P(0, 5, 41, true), P(1, 5, 39, false), P(2, 5, 40, false)}, absl::Seconds(11), true, 1,
       "that rank 0 waits in"},
      {"every rank waits", {P(0, 5, 40, true), P(1, 5, 40, true), P(2, 5, 40, true)}, absl::Seconds(11), true, -1,
       "every rank waits in collective 40 (no rank to blame)"},
      {"every rank computes", {P(0, 5, 40, false), P(1, 5, 40, false), P(2, 5, 40, false)}, absl::Seconds(60),
       false, 0, ""},
  };
  for (const Row& r : rows) {
    GangProgress g;
    g.OnStep(5, kT0);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(g.OnProgress("w" + std::to_string(i), r.ranks[i], 3, kT0)) << r.name;
    std::optional<HangVerdict> v = g.Check(kT0 + r.check_after, 3, TestPolicy());
    ASSERT_EQ(v.has_value(), r.hung) << r.name;
    if (!r.hung) continue;
    EXPECT_EQ(v->rank, r.rank) << r.name;
    EXPECT_EQ(v->worker, r.rank < 0 ? "" : "w" + std::to_string(r.rank)) << r.name;
    EXPECT_NE(v->reason.find(r.reason_has), std::string::npos) << r.name << ": " << v->reason;
    EXPECT_EQ(v->reason.rfind("hung: no progress for 11s after step 5", 0), 0u) << v->reason;
  }
}

// A live rank outside collectives after a step that checkpoints (every 4), evaluates
// (every 6) or is the last (20) is working: not blamed, and no verdict when only it is
// behind. A silent one is blamed whatever its step.
TEST(GangProgressTest, SavingEvaluatingOrExportingIsNotAHang) {
  const PauseSteps pauses{4, 6, 20};
  struct Row {
    int64_t step;
    bool silent;
    bool hung;
  } rows[] = {{8, false, false}, {12, false, false}, {20, false, false}, {21, false, false},
              {7, false, true},  {8, true, true}};
  for (const Row& r : rows) {
    GangProgress g;
    g.OnStep(r.step, kT0);
    g.OnProgress("w0", P(0, r.step, 40, true), 2, kT0);
    g.OnProgress("w1", P(1, r.step, 39, false, r.silent ? 11 : 0.5), 2, kT0);
    std::optional<HangVerdict> v = g.Check(kT0 + absl::Seconds(11), 2, TestPolicy(), pauses);
    EXPECT_EQ(v.has_value(), r.hung) << r.step << (r.silent ? " silent" : "");
    if (v.has_value()) EXPECT_EQ(v->rank, 1);
  }
  EXPECT_FALSE(PauseSteps{}.At(5));
}

TEST(GangProgressTest, ActivityRestartsTheClock) {
  GangProgress g;
  g.OnStep(1, kT0);
  for (int i = 0; i < 2; ++i) g.OnProgress("w", P(i, 1, 10, true), 2, kT0);
  // Rank 1 moves on at +8 s (a new collective): 11 s after kT0 is only 3 s idle.
  g.OnProgress("w", P(1, 1, 11, true), 2, kT0 + absl::Seconds(8));
  EXPECT_FALSE(g.Check(kT0 + absl::Seconds(11), 2, TestPolicy()).has_value());
  // The same report again is not activity.
  g.OnProgress("w", P(1, 1, 11, true), 2, kT0 + absl::Seconds(12));
  EXPECT_TRUE(g.Check(kT0 + absl::Seconds(19), 2, TestPolicy()).has_value());
  // A step report is.
  g.OnStep(2, kT0 + absl::Seconds(19));
  EXPECT_FALSE(g.Check(kT0 + absl::Seconds(25), 2, TestPolicy()).has_value());
}

TEST(GangProgressTest, NotJudgedUntilEveryRankReportedAndAStepRan) {
  GangProgress g;
  g.OnProgress("w0", P(0, 0, 3, true), 2, kT0);
  g.OnProgress("w1", P(1, 0, 2, false, 50), 2, kT0);
  EXPECT_FALSE(g.Check(kT0 + absl::Hours(1), 2, TestPolicy()).has_value());  // no step yet
  g.OnStep(1, kT0);
  EXPECT_TRUE(g.Check(kT0 + absl::Hours(1), 2, TestPolicy()).has_value());
  EXPECT_FALSE(g.Check(kT0 + absl::Hours(1), 3, TestPolicy()).has_value());  // rank 2 never reported
  HangPolicy off = TestPolicy();
  off.floor = absl::ZeroDuration();
  EXPECT_FALSE(g.Check(kT0 + absl::Hours(1), 2, off).has_value());
}

TEST(GangProgressTest, HostileReportsAreRefused) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  v1::RankProgress bad[] = {P(-1, 0, 0, false), P(2, 0, 0, false), P(0, -1, 0, false), P(0, 0, -5, false),
                            P(0, 0, 0, false, nan), P(0, 0, 0, false, inf), P(0, 0, 0, false, -1),
                            P(0, 0, 0, false, 1e12)};
  bad[0].set_rank(-1);
  for (v1::RankProgress& p : bad) {
    GangProgress g;
    EXPECT_FALSE(g.OnProgress("w", p, 2, kT0)) << p.ShortDebugString();
    EXPECT_EQ(g.ranks_reported(), 0u);
  }
  v1::RankProgress busy = P(0, 0, 0, false);
  busy.set_busy_seconds(nan);
  GangProgress g;
  EXPECT_FALSE(g.OnProgress("w", busy, 2, kT0));
}

}  // namespace
}  // namespace llamafleet
