// Scheduler rules, one block of tests per rule, with a fake clock. The regression tests at
// the end reproduce failures of the schedulers users compare us with (REFERENCE.md).
#include "scheduler/scheduler.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "common/clock.h"

namespace llamafleet::sched {
namespace {

using Labels = std::map<std::string, std::string>;

Worker W(std::string id, int gpus, std::string type = "p5.48xlarge", int efa = 0,
         Labels labels = {}) {
  Worker w;
  w.id = std::move(id);
  w.gpus = gpus;
  w.instance_type = std::move(type);
  w.efa = efa;
  w.labels = std::move(labels);
  return w;
}

PendingJob P(int64_t id, int nodes, int gpus, int priority, absl::Time queued,
             std::string queue = "default") {
  PendingJob j;
  j.job_id = id;
  j.nodes = nodes;
  j.gpus_per_node = gpus;
  j.priority = priority;
  j.queued_since = queued;
  j.queue = std::move(queue);
  j.instance_type = "p5.48xlarge";
  return j;
}

RunningJob R(int64_t id, std::vector<Allocation> allocs, int priority, absl::Time started,
             std::optional<absl::Time> expected_end = std::nullopt, std::string queue = "default") {
  RunningJob r;
  r.job_id = id;
  r.allocations = std::move(allocs);
  r.priority = priority;
  r.started = started;
  r.expected_end = expected_end;
  r.queue = std::move(queue);
  return r;
}

const Placement* FindPlacement(const Decisions& d, int64_t id) {
  for (const Placement& p : d.placements) {
    if (p.job_id == id) return &p;
  }
  return nullptr;
}

const Pending* FindPending(const Decisions& d, int64_t id) {
  for (const Pending& p : d.pending) {
    if (p.job_id == id) return &p;
  }
  return nullptr;
}

std::vector<std::string> WorkersOf(const Placement& p) {
  std::vector<std::string> ids;
  for (const Allocation& a : p.allocations) ids.push_back(a.worker_id);
  return ids;
}

std::vector<int64_t> Placed(const Decisions& d) {
  std::vector<int64_t> ids;
  for (const Placement& p : d.placements) ids.push_back(p.job_id);
  return ids;
}

std::vector<int64_t> Victims(const Decisions& d) {
  std::vector<int64_t> ids;
  for (const Preemption& p : d.preemptions) ids.push_back(p.victim_job_id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

class SchedulerTest : public ::testing::Test {
 protected:
  Decisions Run(const std::vector<PendingJob>& pending, const std::vector<Worker>& workers,
                const std::vector<RunningJob>& running = {},
                const std::map<std::string, QueueConfig>& queues = {}) {
    return Scheduler(config_).Schedule(pending, workers, running, queues, clock_.Now());
  }
  absl::Time Now() const { return clock_.Now(); }

  FakeClock clock_;
  Config config_;
};

// ---- gang placement, all or nothing ----------------------------------------------

TEST_F(SchedulerTest, GangGetsDistinctWorkersWithEnoughGpus) {
  Decisions d = Run({P(1, 2, 8, 0, Now())}, {W("a", 8), W("b", 8), W("c", 8)});
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(WorkersOf(d.placements[0]), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.placements[0].allocations[0].gpus, 8);
  EXPECT_TRUE(d.pending.empty());
}

// ---- memory fit -----------------------------------------------------------------

TEST_F(SchedulerTest, JobGoesOnlyToWorkersWhoseGpusHoldItsMemoryEstimate) {
  Worker small = W("small", 8, ""), big = W("big", 8, ""), cpu = W("cpu", 8, "");
  small.gpu_memory_bytes = int64_t{40} << 30;
  big.gpu_memory_bytes = int64_t{80} << 30;
  PendingJob job = P(1, 1, 8, 0, Now());
  job.instance_type.clear();
  job.memory_per_gpu_bytes = int64_t{50} << 30;
  Decisions d = Run({job}, {small, big});
  ASSERT_EQ(Placed(d), (std::vector<int64_t>{1}));
  EXPECT_EQ(WorkersOf(d.placements[0]), (std::vector<std::string>{"big"}));

  // Too big for every GPU: the reason names the estimate and the largest GPU.
  job.memory_per_gpu_bytes = int64_t{90} << 30;
  d = Run({job}, {small, big});
  const Pending* p = FindPending(d, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->code, PendingCode::kNoMatchingWorkers);
  EXPECT_EQ(p->message,
            "needs 1 node with 8 free GPUs and 90.0 GiB per GPU (memory estimate); no schedulable "
            "worker matches (the largest GPUs otherwise matching have 80.0 GiB)");
  // A worker without a GPU memory figure (a CPU worker) is not checked.
  EXPECT_EQ(Placed(Run({job}, {small, cpu})), (std::vector<int64_t>{1}));
}

TEST_F(SchedulerTest, GangIsAllOrNothing) {
  // Two of three nodes are available: nothing is placed, nothing is held half-way.
  std::vector<RunningJob> running = {R(9, {{"c", 4}}, 0, Now())};
  Decisions d = Run({P(1, 3, 8, 0, Now()), P(2, 1, 8, 0, Now() + absl::Seconds(1))},
                    {W("a", 8), W("b", 8), W("c", 8)}, running);
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{2}));
  const Pending* p = FindPending(d, 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->code, PendingCode::kInsufficientCapacity);
  EXPECT_EQ(p->message, "needs 3 nodes with 8 free GPUs and instance type p5.48xlarge; 2 match");
}

TEST_F(SchedulerTest, JobsShareAWorkerAndBestFitKeepsWholeNodesFree) {
  // "a" has 4 free, "b" is empty: the 4-GPU job goes to "a" so that "b" stays whole for
  // the 8-GPU job behind it.
  std::vector<RunningJob> running = {R(9, {{"a", 4}}, 0, Now())};
  Decisions d = Run({P(1, 1, 4, 0, Now()), P(2, 1, 8, 0, Now() + absl::Seconds(1))},
                    {W("a", 8), W("b", 8)}, running);
  ASSERT_EQ(d.placements.size(), 2u);
  EXPECT_EQ(WorkersOf(*FindPlacement(d, 1)), (std::vector<std::string>{"a"}));
  EXPECT_EQ(WorkersOf(*FindPlacement(d, 2)), (std::vector<std::string>{"b"}));

  // Two 2-GPU jobs and a 4-GPU job fill one worker together.
  d = Run({P(1, 1, 2, 0, Now()), P(2, 1, 2, 0, Now()), P(3, 1, 4, 0, Now())}, {W("a", 8)});
  EXPECT_EQ(d.placements.size(), 3u);
}

TEST_F(SchedulerTest, CpuWorkerReportsRanksAsGpus) {
  PendingJob j = P(1, 2, 2, 0, Now());
  j.instance_type = "";  // any
  Decisions d = Run({j}, {W("cpu-0", 2, "cpu"), W("cpu-1", 2, "cpu")});
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(WorkersOf(d.placements[0]), (std::vector<std::string>{"cpu-0", "cpu-1"}));
}

TEST_F(SchedulerTest, UnschedulableWorkersAreNotUsed) {
  std::vector<Worker> workers = {W("a", 8), W("b", 8)};
  workers[0].schedulable = false;
  Decisions d = Run({P(1, 1, 8, 0, Now()), P(2, 1, 8, 0, Now())}, workers);
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{1}));
  EXPECT_EQ(WorkersOf(d.placements[0]), (std::vector<std::string>{"b"}));
}

