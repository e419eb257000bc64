// Scheduler rules, one block of tests per rule, with a fake clock (scheduler_fixture.h):
// gang placement, memory fit, selectors, priority order, quotas, backfill, explanations and
// randomized invariants. Elastic gangs and reservations, preemption, and the regressions of
// the schedulers users compare us with are in scheduler_{reservation,preemption,regression}_test.cc.
#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace llamafleet::sched {
namespace {

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

}  // namespace
}  // namespace llamafleet::sched
