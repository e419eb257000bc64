// Scheduler rules (scheduler_fixture.h): elastic gangs within their node range, and
// reservations that keep large jobs from starving.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace llamafleet::sched {
namespace {

// ---- elastic gangs ----------------------------------------------------------------

PendingJob Elastic(int64_t id, int nodes, int min_nodes, absl::Time queued) {
  PendingJob j = P(id, nodes, 8, 0, queued);
  j.min_nodes = min_nodes;
  return j;
}

TEST_F(SchedulerTest, ElasticJobStartsOnWhatIsFreeWithinItsRange) {
  std::vector<Worker> workers = {W("a", 8), W("b", 8), W("c", 8)};
  // All three free: the preferred size.
  Decisions d = Run({Elastic(1, 3, 2, Now())}, workers);
  ASSERT_EQ(Placed(d), (std::vector<int64_t>{1}));
  EXPECT_EQ(d.placements[0].allocations.size(), 3u);
  // One busy: two nodes, not a wait.
  std::vector<RunningJob> running = {R(9, {{"c", 4}}, 0, Now())};
  d = Run({Elastic(1, 3, 2, Now())}, workers, running);
  ASSERT_EQ(Placed(d), (std::vector<int64_t>{1}));
  EXPECT_EQ(WorkersOf(d.placements[0]), (std::vector<std::string>{"a", "b"}));
  // Two busy: below min_nodes, it waits like a rigid job of 3.
  running.push_back(R(10, {{"b", 8}}, 0, Now()));
  d = Run({Elastic(1, 3, 2, Now())}, workers, running);
  EXPECT_TRUE(d.placements.empty());
  EXPECT_EQ(FindPending(d, 1)->code, PendingCode::kInsufficientCapacity);
  // A lost worker (only two exist): not larger than the cluster, it runs on the two.
  PendingJob survivor = Elastic(1, 3, 2, Now());
  survivor.excluded_workers = {"c"};
  d = Run({survivor}, workers);
  ASSERT_EQ(Placed(d), (std::vector<int64_t>{1}));
  EXPECT_EQ(WorkersOf(d.placements[0]), (std::vector<std::string>{"a", "b"}));
  d = Run({Elastic(1, 3, 2, Now())}, {W("a", 8), W("b", 8)});
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{1}));
}

TEST_F(SchedulerTest, ElasticJobNeverTakesGpusReservedForAStarvingRigidJob) {
  absl::Time t = Now();
  // A starving rigid 2-node job reserves a and b (c frees up in 2 hours, a and b soon);
  // the elastic job behind it could run on a and b now, but they are held.
  std::vector<Worker> workers = {W("a", 8), W("b", 8), W("c", 8)};
  std::vector<RunningJob> running = {R(91, {{"a", 4}}, 0, t, t + absl::Minutes(10)),
                                     R(92, {{"c", 8}}, 0, t, t + absl::Hours(2))};
  std::vector<PendingJob> pending = {P(1, 2, 8, 0, t - absl::Hours(1)), Elastic(2, 3, 1, t)};
  Decisions d = Run(pending, workers, running);
  EXPECT_TRUE(d.placements.empty());
  EXPECT_NE(FindPending(d, 1)->message.find("reserved for it"), std::string::npos);
  ASSERT_NE(FindPending(d, 2), nullptr);
  // Without the reservation (job 1 not yet starving) the elastic job runs on b alone.
  pending[0].queued_since = t - absl::Minutes(1);
  d = Run(pending, workers, running);
  ASSERT_EQ(Placed(d), (std::vector<int64_t>{2}));
  EXPECT_EQ(WorkersOf(d.placements[0]), (std::vector<std::string>{"b"}));
}

TEST_F(SchedulerTest, ElasticJobShrinksToItsQuota) {
  std::vector<Worker> workers = {W("a", 8), W("b", 8), W("c", 8)};
  Decisions d = Run({Elastic(1, 3, 2, Now())}, workers, {}, {{"default", QueueConfig{16}}});
  ASSERT_EQ(Placed(d), (std::vector<int64_t>{1}));
  EXPECT_EQ(d.placements[0].allocations.size(), 2u);
  d = Run({Elastic(1, 3, 3, Now())}, workers, {}, {{"default", QueueConfig{16}}});
  EXPECT_EQ(FindPending(d, 1)->code, PendingCode::kQuotaExceeded);
}