// Selectors, table-style: each row is one job against the same cluster.
TEST_F(SchedulerTest, SelectorsMatchInstanceTypeEfaLabelsAndExclusions) {
  std::vector<Worker> workers = {
      W("p4-a", 8, "p4d.24xlarge", 4, {{"zone", "a"}}),
      W("p5-a", 8, "p5.48xlarge", 32, {{"zone", "a"}}),
      W("p5-b", 8, "p5.48xlarge", 32, {{"zone", "b"}}),
      W("g5-b", 4, "g5.12xlarge", 0, {{"zone", "b"}}),
  };
  struct Row {
    std::string name;
    std::string type;
    int efa;
    Labels labels;
    std::set<std::string> excluded;
    int nodes;
    int gpus;
    std::vector<std::string> want_workers;  // empty: pending with want_code
    PendingCode want_code;
    std::string want_message;
  };
  std::vector<Row> rows = {
      {"any type", "", 0, {}, {}, 1, 4, {"g5-b"}, {}, ""},
      {"instance type", "p4d.24xlarge", 0, {}, {}, 1, 8, {"p4-a"}, {}, ""},
      {"efa", "", 8, {}, {}, 2, 8, {"p5-a", "p5-b"}, {}, ""},
      {"label", "p5.48xlarge", 0, {{"zone", "b"}}, {}, 1, 8, {"p5-b"}, {}, ""},
      {"excluded", "p5.48xlarge", 0, {}, {"p5-a"}, 1, 8, {"p5-b"}, {}, ""},
      {"no such type",
       "trn1.32xlarge",
       0,
       {},
       {},
       1,
       8,
       {},
       PendingCode::kNoMatchingWorkers,
       "needs 1 node with 8 free GPUs and instance type trn1.32xlarge; no schedulable worker "
       "matches"},
      {"no such label",
       "",
       0,
       {{"zone", "c"}},
       {},
       1,
       1,
       {},
       PendingCode::kNoMatchingWorkers,
       "needs 1 node with 1 free GPU and label zone=c; no schedulable worker matches"},
      {"too much efa",
       "",
       64,
       {},
       {},
       1,
       1,
       {},
       PendingCode::kNoMatchingWorkers,
       "needs 1 node with 1 free GPU and 64 EFA devices; no schedulable worker matches"},
      {"larger than cluster",
       "p5.48xlarge",
       32,
       {},
       {},
       3,
       8,
       {},
       PendingCode::kLargerThanCluster,
       "needs 3 nodes with 8 free GPUs, instance type p5.48xlarge and 32 EFA devices; only 2 "
       "matching workers have 8 or more GPUs in total"},
      {"gpus larger than any worker",
       "g5.12xlarge",
       0,
       {},
       {},
       1,
       8,
       {},
       PendingCode::kLargerThanCluster,
       "needs 1 node with 8 free GPUs and instance type g5.12xlarge; only 0 matching workers "
       "have 8 or more GPUs in total"},
      {"exclusions make it larger",
       "p5.48xlarge",
       0,
       {},
       {"p5-a"},
       2,
       8,
       {},
       PendingCode::kLargerThanCluster,
       "needs 2 nodes with 8 free GPUs and instance type p5.48xlarge (1 worker excluded after "
       "node faults); only 1 matching worker has 8 or more GPUs in total"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    PendingJob j = P(1, row.nodes, row.gpus, 0, Now());
    j.instance_type = row.type;
    j.efa_per_node = row.efa;
    j.node_labels = row.labels;
    j.excluded_workers = row.excluded;
    Decisions d = Run({j}, workers);
    if (!row.want_workers.empty()) {
      ASSERT_EQ(d.placements.size(), 1u);
      std::vector<std::string> got = WorkersOf(d.placements[0]);
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, row.want_workers);
    } else {
      ASSERT_EQ(d.pending.size(), 1u);
      EXPECT_EQ(d.pending[0].code, row.want_code);
      EXPECT_EQ(d.pending[0].message, row.want_message);
    }
  }
}

