// Scheduler rules (scheduler_fixture.h): preemption: the smallest set of victims that frees
// a gang, its cooldown, and its interplay with backfill.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace llamafleet::sched {
namespace {

// ---- preemption --------------------------------------------------------------------

struct PreemptRow {
  std::string name;
  std::vector<Worker> workers;
  std::vector<RunningJob> running;
  PendingJob job;
  std::vector<int64_t> want_victims;  // empty: no preemption
  PendingCode want_code;
};

TEST_F(SchedulerTest, PreemptionPicksTheSmallestSetThatFreesAWholeGang) {
  absl::Time t = Now();
  auto old = t - absl::Hours(2);
  auto recent = t - absl::Hours(1);
  std::vector<PreemptRow> rows = {
      {"fewest GPUs lost",
       {W("a", 8), W("b", 8)},
       {R(11, {{"a", 8}}, 0, old), R(12, {{"b", 2}}, 0, old), R(13, {{"b", 2}}, 0, old)},
       P(1, 1, 6, 5, t),
       {12},
       PendingCode::kWaitingForPreemption},
      {"one small victim rather than a big one",
       {W("a", 8)},
       {R(11, {{"a", 6}}, 0, old), R(12, {{"a", 2}}, 0, old)},
       P(1, 1, 2, 5, t),
       {12},
       PendingCode::kWaitingForPreemption},
      {"two small victims rather than one bigger",
       {W("a", 8)},
       {R(11, {{"a", 5}}, 0, old), R(12, {{"a", 1}}, 0, old), R(13, {{"a", 2}}, 0, old)},
       P(1, 1, 3, 5, t),
       {12, 13},
       PendingCode::kWaitingForPreemption},
      {"then lower priority",
       {W("a", 8), W("b", 8)},
       {R(11, {{"a", 8}}, 2, old), R(12, {{"b", 8}}, 1, old)},
       P(1, 1, 8, 5, t),
       {12},
       PendingCode::kWaitingForPreemption},
      {"then most recently started",
       {W("a", 8), W("b", 8)},
       {R(11, {{"a", 8}}, 1, old), R(12, {{"b", 8}}, 1, recent)},
       P(1, 1, 8, 5, t),
       {12},
       PendingCode::kWaitingForPreemption},
      {"a whole gang across nodes",
       {W("a", 8), W("b", 8), W("c", 8)},
       {R(11, {{"a", 8}, {"b", 8}}, 0, old), R(12, {{"c", 8}}, 3, old)},
       P(1, 2, 8, 5, t),
       {11},
       PendingCode::kWaitingForPreemption},
      {"multi-node victim counted once",
       // 11 (8 GPUs over a and b) frees both nodes; 12 + 13 would lose 16.
       {W("a", 8), W("b", 8), W("c", 8)},
       {R(11, {{"a", 4}, {"b", 4}}, 0, old), R(12, {{"a", 4}, {"x", 4}}, 0, old),
        R(13, {{"b", 4}, {"y", 4}}, 0, old), R(14, {{"c", 8}}, 4, old)},
       P(1, 2, 4, 5, t),
       {11},
       PendingCode::kWaitingForPreemption},
      {"never if it would not make the job fit",
       {W("a", 8), W("b", 8)},
       {R(11, {{"a", 8}}, 0, old), R(12, {{"b", 8}}, 9, old)},
       P(1, 2, 8, 5, t),
       {},
       PendingCode::kInsufficientCapacity},
      {"equal priority is never a victim",
       {W("a", 8)},
       {R(11, {{"a", 8}}, 5, old)},
       P(1, 1, 8, 5, t),
       {},
       PendingCode::kInsufficientCapacity},
      {"free nodes first, then the cheapest",
       {W("a", 8), W("b", 8), W("c", 8)},
       {R(11, {{"a", 8}}, 0, old), R(12, {{"c", 4}}, 0, old)},
       P(1, 2, 8, 5, t),
       {12},
       PendingCode::kWaitingForPreemption},
  };
  for (const PreemptRow& row : rows) {
    SCOPED_TRACE(row.name);
    Decisions d = Run({row.job}, row.workers, row.running);
    EXPECT_TRUE(d.placements.empty());
    EXPECT_EQ(Victims(d), row.want_victims);
    for (const Preemption& p : d.preemptions) EXPECT_EQ(p.for_job_id, row.job.job_id);
    ASSERT_EQ(d.pending.size(), 1u);
    EXPECT_EQ(d.pending[0].code, row.want_code) << d.pending[0].message;
  }
}

TEST_F(SchedulerTest, PreemptionOnAWorkerWithManySmallJobsIsGreedy) {
  // More than 8 eligible jobs on one worker: victims by GPUs freed here per GPU lost,
  // then job id (not every subset). Job 30 runs on two workers: it loses 2 GPUs to free
  // 1 here, so it comes last.
  absl::Time t = Now();
  std::vector<RunningJob> running;
  for (int i = 0; i < 10; ++i) {
    running.push_back(R(11 + i, {{"a", 1}}, 0, t - absl::Minutes(100 - i)));
  }
  running.push_back(R(30, {{"a", 1}, {"b", 1}}, 0, t));
  Decisions d = Run({P(1, 1, 10, 5, t)}, {W("a", 16), W("b", 8)}, running);
  EXPECT_EQ(Victims(d), (std::vector<int64_t>{11, 12, 13, 14, 15}));
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].code, PendingCode::kWaitingForPreemption);
}

