// Scheduler regressions (scheduler_fixture.h): failures of the schedulers users compare us
// with (REFERENCE.md), reproduced on a cluster driven pass by pass.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/scheduler/scheduler_fixture.h"

namespace llamafleet::sched {
namespace {

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