TEST_F(SchedulerTest, InvalidShapeIsPendingNotACrash) {
  Decisions d = Run({P(1, 0, 8, 0, Now()), P(2, 1, -1, 0, Now())}, {W("a", 8)});
  ASSERT_EQ(d.pending.size(), 2u);
  EXPECT_EQ(d.pending[0].code, PendingCode::kNoMatchingWorkers);
}

// ---- priority order, FIFO within a priority ---------------------------------------

TEST_F(SchedulerTest, PriorityThenFifoThenJobId) {
  absl::Time t = Now();
  std::vector<PendingJob> pending = {
      P(1, 1, 8, 0, t),                     // old, low priority
      P(2, 1, 8, 5, t + absl::Seconds(2)),  // high priority, queued later
      P(3, 1, 8, 5, t + absl::Seconds(1)),  // high priority, queued first
      P(4, 1, 8, 5, t + absl::Seconds(1)),  // same time as 3: lower id first
  };
  config_.preemption = false;
  Decisions d = Run(pending, {W("a", 8), W("b", 8)});
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(d.pending.size(), 2u);
  EXPECT_EQ(d.pending[0].job_id, 2);
  EXPECT_EQ(d.pending[0].queue_position, 1);
  EXPECT_EQ(d.pending[1].job_id, 1);
  EXPECT_EQ(d.pending[1].queue_position, 2);
}