TEST_F(SchedulerTest, ElasticJobShrunkByItsQuotaWaitsWhenNothingIsFree) {
  // The quota leaves room for one node, but no worker is free: the job is blocked (not
  // over quota), as a rigid job of `nodes` nodes.
  absl::Time t = Now();
  std::vector<RunningJob> running = {R(91, {{"a", 8}}, 0, t), R(92, {{"b", 8}}, 0, t, {}, "other")};
  Decisions d =
      Run({Elastic(1, 4, 1, t)}, {W("a", 8), W("b", 8)}, running, {{"default", QueueConfig{16}}});
  EXPECT_TRUE(d.placements.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].code, PendingCode::kInsufficientCapacity);
  EXPECT_EQ(d.pending[0].message,
            "needs 4 nodes with 8 free GPUs and instance type p5.48xlarge; 0 match");
}

// ---- reservations (no starvation) -------------------------------------------------

TEST_F(SchedulerTest, StarvingJobReservesTheWorkersThatFreeSoonest) {
  // 4 workers, each half busy. "c" and "d" free up in 10 and 20 minutes, "a" and "b" in
  // 2 and 3 hours. A 2x8 job waiting longer than reservation_after reserves c and d; a
  // 4-GPU job without a duration may not take their free halves, but may use a and b.
  absl::Time t = Now();
  std::vector<RunningJob> running = {
      R(91, {{"a", 4}}, 0, t, t + absl::Hours(2)),
      R(92, {{"b", 4}}, 0, t, t + absl::Hours(3)),
      R(93, {{"c", 4}}, 0, t, t + absl::Minutes(10)),
      R(94, {{"d", 4}}, 0, t, t + absl::Minutes(20)),
  };
  std::vector<Worker> workers = {W("a", 8), W("b", 8), W("c", 8), W("d", 8)};
  std::vector<PendingJob> pending = {
      P(1, 2, 8, 0, t - absl::Minutes(31)), P(2, 1, 4, 0, t - absl::Minutes(1)),
      P(3, 1, 4, 0, t - absl::Minutes(1)), P(4, 1, 4, 0, t - absl::Seconds(30))};
  Decisions d = Run(pending, workers, running);
  ASSERT_EQ(Placed(d), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(WorkersOf(*FindPlacement(d, 2)), (std::vector<std::string>{"a"}));
  EXPECT_EQ(WorkersOf(*FindPlacement(d, 3)), (std::vector<std::string>{"b"}));
  const Pending* big = FindPending(d, 1);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->code, PendingCode::kInsufficientCapacity);
  ASSERT_TRUE(big->estimated_start.has_value());
  EXPECT_EQ(*big->estimated_start, t + absl::Minutes(20));
  EXPECT_NE(big->message.find("2 workers are reserved for it"), std::string::npos) << big->message;
  const Pending* blocked = FindPending(d, 4);
  ASSERT_NE(blocked, nullptr);
  EXPECT_EQ(blocked->code, PendingCode::kBlockedByReservation);
  EXPECT_EQ(blocked->message,
            "needs 1 node with 4 free GPUs and instance type p5.48xlarge; enough are free, but "
            "held for job 1");

  // The same job waiting less than reservation_after holds nothing: job 4 backfills.
  pending[0].queued_since = t - absl::Minutes(29);
  d = Run(pending, workers, running);
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{2, 3, 4}));
}

TEST_F(SchedulerTest, ReservationHoldsOnlyWhatItNeedsAtItsStart) {
  absl::Time t = Now();
  // "b" has 16 GPUs, 4 free, 12 busy until t+10m. A starving 1x16 job needs all 4 free
  // ones at t+10m: nothing may be backfilled there.
  std::vector<Worker> workers = {W("b", 16)};
  std::vector<RunningJob> running = {R(91, {{"b", 4}}, 0, t, t + absl::Minutes(10)),
                                     R(92, {{"b", 8}}, 0, t, t + absl::Minutes(10))};
  std::vector<PendingJob> pending = {P(1, 1, 16, 0, t - absl::Hours(1)), P(2, 1, 4, 0, t)};
  Decisions d = Run(pending, workers, running);
  EXPECT_TRUE(d.placements.empty());
  EXPECT_EQ(FindPending(d, 1)->estimated_start, t + absl::Minutes(10));
  EXPECT_EQ(FindPending(d, 2)->code, PendingCode::kBlockedByReservation);

  // A starving 2x8 job on "b" + "c" (c busy until t+5m): at t+10m "b" has 16 free and the
  // job needs 8 of them, so the 4 free on "b" now are spare and job 2 may take them.
  workers = {W("b", 16), W("c", 8)};
  running = {R(91, {{"b", 12}}, 0, t, t + absl::Minutes(10)),
             R(93, {{"c", 8}}, 0, t, t + absl::Minutes(5))};
  pending = {P(1, 2, 8, 0, t - absl::Hours(1)), P(2, 1, 4, 0, t)};
  d = Run(pending, workers, running);
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{2}));
  EXPECT_EQ(FindPending(d, 1)->estimated_start, t + absl::Minutes(10));
}