TEST_F(SchedulerTest, MultiNodeVictimCountsAsFreedOnEveryWorkerItRuns) {
  // Job 11 runs on both workers: once it is taken for one of them, the other's victim set
  // is recomputed with 11's GPUs there counted as free. The gang needs every GPU of both.
  absl::Time t = Now();
  std::vector<RunningJob> running = {R(11, {{"a", 4}, {"b", 4}}, 0, t), R(12, {{"a", 4}}, 0, t),
                                     R(13, {{"b", 2}}, 0, t), R(14, {{"b", 2}}, 0, t)};
  Decisions d = Run({P(1, 2, 8, 5, t)}, {W("a", 8), W("b", 8)}, running);
  EXPECT_EQ(Victims(d), (std::vector<int64_t>{11, 12, 13, 14}));
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].message,
            "needs 2 nodes with 8 free GPUs and instance type p5.48xlarge; preempting "
            "lower-priority jobs 11, 12, 13, 14");
}

TEST_F(SchedulerTest, PreemptionMessageNamesVictims) {
  absl::Time t = Now();
  Decisions d =
      Run({P(1, 1, 8, 5, t)}, {W("a", 8)}, {R(11, {{"a", 4}}, 0, t), R(12, {{"a", 4}}, 0, t)});
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].message,
            "needs 1 node with 8 free GPUs and instance type p5.48xlarge; preempting "
            "lower-priority jobs 11, 12");
}

TEST_F(SchedulerTest, PreemptionCanBeDisabled) {
  config_.preemption = false;
  Decisions d = Run({P(1, 1, 8, 5, Now())}, {W("a", 8)}, {R(11, {{"a", 8}}, 0, Now())});
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_EQ(d.pending[0].code, PendingCode::kInsufficientCapacity);
}

TEST_F(SchedulerTest, VictimAlreadyPreemptingCountsAsFreeing) {
  absl::Time t = Now();
  std::vector<Worker> workers = {W("a", 8), W("b", 8)};
  std::vector<RunningJob> running = {R(11, {{"a", 8}}, 0, t), R(12, {{"b", 8}}, 0, t)};
  Decisions d = Run({P(1, 1, 8, 5, t)}, workers, running);
  ASSERT_EQ(Victims(d), (std::vector<int64_t>{11}));  // most recent tie -> lower id? both t

  // Next pass: 11 is stopping. No second victim for the same job.
  running[0].preempting = true;
  clock_.Advance(absl::Seconds(5));
  d = Run({P(1, 1, 8, 5, t)}, workers, running);
  EXPECT_TRUE(d.preemptions.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].code, PendingCode::kWaitingForPreemption);

  // A second high-priority job is not satisfied by the same freeing GPUs: it needs its own.
  d = Run({P(1, 1, 8, 5, t), P(2, 1, 8, 5, t + absl::Seconds(1))}, workers, running);
  EXPECT_EQ(Victims(d), (std::vector<int64_t>{12}));
  EXPECT_EQ(d.preemptions[0].for_job_id, 2);
}

TEST_F(SchedulerTest, CapacityWaitingForAPreemptionIsNotBackfilled) {
  // Job 1 preempts 11 on "a" and also needs "b"'s free GPUs; job 2 (lower priority) may
  // not take "b" meanwhile.
  absl::Time t = Now();
  Decisions d =
      Run({P(1, 2, 8, 5, t), P(2, 1, 8, 0, t)}, {W("a", 8), W("b", 8)}, {R(11, {{"a", 8}}, 0, t)});
  EXPECT_EQ(Victims(d), (std::vector<int64_t>{11}));
  EXPECT_TRUE(d.placements.empty());
  EXPECT_EQ(FindPending(d, 2)->code, PendingCode::kBlockedByReservation);
}

TEST_F(SchedulerTest, RecentlyPreemptedJobsAreNotVictimsDuringCooldown) {
  absl::Time t = Now();
  std::vector<RunningJob> running = {R(11, {{"a", 8}}, 0, t)};
  running[0].last_preempted = t - absl::Minutes(3);
  Decisions d = Run({P(1, 1, 8, 5, t)}, {W("a", 8)}, running);
  EXPECT_TRUE(d.preemptions.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].code, PendingCode::kPreemptionCooldown);
  EXPECT_NE(d.pending[0].message.find("preempted less than 10m ago"), std::string::npos)
      << d.pending[0].message;

  clock_.Advance(absl::Minutes(7));
  d = Run({P(1, 1, 8, 5, t)}, {W("a", 8)}, running);
  EXPECT_EQ(Victims(d), (std::vector<int64_t>{11}));
}

}  // namespace
}  // namespace llamafleet::sched