// ---- quotas ------------------------------------------------------------------------

TEST_F(SchedulerTest, QueueQuotaCountsRunningAndThisPassesPlacements) {
  std::map<std::string, QueueConfig> queues = {{"research", {16}}, {"prod", {0}}};
  std::vector<RunningJob> running = {R(9, {{"a", 8}}, 0, Now(), std::nullopt, "research")};
  absl::Time t = Now();
  std::vector<PendingJob> pending = {
      P(1, 1, 4, 0, t, "research"),                     // 8 + 4 = 12: fits
      P(2, 1, 8, 0, t + absl::Seconds(1), "research"),  // 12 + 8 > 16
      P(3, 1, 4, 0, t + absl::Seconds(2), "research"),  // 12 + 4 = 16: fits
      P(4, 3, 8, 0, t + absl::Seconds(3), "research"),  // 24 > 16 ever
      P(5, 1, 8, 0, t + absl::Seconds(4), "prod"),      // unlimited
  };
  Decisions d = Run(pending, {W("a", 8), W("b", 8), W("c", 8), W("d", 8)}, running, queues);
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{1, 3, 5}));
  const Pending* p2 = FindPending(d, 2);
  ASSERT_NE(p2, nullptr);
  EXPECT_EQ(p2->code, PendingCode::kQuotaExceeded);
  EXPECT_EQ(p2->message, "queue 'research' holds 12 of its 16 GPU quota; this job needs 8 more");
  EXPECT_EQ(p2->queue_position, 1);
  const Pending* p4 = FindPending(d, 4);
  ASSERT_NE(p4, nullptr);
  EXPECT_EQ(p4->code, PendingCode::kQuotaExceeded);
  EXPECT_EQ(p4->message, "needs 24 GPUs, more than queue 'research' may ever hold (quota 16)");
  EXPECT_EQ(p4->queue_position, 2);
}

// ---- no head-of-line blocking ------------------------------------------------------

TEST_F(SchedulerTest, SmallJobsBackfillAroundABlockedLargeJob) {
  std::vector<RunningJob> running = {R(9, {{"a", 8}}, 0, Now())};
  absl::Time t = Now();
  Decisions d = Run(
      {P(1, 2, 8, 0, t), P(2, 1, 8, 0, t + absl::Seconds(1)), P(3, 1, 8, 0, t + absl::Seconds(2))},
      {W("a", 8), W("b", 8)}, running);
  EXPECT_EQ(Placed(d), (std::vector<int64_t>{2}));
  EXPECT_EQ(FindPending(d, 1)->code, PendingCode::kInsufficientCapacity);
  EXPECT_EQ(FindPending(d, 3)->code, PendingCode::kInsufficientCapacity);
}

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

// ---- explanations, positions, estimates -------------------------------------------

TEST_F(SchedulerTest, PendingMessageInTheIssuesStyle) {
  absl::Time t = Now();
  std::vector<Worker> workers;
  for (int i = 0; i < 4; ++i) workers.push_back(W(absl::StrCat("w", i), 8));
  std::vector<RunningJob> running = {R(91, {{"w0", 1}}, 0, t), R(92, {{"w1", 1}}, 0, t)};
  Decisions d = Run({P(1, 3, 8, 0, t)}, workers, running);
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].message,
            "needs 3 nodes with 8 free GPUs and instance type p5.48xlarge; 2 match");
  EXPECT_EQ(PendingCodeName(d.pending[0].code), std::string("INSUFFICIENT_CAPACITY"));
}

