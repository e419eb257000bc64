// The fixture of scheduler_test's files: constructors of workers (W), pending (P) and
// running (R) jobs, readers of a pass's decisions, and a pass run at a fake clock's time.
#ifndef LLAMAFLEET_TESTS_SCHEDULER_SCHEDULER_FIXTURE_H_
#define LLAMAFLEET_TESTS_SCHEDULER_SCHEDULER_FIXTURE_H_

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "scheduler/scheduler.h"

namespace llamafleet::sched {

using Labels = std::map<std::string, std::string>;

inline Worker W(std::string id, int gpus, std::string type = "p5.48xlarge", int efa = 0,
         Labels labels = {}) {
  Worker w;
  w.id = std::move(id);
  w.gpus = gpus;
  w.instance_type = std::move(type);
  w.efa = efa;
  w.labels = std::move(labels);
  return w;
}

inline PendingJob P(int64_t id, int nodes, int gpus, int priority, absl::Time queued,
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

inline RunningJob R(int64_t id, std::vector<Allocation> allocs, int priority, absl::Time started,
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

inline const Placement* FindPlacement(const Decisions& d, int64_t id) {
  for (const Placement& p : d.placements) {
    if (p.job_id == id) return &p;
  }
  return nullptr;
}

inline const Pending* FindPending(const Decisions& d, int64_t id) {
  for (const Pending& p : d.pending) {
    if (p.job_id == id) return &p;
  }
  return nullptr;
}

inline std::vector<std::string> WorkersOf(const Placement& p) {
  std::vector<std::string> ids;
  for (const Allocation& a : p.allocations) ids.push_back(a.worker_id);
  return ids;
}

inline std::vector<int64_t> Placed(const Decisions& d) {
  std::vector<int64_t> ids;
  for (const Placement& p : d.placements) ids.push_back(p.job_id);
  return ids;
}

inline std::vector<int64_t> Victims(const Decisions& d) {
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

}  // namespace llamafleet::sched

#endif  // LLAMAFLEET_TESTS_SCHEDULER_SCHEDULER_FIXTURE_H_