TEST_F(SchedulerTest, ShortJobsMayUseReservedGpusIfTheyEndFirst) {
  absl::Time t = Now();
  std::vector<RunningJob> running = {R(91, {{"a", 4}}, 0, t, t + absl::Minutes(30))};
  std::vector<PendingJob> pending = {P(1, 1, 8, 0, t - absl::Hours(1)), P(2, 1, 4, 0, t),
                                     P(3, 1, 4, 0, t)};
  pending[1].expected_duration = absl::Minutes(45);  // would delay job 1
  pending[2].expected_duration = absl::Minutes(20);  // ends before job 1 can start
  Decisions d = Run(pending, {W("a", 8)}, running);
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{3}));
  EXPECT_EQ(FindPending(d, 2)->code, PendingCode::kBlockedByReservation);
  EXPECT_EQ(*FindPending(d, 1)->estimated_start, t + absl::Minutes(30));
}

TEST_F(SchedulerTest, ReservationWithUnknownEndHoldsTheClosestWorkers) {
  // Nothing has an expected end: the job reserves the workers missing the fewest GPUs.
  absl::Time t = Now();
  std::vector<RunningJob> running = {R(91, {{"a", 6}}, 0, t), R(92, {{"b", 2}}, 0, t),
                                     R(93, {{"c", 4}}, 0, t)};
  std::vector<PendingJob> pending = {P(1, 2, 8, 0, t - absl::Hours(1)), P(2, 1, 2, 0, t)};
  Decisions d = Run(pending, {W("a", 8), W("b", 8), W("c", 8)}, running);
  // b (6 free) and c (4 free) are reserved; job 2 goes to a.
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{2}));
  EXPECT_EQ(WorkersOf(d.placements[0]), (std::vector<std::string>{"a"}));
  EXPECT_FALSE(FindPending(d, 1)->estimated_start.has_value());
}

TEST_F(SchedulerTest, UnknownReservationStartAdmitsNoBackfillIntoIt) {
  // The reservation's start is unknown (the running job has no expected end), so even a
  // short job cannot be shown to end before it.
  absl::Time t = Now();
  std::vector<PendingJob> pending = {P(1, 1, 8, 0, t - absl::Hours(1)), P(2, 1, 4, 0, t)};
  pending[1].expected_duration = absl::Minutes(1);
  Decisions d = Run(pending, {W("a", 8)}, {R(91, {{"a", 4}}, 0, t)});
  EXPECT_TRUE(d.placements.empty());
  EXPECT_EQ(FindPending(d, 2)->code, PendingCode::kBlockedByReservation);
}

TEST_F(SchedulerTest, ReservationsPerPassAreCapped) {
  // Two starving gangs, room for neither; with a cap of 1 only the first (in scheduling
  // order) holds workers, so the 4-GPU job may use the second's would-be workers.
  config_.max_reservations = 1;
  absl::Time t = Now();
  std::vector<RunningJob> running = {R(91, {{"a", 4}}, 0, t), R(92, {{"b", 4}}, 0, t)};
  std::vector<PendingJob> pending = {P(1, 1, 8, 0, t - absl::Hours(2)),
                                     P(2, 1, 8, 0, t - absl::Hours(1)), P(3, 1, 4, 0, t)};
  Decisions d = Run(pending, {W("a", 8), W("b", 8)}, running);
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{3}));
  EXPECT_NE(FindPending(d, 1)->message.find("reserved for it"), std::string::npos);
  EXPECT_EQ(FindPending(d, 2)->message.find("reserved for it"), std::string::npos);
}

}  // namespace
}  // namespace llamafleet::sched