TEST_F(SchedulerTest, QueuePositionsAreWithinEachQueueInSchedulingOrder) {
  absl::Time t = Now();
  std::vector<PendingJob> pending = {
      P(1, 1, 8, 0, t, "a"), P(2, 1, 8, 0, t + absl::Seconds(1), "b"),
      P(3, 1, 8, 3, t + absl::Seconds(2), "a"), P(4, 1, 8, 0, t + absl::Seconds(3), "a"),
      P(5, 1, 8, 0, t + absl::Seconds(4), "b")};
  Decisions d = Run(pending, {W("x", 8)}, {R(9, {{"x", 8}}, 9, t)});
  ASSERT_EQ(d.pending.size(), 5u);
  std::map<int64_t, int> pos;
  for (const Pending& p : d.pending) pos[p.job_id] = p.queue_position;
  EXPECT_EQ(pos, (std::map<int64_t, int>{{3, 1}, {1, 2}, {4, 3}, {2, 1}, {5, 2}}));
}

TEST_F(SchedulerTest, EstimatedStartFromExpectedEnds) {
  absl::Time t = Now();
  std::vector<RunningJob> running = {
      R(91, {{"a", 8}}, 0, t, t + absl::Minutes(5)), R(92, {{"b", 4}}, 0, t, t + absl::Minutes(7)),
      R(93, {{"b", 4}}, 0, t, t + absl::Minutes(9)), R(94, {{"c", 8}}, 0, t)};
  Decisions d = Run({P(1, 2, 8, 0, t), P(2, 1, 8, 0, t), P(3, 3, 8, 0, t)},
                    {W("a", 8), W("b", 8), W("c", 8)}, running);
  ASSERT_EQ(d.pending.size(), 3u);
  EXPECT_EQ(FindPending(d, 1)->estimated_start, t + absl::Minutes(9));
  EXPECT_EQ(FindPending(d, 2)->estimated_start, t + absl::Minutes(5));
  EXPECT_FALSE(FindPending(d, 3)->estimated_start.has_value());  // c's end is unknown
}

TEST_F(SchedulerTest, BlockedMessageNamesTheFirstFiveHolders) {
  // Seven starving jobs each reserve one half-busy worker; a small job that would fit on
  // any of them names who holds the GPUs.
  absl::Time t = Now();
  std::vector<Worker> workers;
  std::vector<RunningJob> running;
  std::vector<PendingJob> pending;
  for (int i = 0; i < 7; ++i) {
    workers.push_back(W(absl::StrCat("w", i), 8));
    running.push_back(R(91 + i, {{absl::StrCat("w", i), 4}}, 0, t));
    pending.push_back(P(1 + i, 1, 8, 0, t - absl::Hours(1)));
  }
  pending.push_back(P(8, 1, 4, 0, t));
  Decisions d = Run(pending, workers, running);
  EXPECT_TRUE(d.placements.empty());
  const Pending* small = FindPending(d, 8);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->code, PendingCode::kBlockedByReservation);
  EXPECT_EQ(small->message,
            "needs 1 node with 4 free GPUs and instance type p5.48xlarge; enough are free, but "
            "held for jobs 1, 2, 3, 4, 5 and 2 more");
}

// ---- invariants --------------------------------------------------------------------

// Random clusters and queues: every pending job appears exactly once; placements never
// exceed a worker's GPUs, use distinct workers and honour selectors; the output does not
// depend on the order of the inputs.
TEST_F(SchedulerTest, RandomizedInvariantsAndDeterminism) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE(round);
    absl::Time t = Now();
    std::vector<Worker> workers;
    int nw = 1 + rng() % 12;
    for (int i = 0; i < nw; ++i) {
      workers.push_back(W(absl::StrCat("w", i), 1 + rng() % 8, rng() % 2 ? "x" : "y", rng() % 3,
                          {{"zone", rng() % 2 ? "a" : "b"}}));
      workers.back().schedulable = rng() % 8 != 0;
    }
    std::vector<RunningJob> running;
    std::map<std::string, int> used;
    for (int i = 0; i < 10; ++i) {
      const Worker& w = workers[rng() % nw];
      int g = 1 + rng() % 4;
      if (used[w.id] + g > w.gpus) continue;
      used[w.id] += g;
      RunningJob r =
          R(1000 + i, {{w.id, g}}, rng() % 3, t - absl::Minutes(rng() % 60),
            rng() % 2 ? std::optional<absl::Time>(t + absl::Minutes(rng() % 60)) : std::nullopt,
            rng() % 2 ? "q1" : "q2");
      r.preempting = rng() % 6 == 0;
      r.last_preempted = rng() % 4 == 0 ? t - absl::Minutes(5) : absl::InfinitePast();
      running.push_back(r);
    }
    std::vector<PendingJob> pending;
    for (int i = 0; i < 15; ++i) {
      PendingJob j = P(i + 1, 1 + rng() % 3, 1 + rng() % 8, rng() % 4,
                       t - absl::Minutes(rng() % 60), rng() % 2 ? "q1" : "q2");
      j.instance_type = rng() % 3 == 0 ? (rng() % 2 ? "x" : "y") : "";
      if (rng() % 4 == 0) j.node_labels = {{"zone", "a"}};
      if (rng() % 5 == 0) j.efa_per_node = 2;
      if (rng() % 5 == 0) j.excluded_workers = {absl::StrCat("w", rng() % nw)};
      if (rng() % 3 == 0) j.expected_duration = absl::Minutes(rng() % 40);
      pending.push_back(j);
    }
    std::map<std::string, QueueConfig> queues = {{"q1", {static_cast<int64_t>(rng() % 24)}}};

    Decisions d = Run(pending, workers, running, queues);
    std::map<int64_t, int> seen;
    for (const Placement& p : d.placements) ++seen[p.job_id];
    for (const Pending& p : d.pending) ++seen[p.job_id];
    ASSERT_EQ(seen.size(), pending.size());
    for (auto [id, n] : seen) EXPECT_EQ(n, 1) << id;

    std::map<std::string, const Worker*> by_id;
    for (const Worker& w : workers) by_id[w.id] = &w;
    std::map<std::string, int> load = used;
    for (const Placement& p : d.placements) {
      const PendingJob& j = pending[p.job_id - 1];
      ASSERT_EQ(static_cast<int>(p.allocations.size()), j.nodes);
      std::set<std::string> distinct;
      for (const Allocation& a : p.allocations) {
        const Worker& w = *by_id.at(a.worker_id);
        distinct.insert(a.worker_id);
        EXPECT_TRUE(w.schedulable);
        EXPECT_EQ(a.gpus, j.gpus_per_node);
        EXPECT_TRUE(j.instance_type.empty() || j.instance_type == w.instance_type);
        EXPECT_GE(w.efa, j.efa_per_node);
        for (const auto& [k, v] : j.node_labels) EXPECT_EQ(w.labels.at(k), v);
        EXPECT_EQ(j.excluded_workers.count(a.worker_id), 0u);
        load[a.worker_id] += a.gpus;
        EXPECT_LE(load[a.worker_id], w.gpus);
      }
      EXPECT_EQ(static_cast<int>(distinct.size()), j.nodes);
    }
    for (const Preemption& p : d.preemptions) {
      const RunningJob* victim = nullptr;
      for (const RunningJob& r : running) {
        if (r.job_id == p.victim_job_id) victim = &r;
      }
      ASSERT_NE(victim, nullptr);
      EXPECT_FALSE(victim->preempting);
      EXPECT_LT(victim->priority, pending[p.for_job_id - 1].priority);
    }

    // Same input in another order: same decisions.
    std::shuffle(workers.begin(), workers.end(), rng);
    std::shuffle(pending.begin(), pending.end(), rng);
    std::shuffle(running.begin(), running.end(), rng);
    Decisions again = Run(pending, workers, running, queues);
    ASSERT_EQ(again.placements.size(), d.placements.size());
    for (size_t i = 0; i < d.placements.size(); ++i) {
      EXPECT_EQ(again.placements[i].job_id, d.placements[i].job_id);
      EXPECT_EQ(WorkersOf(again.placements[i]), WorkersOf(d.placements[i]));
    }
    EXPECT_EQ(Victims(again), Victims(d));
    ASSERT_EQ(again.pending.size(), d.pending.size());
    for (size_t i = 0; i < d.pending.size(); ++i) {
      EXPECT_EQ(again.pending[i].job_id, d.pending[i].job_id);
      EXPECT_EQ(again.pending[i].code, d.pending[i].code);
      EXPECT_EQ(again.pending[i].message, d.pending[i].message);
      EXPECT_EQ(again.pending[i].queue_position, d.pending[i].queue_position);
      EXPECT_EQ(again.pending[i].estimated_start, d.pending[i].estimated_start);
    }
  }
}

// ---- regressions: failures of the schedulers users compare us with (REFERENCE.md) ---

// A cluster driven pass by pass: placements start, preempted jobs stop at the next
// Advance and are requeued (keeping their place in FIFO order), jobs end after their
// runtime.
class Sim {
 public:
  Sim(Config config, std::vector<Worker> workers, FakeClock* clock)
      : scheduler_(config), workers_(std::move(workers)), clock_(clock) {}

  void Submit(PendingJob job, absl::Duration runtime) {
    job.queued_since = clock_->Now();
    runtime_[job.job_id] = runtime;
    pending_.push_back(job);
  }

  Decisions Step() {
    Decisions d = scheduler_.Schedule(pending_, workers_, running_, {}, clock_->Now());
    for (const Placement& p : d.placements) {
      auto it = std::find_if(pending_.begin(), pending_.end(),
                             [&](const PendingJob& j) { return j.job_id == p.job_id; });
      RunningJob r = R(it->job_id, p.allocations, it->priority, clock_->Now(),
                       clock_->Now() + runtime_[it->job_id], it->queue);
      r.last_preempted = it->last_preempted;
      specs_[it->job_id] = *it;
      running_.push_back(r);
      pending_.erase(it);
      ++starts_[p.job_id];
    }
    for (const Preemption& p : d.preemptions) {
      for (RunningJob& r : running_) {
        if (r.job_id == p.victim_job_id) r.preempting = true;
      }
      ++preempted_[p.victim_job_id];
    }
    return d;
  }

  void Advance(absl::Duration d) {
    clock_->Advance(d);
    std::vector<RunningJob> still;
    for (RunningJob& r : running_) {
      if (r.preempting) {
        PendingJob again = specs_[r.job_id];
        again.last_preempted = clock_->Now();
        pending_.push_back(again);
      } else if (r.started + runtime_[r.job_id] <= clock_->Now()) {
        finished_[r.job_id] = clock_->Now();
      } else {
        still.push_back(r);
      }
    }
    running_ = std::move(still);
  }

  bool IsRunning(int64_t id) const {
    return std::any_of(running_.begin(), running_.end(),
                       [&](const RunningJob& r) { return r.job_id == id; });
  }
  int starts(int64_t id) { return starts_[id]; }
  int preempted(int64_t id) { return preempted_[id]; }
  int total_preemptions() const {
    int n = 0;
    for (auto [id, k] : preempted_) n += k;
    return n;
  }
  const std::vector<PendingJob>& pending() const { return pending_; }

 private:
  Scheduler scheduler_;
  std::vector<Worker> workers_;
  FakeClock* clock_;
  std::vector<PendingJob> pending_;
  std::vector<RunningJob> running_;
  std::map<int64_t, absl::Duration> runtime_;
  std::map<int64_t, PendingJob> specs_;
  std::map<int64_t, int> starts_;
  std::map<int64_t, int> preempted_;
  std::map<int64_t, absl::Time> finished_;
};

std::vector<Worker> Cluster(int n, int gpus) {
  std::vector<Worker> workers;
  for (int i = 0; i < n; ++i) workers.push_back(W(absl::StrCat("w", i), gpus));
  return workers;
}

// Kueue StrictFIFO: a head job that does not fit blocks everything behind it. Here the
// 4-node head waits, and every small job that fits runs in the same pass.
TEST_F(SchedulerTest, RegressionStrictFifoHeadDoesNotBlockTheQueue) {
  Sim sim(config_, Cluster(4, 8), &clock_);
  sim.Submit(P(100, 2, 8, 0, Now()), absl::Hours(5));  // takes 2 of 4 nodes for hours
  sim.Step();
  clock_.Advance(absl::Seconds(1));
  sim.Submit(P(1, 4, 8, 0, Now()), absl::Hours(1));  // head: needs the whole cluster
  for (int i = 0; i < 20; ++i) sim.Submit(P(10 + i, 1, 1, 0, Now()), absl::Hours(1));
  Decisions d = sim.Step();
  EXPECT_EQ(d.placements.size(), 16u);  // the two free nodes, one GPU each
  EXPECT_FALSE(sim.IsRunning(1));
}

// Kueue BestEffortFIFO: small jobs keep taking freed GPUs and a gang never gets all of
// its nodes at once. With reservations off the gang starves in this scenario; with the
// default reservation_after it starts within reservation_after + one small-job runtime.
TEST_F(SchedulerTest, RegressionBestEffortFifoDoesNotStarveGangs) {
  for (bool reservations : {false, true}) {
    SCOPED_TRACE(reservations);
    FakeClock clock;
    Config config;
    if (!reservations) config.reservation_after = absl::InfiniteDuration();
    Sim sim(config, Cluster(4, 8), &clock);
    absl::Time start = clock.Now();
    int64_t next = 1000;
    // Fill the cluster with 1-GPU jobs of staggered length, then submit the gang.
    for (int i = 0; i < 32; ++i) {
      sim.Submit(P(next++, 1, 1, 0, clock.Now()), absl::Minutes(5 + i % 10));
    }
    sim.Step();
    clock.Advance(absl::Seconds(1));
    PendingJob gang = P(1, 4, 8, 0, clock.Now());
    sim.Submit(gang, absl::Hours(1));
    std::optional<absl::Time> gang_started;
    for (int minute = 0; minute < 6 * 60 && !gang_started; ++minute) {
      // A steady stream of small jobs, always more than the GPUs that free up.
      for (int i = 0; i < 6; ++i) sim.Submit(P(next++, 1, 1, 0, clock.Now()), absl::Minutes(10));
      sim.Step();
      if (sim.IsRunning(1)) gang_started = clock.Now();
      sim.Advance(absl::Minutes(1));
    }
    if (reservations) {
      ASSERT_TRUE(gang_started.has_value());
      EXPECT_LE(*gang_started - start, absl::Minutes(30) + absl::Minutes(10) + absl::Minutes(2));
    } else {
      EXPECT_FALSE(gang_started.has_value()) << "scenario no longer shows the failure mode";
    }
  }
}

// Kueue preemption loops: victims re-admitted onto capacity freed for the preemptor, then
// preempted again; or jobs preempting each other. A preemptor's capacity is held until it
// starts, equal priorities never preempt each other, and a requeued victim is not
// preempted again inside the cool-down.
TEST_F(SchedulerTest, RegressionNoPreemptionLoops) {
  Sim sim(config_, Cluster(2, 8), &clock_);
  sim.Submit(P(1, 1, 8, 0, Now()), absl::Hours(10));  // low
  sim.Submit(P(2, 1, 8, 0, Now()), absl::Hours(10));  // low
  sim.Step();
  clock_.Advance(absl::Minutes(1));
  sim.Submit(P(3, 2, 8, 5, Now()), absl::Minutes(30));  // high: needs both nodes
  sim.Submit(P(4, 1, 8, 5, Now()), absl::Hours(10));    // same priority as 3, later
  for (int minute = 0; minute < 120; ++minute) {
    sim.Step();
    sim.Advance(absl::Minutes(1));
  }
  EXPECT_EQ(sim.starts(3), 1);
  EXPECT_EQ(sim.preempted(1), 1);
  EXPECT_EQ(sim.preempted(2), 1);
  EXPECT_EQ(sim.preempted(3), 0);  // 4 has the same priority: never a victim of it
  EXPECT_EQ(sim.total_preemptions(), 2);

  // A victim that was just requeued and restarted is not preempted again within the
  // cool-down, even by a higher-priority job.
  Sim again(config_, Cluster(1, 8), &clock_);
  again.Submit(P(10, 1, 8, 0, Now()), absl::Hours(10));
  again.Step();
  again.Submit(P(11, 1, 8, 5, Now()), absl::Minutes(2));
  again.Step();                      // 10 asked to stop
  again.Advance(absl::Seconds(30));  // 10 stops and is requeued
  again.Step();                      // 11 starts
  again.Advance(absl::Minutes(3));   // 11 ends
  again.Step();                      // 10 restarts
  EXPECT_TRUE(again.IsRunning(10));
  again.Submit(P(12, 1, 8, 5, Now()), absl::Minutes(2));
  Decisions d = again.Step();
  EXPECT_TRUE(d.preemptions.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].code, PendingCode::kPreemptionCooldown);
}

}  // namespace
}  // namespace llamafleet::sched
