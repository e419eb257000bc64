// The pure parts ClusterManager is built from: failure classification (table), the
// attempt tracker (task states → outcome, abandoned tasks, held slots, expected end),
// the scheduler-input builder (table), and checkpoint path confinement. The builder's
// output is also fed to the real scheduler to show that the preemption cool-down and
// backfill around running jobs now fire. The elastic grow decision (table). When a pass
// runs (PassPolicy) and which MASTER_PORT an attempt gets (PortAllocator).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "scheduler/scheduler.h"
#include "server/cluster/attempt_tracker.h"
#include "server/cluster/checkpoint_retention.h"
#include "server/cluster/elastic_grow.h"
#include "server/cluster/pass_policy.h"
#include "server/cluster/port_allocator.h"
#include "server/cluster/scheduler_input.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

v1::RankExit Exit(int exit_code, int status_code = 0, const std::string& message = "",
                  const std::string& last_error = "") {
  v1::RankExit e;
  e.set_exit_code(exit_code);
  e.set_status_code(status_code);
  e.set_status_message(message);
  e.set_last_error(last_error);
  return e;
}

v1::TaskStatus Failed(std::vector<v1::RankExit> exits) {
  v1::TaskStatus s;
  s.set_task_id("1-1-0");
  s.set_state(v1::TASK_FAILED);
  for (v1::RankExit& e : exits) *s.add_exits() = std::move(e);
  return s;
}

TEST(ClassifyFailureTest, Table) {
  constexpr int kInvalid = 3, kNotFound = 5, kPermission = 7, kPrecondition = 9, kAborted = 10,
                kInternal = 13, kUnavailable = 14;
  FailureContext ctx;
  ctx.checkpoint_paths = {"/ckpt/7", "/ckpt/7/step-10"};
  struct Row {
    const char* name;
    std::vector<v1::RankExit> exits;
    AttemptOutcome want;
  };
  const std::vector<Row> rows = {
      {"no exits: not launched", {}, AttemptOutcome::kNodeFault},
      {"127 everywhere: trainer missing", {Exit(127), Exit(127)}, AttemptOutcome::kNodeFault},
      {"killed by SIGKILL, no record", {Exit(137)}, AttemptOutcome::kRetryable},
      {"exit 1, no record", {Exit(1), Exit(0)}, AttemptOutcome::kRetryable},
      {"INVALID_ARGUMENT", {Exit(1, kInvalid, "data.train_path: bad")}, AttemptOutcome::kPermanent},
      {"FAILED_PRECONDITION", {Exit(1, kPrecondition)}, AttemptOutcome::kPermanent},
      {"PERMISSION_DENIED", {Exit(1, kPermission)}, AttemptOutcome::kPermanent},
      {"NOT_FOUND of a data path", {Exit(1, kNotFound, "/data/train.jsonl: no such file")},
       AttemptOutcome::kPermanent},
      {"NOT_FOUND of a resume candidate", {Exit(1, kNotFound, "/ckpt/7/step-10: no manifest")},
       AttemptOutcome::kRetryable},
      {"NOT_FOUND naming a checkpoint", {Exit(1, kNotFound, "no checkpoint verifies")},
       AttemptOutcome::kRetryable},
      {"UNAVAILABLE", {Exit(1, kUnavailable, "gloo: connection reset")}, AttemptOutcome::kRetryable},
      {"INTERNAL", {Exit(1, kInternal)}, AttemptOutcome::kRetryable},
      {"ABORTED", {Exit(1, kAborted)}, AttemptOutcome::kRetryable},
      {"permanent rank wins over its killed peer", {Exit(137), Exit(1, kInvalid)},
       AttemptOutcome::kPermanent},
      {"legacy relay 'INVALID_ARGUMENT: ...'", {Exit(1, 0, "", "INVALID_ARGUMENT: data.x: bad")},
       AttemptOutcome::kPermanent},
      {"stderr text that merely starts like a code", {Exit(1, 0, "", "INVALID_ARGUMENTS everywhere")},
       AttemptOutcome::kRetryable},
      {"'error' line without a code", {Exit(1, 0, "", "RuntimeError: Connection reset by peer")},
       AttemptOutcome::kRetryable},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(ClassifyFailure(Failed(r.exits), ctx), r.want) << r.name;
  }
}

AttemptTracker TwoNodeAttempt() {
  AttemptTracker a;
  a.record.job_id = 1;
  a.record.attempt = 1;
  a.record.started = kNow;
  a.record.tasks = {{"1-1-0", 0, "w0", 1, v1::TASK_STARTING}, {"1-1-1", 1, "w1", 1, v1::TASK_STARTING}};
  for (const TaskRecord& t : a.record.tasks) a.task_states[t.task_id] = v1::TASK_STARTING;
  a.committed = true;
  return a;
}

v1::TaskStatus Status(const std::string& task, v1::TaskState state) {
  v1::TaskStatus s;
  s.set_task_id(task);
  s.set_state(state);
  return s;
}

TEST(AttemptTrackerTest, TaskStatesDecideTheOutcome) {
  AttemptTracker a = TwoNodeAttempt();
  EXPECT_FALSE(a.OnTaskStatus("w0", Status("1-1-0", v1::TASK_RUNNING)).record_running);
  EXPECT_TRUE(a.OnTaskStatus("w1", Status("1-1-1", v1::TASK_RUNNING)).record_running);
  EXPECT_FALSE(a.OnTaskStatus("w0", Status("1-1-0", v1::TASK_SUCCEEDED)).end.has_value());
  TaskReportEffect done = a.OnTaskStatus("w1", Status("1-1-1", v1::TASK_SUCCEEDED));
  ASSERT_TRUE(done.end.has_value());
  EXPECT_EQ(*done.end, AttemptOutcome::kSucceeded);

  AttemptTracker b = TwoNodeAttempt();
  v1::TaskStatus failed = Status("1-1-1", v1::TASK_FAILED);  // no exits: not launched
  TaskReportEffect f = b.OnTaskStatus("w1", failed);
  ASSERT_TRUE(f.end.has_value());
  EXPECT_EQ(*f.end, AttemptOutcome::kNodeFault);
  EXPECT_EQ(f.excluded_worker, "w1");

  AttemptTracker c = TwoNodeAttempt();
  TaskReportEffect k = c.OnTaskStatus("w0", Status("1-1-0", v1::TASK_KILLED));
  ASSERT_TRUE(k.end.has_value());
  EXPECT_EQ(*k.end, AttemptOutcome::kRetryable);
}

TEST(AttemptTrackerTest, ATerminalTaskFreesItsSlotAndStaysTerminal) {
  AttemptTracker a = TwoNodeAttempt();
  EXPECT_EQ(a.HeldAllocations().size(), 2u);
  a.OnTaskStatus("w0", Status("1-1-0", v1::TASK_FAILED));
  std::vector<sched::Allocation> held = a.HeldAllocations();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].worker_id, "w1");
  // A late RUNNING cannot bring it back.
  EXPECT_FALSE(a.OnTaskStatus("w0", Status("1-1-0", v1::TASK_RUNNING)).applied);
  EXPECT_EQ(a.task_states["1-1-0"], v1::TASK_FAILED);
}

TEST(AttemptTrackerTest, MissingAndSilentTasksAreAbandonedAfterTheirGrace) {
  AttemptTracker a = TwoNodeAttempt();
  a.OnTaskStatus("w0", Status("1-1-0", v1::TASK_RUNNING));
  a.OnTaskStatus("w1", Status("1-1-1", v1::TASK_RUNNING));
  a.OnTaskStatus("w0", Status("1-1-0", v1::TASK_FAILED));
  a.ended = true;
  a.BeginStopping(kNow, absl::Seconds(15), absl::Seconds(10));
  // The worker came back without 1-1-1: missing, abandoned after the grace even though
  // the attempt has ended (the stranded restart).
  a.MarkMissing("1-1-1", kNow);
  EXPECT_TRUE(a.Abandoned(kNow + absl::Seconds(2), absl::Seconds(3)).empty());
  EXPECT_EQ(a.Abandoned(kNow + absl::Seconds(3), absl::Seconds(3)),
            std::vector<std::string>{"1-1-1"});
  // A late status within the grace clears it.
  a.OnTaskStatus("w1", Status("1-1-1", v1::TASK_RUNNING));
  EXPECT_TRUE(a.Abandoned(kNow + absl::Seconds(5), absl::Seconds(3)).empty());
  // Silent past the stop deadline (grace + slack): abandoned too.
  EXPECT_EQ(a.Abandoned(kNow + absl::Seconds(25), absl::Seconds(3)),
            std::vector<std::string>{"1-1-1"});
  a.Abandon("1-1-1");
  EXPECT_TRUE(a.AllTasksDone([](const std::string&) { return false; }));
  EXPECT_TRUE(a.HeldAllocations().empty());
  // A later, shorter stop does not move the first deadline.
  AttemptTracker b = TwoNodeAttempt();
  b.BeginStopping(kNow, absl::Seconds(60), absl::Seconds(10));
  b.BeginStopping(kNow, absl::Seconds(15), absl::Seconds(10));
  EXPECT_TRUE(b.Abandoned(kNow + absl::Seconds(30), absl::Seconds(3)).empty());
}

TEST(AttemptTrackerTest, ExpectedEndFromStepRateOrDeadline) {
  AttemptTracker a = TwoNodeAttempt();
  EXPECT_FALSE(a.ExpectedEnd(kNow).has_value());
  a.OnStep(10, 100, kNow);
  EXPECT_FALSE(a.ExpectedEnd(kNow).has_value());  // one point gives no rate
  a.OnStep(20, 100, kNow + absl::Seconds(10));    // 1 s per step, 80 to go
  EXPECT_EQ(a.ExpectedEnd(kNow + absl::Seconds(10)), kNow + absl::Seconds(90));
  a.spec.mutable_run_policy()->set_active_deadline_seconds(60);  // earlier: wins
  EXPECT_EQ(a.ExpectedEnd(kNow + absl::Seconds(10)), kNow + absl::Seconds(60));
  AttemptTracker b = TwoNodeAttempt();
  b.spec.mutable_run_policy()->set_active_deadline_seconds(300);
  EXPECT_EQ(b.ExpectedEnd(kNow), kNow + absl::Seconds(300));
}

SchedulableJob Queued(int64_t id, int nodes, int gpus, int priority = 0,
                      absl::Time queued_since = kNow - absl::Minutes(1)) {
  SchedulableJob j;
  j.job.set_id(JobIdString(id));
  j.job.mutable_spec()->set_queue("default");
  j.job.mutable_spec()->set_priority(priority);
  j.job.mutable_spec()->mutable_resources()->set_nodes(nodes);
  j.job.mutable_spec()->mutable_resources()->set_gpus_per_node(gpus);
  j.queued_since = queued_since;
  j.eligible = absl::InfinitePast();
  j.last_preempted = absl::InfinitePast();
  j.first_start = absl::InfinitePast();
  return j;
}

WorkerView GpuWorker(const std::string& name, int gpus, bool schedulable = true) {
  WorkerView w;
  w.name = name;
  for (int i = 0; i < gpus; ++i) w.inventory.add_gpus()->set_index(i);
  w.schedulable = schedulable;
  return w;
}

AttemptTracker Running(int64_t job_id, const std::string& worker, int gpus, int priority = 0) {
  AttemptTracker a;
  a.record.job_id = job_id;
  a.record.attempt = 1;
  a.record.started = kNow - absl::Minutes(20);
  a.spec.set_queue("default");
  a.spec.set_priority(priority);
  const std::string task = absl::StrCat(job_id, "-1-0");
  a.record.tasks = {{task, 0, worker, gpus, v1::TASK_RUNNING}};
  a.task_states[task] = v1::TASK_RUNNING;
  return a;
}

TEST(SchedulerInputTest, Table) {
  std::vector<SchedulableJob> queued;
  queued.push_back(Queued(1, 1, 1));                      // pending
  queued.push_back(Queued(2, 1, 1));                      // previous attempt still stopping
  queued.push_back(Queued(3, 1, 1));                      // in backoff
  queued[2].eligible = kNow + absl::Seconds(4);
  queued.push_back(Queued(4, 1, 1));                      // deadline passed
  queued[3].job.mutable_spec()->mutable_run_policy()->set_active_deadline_seconds(60);
  queued[3].first_start = kNow - absl::Seconds(61);
  queued.push_back(Queued(5, 2, 1));                      // preempted before, has a deadline
  queued[4].last_preempted = kNow - absl::Minutes(3);
  queued[4].job.mutable_spec()->mutable_run_policy()->set_active_deadline_seconds(600);
  std::map<int64_t, AttemptTracker> attempts;
  attempts[2] = Running(2, "a", 1);
  attempts[2].stopping = true;
  attempts[2].last_preempted = kNow - absl::Minutes(1);
  attempts[6] = TwoNodeAttempt();
  attempts[6].record.job_id = 6;
  attempts[6].task_states["1-1-0"] = v1::TASK_FAILED;  // node 0 done: holds nothing
  attempts[6].OnStep(1, 16, kNow - absl::Seconds(10));
  attempts[6].OnStep(6, 16, kNow - absl::Seconds(5));

  SchedulerInput in = BuildSchedulerInput(
      queued, {GpuWorker("a", 2), GpuWorker("b", 1, /*schedulable=*/false)}, attempts, kNow);

  ASSERT_EQ(in.pending.size(), 2u);
  EXPECT_EQ(in.pending[0].job_id, 1);
  EXPECT_FALSE(in.pending[0].expected_duration.has_value());
  EXPECT_EQ(in.pending[1].job_id, 5);
  EXPECT_EQ(in.pending[1].nodes, 2);
  EXPECT_EQ(in.pending[1].last_preempted, kNow - absl::Minutes(3));
  EXPECT_EQ(in.pending[1].expected_duration, absl::Seconds(600));
  ASSERT_EQ(in.held_back.count(3), 1u);
  EXPECT_EQ(in.held_back[3].code(), "BACKOFF");
  EXPECT_EQ(in.held_back[3].message(), "restarting after backoff in 4s");
  ASSERT_EQ(in.deadline_passed.count(4), 1u);
  EXPECT_EQ(in.deadline_passed[4], "active_deadline_seconds (60) exceeded");
  EXPECT_EQ(in.held_by_attempt, std::vector<int64_t>{2});
  EXPECT_EQ(in.jobs.size(), 2u);

  ASSERT_EQ(in.workers.size(), 2u);
  EXPECT_EQ(in.workers[0].gpus, 2);
  EXPECT_TRUE(in.workers[0].schedulable);
  EXPECT_FALSE(in.workers[1].schedulable);

  ASSERT_EQ(in.running.size(), 2u);
  EXPECT_EQ(in.running[0].job_id, 2);
  EXPECT_TRUE(in.running[0].preempting);
  EXPECT_EQ(in.running[0].last_preempted, kNow - absl::Minutes(1));
  EXPECT_FALSE(in.running[0].expected_end.has_value());
  EXPECT_EQ(in.running[1].job_id, 6);
  ASSERT_EQ(in.running[1].allocations.size(), 1u);  // only the task still running
  EXPECT_EQ(in.running[1].allocations[0].worker_id, "w1");
  EXPECT_EQ(in.running[1].expected_end, kNow + absl::Seconds(5));  // 1 s/step, 10 to go
}

TEST(SchedulerInputTest, PreemptionCooldownNowApplies) {
  // A low-priority job holds the only GPU; it was preempted a minute ago (cool-down 10
  // minutes), so the high-priority job may not take it again.
  std::map<int64_t, AttemptTracker> attempts;
  attempts[1] = Running(1, "a", 1, /*priority=*/0);
  attempts[1].last_preempted = kNow - absl::Minutes(1);
  const std::vector<SchedulableJob> queued = {Queued(2, 1, 1, /*priority=*/100)};
  const sched::Scheduler scheduler{sched::Config{}};
  SchedulerInput in = BuildSchedulerInput(queued, {GpuWorker("a", 1)}, attempts, kNow);
  sched::Decisions d = scheduler.Schedule(in.pending, in.workers, in.running, {}, kNow);
  EXPECT_TRUE(d.preemptions.empty());
  ASSERT_EQ(d.pending.size(), 1u);
  EXPECT_EQ(d.pending[0].code, sched::PendingCode::kPreemptionCooldown);

  // Past its cool-down it is a victim again.
  attempts[1].last_preempted = kNow - absl::Minutes(11);
  in = BuildSchedulerInput(queued, {GpuWorker("a", 1)}, attempts, kNow);
  d = scheduler.Schedule(in.pending, in.workers, in.running, {}, kNow);
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim_job_id, 1);
}

TEST(SchedulerInputTest, BackfillAroundARunningJobsExpectedEnd) {
  // Worker a: 3 GPUs, one held by job 1 that will end in ~500 s (its step rate). Job 2
  // (3 GPUs) has waited past reservation_after and reserves a for then. Job 3 (1 GPU,
  // 60 s deadline) ends before that: it backfills. Job 4 (1 GPU, no deadline) may not
  // take the reserved GPU.
  std::map<int64_t, AttemptTracker> attempts;
  attempts[1] = Running(1, "a", 1);
  std::vector<SchedulableJob> queued = {Queued(2, 1, 3, 0, kNow - absl::Hours(1)),
                                        Queued(3, 1, 1), Queued(4, 1, 1)};
  queued[1].job.mutable_spec()->mutable_run_policy()->set_active_deadline_seconds(60);
  const sched::Scheduler scheduler{sched::Config{}};
  auto schedule = [&] {
    SchedulerInput in = BuildSchedulerInput(queued, {GpuWorker("a", 3)}, attempts, kNow);
    sched::Decisions d = scheduler.Schedule(in.pending, in.workers, in.running, {}, kNow);
    std::map<int64_t, sched::Pending> pending;
    for (const sched::Pending& p : d.pending) pending[p.job_id] = p;
    return std::make_pair(d.placements, pending);
  };
  // Without a step rate the running job's end is unknown: no estimate, no backfill.
  auto [placed_blind, pending_blind] = schedule();
  EXPECT_TRUE(placed_blind.empty());
  EXPECT_FALSE(pending_blind[2].estimated_start.has_value());

  attempts[1].OnStep(100, 700, kNow - absl::Seconds(100));
  attempts[1].OnStep(200, 700, kNow);  // 1 s/step, 500 left
  auto [placed, pending] = schedule();
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, 3);
  ASSERT_EQ(pending.count(2), 1u);
  EXPECT_EQ(pending[2].estimated_start, kNow + absl::Seconds(500));
  ASSERT_EQ(pending.count(4), 1u);
  EXPECT_EQ(pending[4].code, sched::PendingCode::kBlockedByReservation);
}

TEST(CheckpointPathTest, OnlyStepDirectoriesDirectlyInsideTheJobDir) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/ckpt/7";
  std::filesystem::create_directories(dir + "/step-5");
  std::filesystem::create_directories(tmp.path() + "/elsewhere");
  std::filesystem::create_symlink(tmp.path() + "/elsewhere", dir + "/step-9");
  EXPECT_TRUE(CheckCheckpointPath(dir, dir + "/step-5").ok());
  EXPECT_TRUE(CheckCheckpointPath(dir, dir + "/step-6").ok());  // not visible here: lexical
  EXPECT_TRUE(CheckCheckpointPath(dir + "/", dir + "/./step-5/").ok());
  for (const std::string& bad :
       {dir, dir + "/step-", dir + "/step-5x", dir + "/x/step-5", dir + "/../8/step-5",
        tmp.path() + "/elsewhere", std::string("relative/step-5"), std::string("/"),
        dir + "/step-9" /* a symlink out of the dir */}) {
    absl::Status s = CheckCheckpointPath(dir, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(CheckCheckpointPath("", dir + "/step-5").ok());

  std::vector<v1::Checkpoint> ckpts(4);
  ckpts[0].set_path(dir + "/step-40");
  ckpts[1].set_path(dir + "/step-30");
  ckpts[2].set_path("/etc");
  ckpts[3].set_path(dir + "/step-10");
  RetentionPlan plan = PlanRetention(dir, ckpts, 1);
  ASSERT_EQ(plan.remove.size(), 2u);
  EXPECT_EQ(plan.remove[0].path(), dir + "/step-30");
  EXPECT_EQ(plan.remove[1].path(), dir + "/step-10");
  ASSERT_EQ(plan.refused.size(), 1u);
  EXPECT_EQ(plan.refused[0].path(), "/etc");
  EXPECT_TRUE(PlanRetention(dir, ckpts, 0).remove.empty());  // keep all
}

// The checkpoint with the lowest eval loss outlives keep_last (output.export: best reads it
// back at the end); checkpoints without an evaluation go by age as before.
TEST(CheckpointRetentionTest, TheBestEvalLossIsKeptWhateverItsAge) {
  const std::string dir = "/ckpt/7";
  std::vector<v1::Checkpoint> ckpts(4);
  for (int i = 0; i < 4; ++i) ckpts[i].set_path(absl::StrCat(dir, "/step-", 40 - 10 * i));
  ckpts[1].set_eval_loss(2.5);
  ckpts[2].set_eval_loss(2.25);  // the best: step-20
  ckpts[3].set_eval_loss(2.75);
  RetentionPlan plan = PlanRetention(dir, ckpts, 1);
  ASSERT_EQ(plan.remove.size(), 2u);
  EXPECT_EQ(plan.remove[0].path(), dir + "/step-30");
  EXPECT_EQ(plan.remove[1].path(), dir + "/step-10");
}

TEST(SchedulerInputTest, NodeFaultExclusionHoldsOnlyWhileTheClusterCanDoWithoutTheWorker) {
  // Job 1 needs 2 nodes and excluded w1 after a node fault.
  std::vector<SchedulableJob> queued = {Queued(1, 2, 1)};
  queued[0].excluded_workers = {"w1"};
  const std::map<int64_t, AttemptTracker> attempts;
  // A spare (w2): w1 stays out of the next placement.
  SchedulerInput in = BuildSchedulerInput(
      queued, {GpuWorker("w0", 1), GpuWorker("w1", 1), GpuWorker("w2", 1)}, attempts, kNow);
  ASSERT_EQ(in.pending.size(), 1u);
  EXPECT_EQ(in.pending[0].excluded_workers, std::set<std::string>{"w1"});
  // No spare (w1 came back after a cut connection): without w1 the job could never start.
  in = BuildSchedulerInput(queued, {GpuWorker("w0", 1), GpuWorker("w1", 1)}, attempts, kNow);
  ASSERT_EQ(in.pending.size(), 1u);
  EXPECT_TRUE(in.pending[0].excluded_workers.empty());
  const sched::Scheduler scheduler{sched::Config{}};
  sched::Decisions d = scheduler.Schedule(in.pending, in.workers, in.running, {}, kNow);
  EXPECT_EQ(d.placements.size(), 1u);
}

// The elastic grow decision (elastic_grow.h), one row per rule. The cluster: w1 and w2 run
// the elastic job 1 (nodes 3, min_nodes 2), w3 (and w4 where a row adds it) returned.
TEST(ElasticGrowTest, Table) {
  const sched::Scheduler scheduler{sched::Config{}};
  auto worker = [](const std::string& id) {
    sched::Worker w;
    w.id = id;
    w.gpus = 1;
    return w;
  };
  auto rigid = [](int64_t id, int nodes, int priority, absl::Time queued_since) {
    sched::PendingJob p;
    p.job_id = id;
    p.nodes = nodes;
    p.priority = priority;
    p.queued_since = queued_since;
    return p;
  };
  struct Row {
    std::string name;
    int nodes_now = 2;
    bool running = true;
    bool checkpoint = true;
    int64_t step = 8;  // of 16
    absl::Duration age = absl::Minutes(10);  // since the attempt started
    absl::Duration cooldown = absl::Minutes(5);
    int min_nodes = 2;
    int nodes = 3;
    std::vector<std::string> extra_workers = {"w3"};
    // Initialized, so that rows may leave them out (-Wmissing-field-initializers).
    std::vector<sched::PendingJob> pending = {};
    std::vector<sched::RunningJob> others = {};
    bool grow = false;
    int nodes_after = 0;
    std::string why = "";  // a part of the reason
  };
  const absl::Time created = kNow - absl::Hours(1);
  sched::RunningJob on_w3;
  on_w3.job_id = 7;
  on_w3.allocations = {{"w3", 1}};
  on_w3.started = kNow - absl::Minutes(1);
  const std::vector<Row> rows = {
      {.name = "capacity returned", .grow = true, .nodes_after = 3, .why = "capacity returned"},
      {.name = "never beyond nodes", .extra_workers = {"w3", "w4"}, .grow = true, .nodes_after = 3},
      {.name = "already at nodes", .nodes_now = 3, .why = "already on 3 of 3"},
      {.name = "rigid job", .min_nodes = 0, .why = "not elastic"},
      {.name = "not running", .running = false, .why = "not running"},
      {.name = "only after a checkpoint", .checkpoint = false, .why = "no new checkpoint"},
      {.name = "the last step's checkpoint", .step = 16, .why = "last step"},
      {.name = "cooldown", .age = absl::Minutes(4), .why = "cooldown"},
      {.name = "cooldown 0", .age = absl::ZeroDuration(), .cooldown = absl::ZeroDuration(), .grow = true,
       .nodes_after = 3},
      {.name = "no free worker", .extra_workers = {}, .why = "no free worker"},
      {.name = "returned worker busy", .others = {on_w3}, .why = "no free worker"},
      // Job 5 (rigid, 1 node, queued before job 1) can use w3: it goes first.
      {.name = "queued job ahead takes w3", .pending = {rigid(5, 1, 0, created - absl::Minutes(1))}},
      // Job 6 (rigid, 3 nodes, higher priority) would take w1..w3 once the attempt ends.
      {.name = "queued job ahead would take the gang's workers", .pending = {rigid(6, 3, 10, kNow)},
       .why = "ahead would take worker"},
      // Job 8 (rigid, 1 node) queued after job 1 at the same priority: job 1 is ahead.
      {.name = "queued job behind", .pending = {rigid(8, 1, 0, kNow)}, .grow = true, .nodes_after = 3},
      // Job 9 needs 2 nodes and is ahead; w3 alone does not fit it, but w3 plus a worker
      // the gang frees would: growing would hand the gang's worker to it.
      {.name = "gang's freed worker needed ahead", .pending = {rigid(9, 2, 5, kNow)},
       .why = "ahead would take worker"},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    GrowCheck c;
    c.job.job_id = 1;
    c.job.nodes = r.nodes;
    c.job.min_nodes = r.min_nodes;
    c.job.queued_since = created;
    c.nodes_now = r.nodes_now;
    c.workers_now = {"w1", "w2"};
    if (r.nodes_now == 3) c.workers_now.push_back("w3");
    c.attempt_started = kNow - r.age;
    c.running = r.running;
    c.checkpoint_recorded = r.checkpoint;
    c.checkpoint_step = r.step;
    c.total_steps = 16;
    c.cooldown = r.cooldown;
    std::vector<sched::Worker> workers = {worker("w1"), worker("w2")};
    for (const std::string& w : r.extra_workers) workers.push_back(worker(w));
    sched::RunningJob self;
    self.job_id = 1;
    for (const std::string& w : c.workers_now) self.allocations.push_back({w, 1});
    self.started = c.attempt_started;
    std::vector<sched::RunningJob> running = r.others;
    running.push_back(self);
    const GrowDecision d = DecideGrow(c, r.pending, workers, running, {}, scheduler, kNow);
    EXPECT_EQ(d.grow, r.grow) << d.why;
    if (r.grow) {
      EXPECT_EQ(d.nodes_after, r.nodes_after);
      EXPECT_EQ(d.added_workers.size(), static_cast<size_t>(r.nodes_after - r.nodes_now));
    }
    EXPECT_NE(d.why.find(r.why), std::string::npos) << d.why;
  }
}

// Ports are handed out round robin over the range, never one still held.
TEST(PortAllocatorTest, RoundRobinOverTheRangeSkippingHeldPorts) {
  PortAllocator ports(40000);
  const int first = ports.Allocate();
  ASSERT_GE(first, 40000);
  ASSERT_LT(first, 40000 + PortAllocator::kRange);
  auto after = [](int p) { return 40000 + (p - 40000 + 1) % PortAllocator::kRange; };
  ports.Hold(after(first));  // a recovered attempt's
  const int second = ports.Allocate();
  EXPECT_EQ(second, after(after(first)));
  ports.Release(first);  // released, but not handed out again at once (TIME_WAIT)
  EXPECT_EQ(ports.Allocate(), after(second));
  for (int i = 0; i < PortAllocator::kRange - 4; ++i) ports.Allocate();
  EXPECT_EQ(ports.Allocate(), first);  // the only one left
}

QueuedJobsSnapshot::Entry Entry(int64_t id) {
  return std::make_shared<const SchedulableJob>(Queued(id, 1, 1));
}

// A wish for a pass soon is dropped when the pass could see nothing new: the same
// workers, and the queue the last pass saw but for the jobs it started.
TEST(PassPolicyTest, ARepeatedWishIsDroppedOnlyWhenNothingChanged) {
  PassPolicy policy(absl::Milliseconds(20));
  const auto t0 = std::chrono::steady_clock::now();
  std::map<int64_t, AttemptTracker> attempts;
  EXPECT_TRUE(policy.Due(t0));  // the first turn of the loop passes
  ASSERT_TRUE(policy.Run(kNow, nullptr, attempts));
  policy.Began(kNow);
  const QueuedJobsSnapshot::Entry e1 = Entry(1), e2 = Entry(2), e3 = Entry(3);
  policy.Ran(QueuedJobsSnapshot({e1, e2, e3}), 7, {}, {}, {}, t0, t0 + std::chrono::milliseconds(5));
  EXPECT_FALSE(policy.Due(t0 + std::chrono::milliseconds(5)));
  EXPECT_FALSE(policy.Run(kNow + absl::Seconds(1), nullptr, attempts));  // nothing wanted
  EXPECT_TRUE(policy.Run(kNow + absl::Seconds(3), nullptr, attempts));   // periodic

  policy.WantSoon();
  EXPECT_FALSE(policy.Due(t0 + std::chrono::milliseconds(10)));  // coalesced: 20 ms
  EXPECT_TRUE(policy.Due(t0 + std::chrono::milliseconds(26)));
  EXPECT_FALSE(policy.ShouldCompareQueue(8));  // another worker came: not comparable
  ASSERT_TRUE(policy.ShouldCompareQueue(7));
  // Job 2 left the queue because the pass started it; 1 and 3 are the same entries.
  attempts[2] = Running(2, "a", 1);
  QueuedJobsSnapshot same({e1, e3});
  EXPECT_FALSE(policy.Run(kNow + absl::Seconds(1), &same, attempts));
  EXPECT_FALSE(policy.Due(t0 + std::chrono::milliseconds(26)));  // the wish is gone

  // A new job, a replaced entry, or one that left without an attempt: the pass runs.
  const std::vector<std::vector<QueuedJobsSnapshot::Entry>> changed = {
      {e1, e2, e3, Entry(4)}, {e1, Entry(2), e3}, {Entry(0), e1, e2, e3}, {e1, e2}};
  for (const auto& entries : changed) {
    policy.WantSoon();
    QueuedJobsSnapshot q(entries);
    EXPECT_TRUE(policy.Run(kNow + absl::Seconds(1), &q, {})) << entries.size();
    policy.Began(kNow);
  }
}

// Freed capacity asks for a pass at once only when a queued job could use it.
TEST(PassPolicyTest, FreedCapacityPassesAtOnceOnlyForAJobWaitingForIt) {
  PassPolicy policy(absl::Milliseconds(20));
  const auto t0 = std::chrono::steady_clock::now();
  policy.Began(kNow);
  sched::Pending unmatched;
  unmatched.job_id = 5;
  unmatched.code = sched::PendingCode::kNoMatchingWorkers;
  policy.Ran(QueuedJobsSnapshot(), 1, {unmatched}, {9}, {}, t0, t0);
  policy.CapacityFreed(4);
  EXPECT_FALSE(policy.Due(t0));
  policy.CapacityFreed(9);  // held out of the last pass by its own attempt
  EXPECT_TRUE(policy.Due(t0));
  policy.Began(kNow);
  sched::Pending waiting = unmatched;
  waiting.code = sched::PendingCode::kInsufficientCapacity;
  policy.Ran(QueuedJobsSnapshot(), 1, {unmatched, waiting}, {}, {}, t0, t0);
  policy.CapacityFreed(4);
  EXPECT_TRUE(policy.Due(t0));
}

TEST(PassPolicyTest, AnAwaitedParentEndingPassesAtOnce) {
  PassPolicy policy(absl::Milliseconds(20));
  const auto t0 = std::chrono::steady_clock::now();
  policy.Began(kNow);
  policy.Ran(QueuedJobsSnapshot(), 1, {}, {}, /*awaited_jobs=*/{3, 7}, t0, t0);
  policy.JobEnded(5);  // nobody waits for it
  EXPECT_FALSE(policy.Due(t0));
  policy.JobEnded(7);
  EXPECT_TRUE(policy.Due(t0));
}

TEST(SchedulerInputTest, DependenciesHoldBackOrCancelQueuedJobs) {
  auto with_parents = [](SchedulableJob j, std::vector<std::pair<std::string, std::string>> parents) {
    for (const auto& [job, on] : parents) {
      v1::JobDependency* d = j.job.mutable_spec()->add_depends_on();
      d->set_job(job);
      d->set_on(on);
    }
    return j;
  };
  // 1: the parent, queued. 2 waits for 1. 3 needs 10 to succeed; it failed. 4 needs 10 to
  // finish: ready. 5 names 11, whose record is gone. 6 waits for 12, running.
  const std::vector<SchedulableJob> queued = {
      Queued(1, 1, 1),
      with_parents(Queued(2, 1, 1), {{"1", "succeeded"}}),
      with_parents(Queued(3, 1, 1), {{"10", "succeeded"}}),
      with_parents(Queued(4, 1, 1), {{"10", "finished"}}),
      with_parents(Queued(5, 1, 1), {{"11", "succeeded"}}),
      with_parents(Queued(6, 1, 1), {{"12", "succeeded"}, {"1", "finished"}}),
  };
  const std::map<int64_t, v1::JobState> parents = {{1, v1::QUEUED}, {10, v1::FAILED}, {12, v1::RUNNING}};
  SchedulerInput in = BuildSchedulerInput(queued, {GpuWorker("a", 8)}, {}, kNow, parents);
  ASSERT_EQ(in.pending.size(), 2u);
  EXPECT_EQ(in.pending[0].job_id, 1);
  EXPECT_EQ(in.pending[1].job_id, 4);
  ASSERT_EQ(in.held_back.count(2), 1u);
  EXPECT_EQ(in.held_back[2].code(), "DEPENDENCY");
  EXPECT_EQ(in.held_back[2].message(), "waiting for job 1 (QUEUED)");
  EXPECT_EQ(in.held_back[6].message(), "waiting for job 12 (RUNNING)");
  EXPECT_EQ(in.dependency_failed[3], "dependency job 10 FAILED (depends_on: succeeded)");
  EXPECT_EQ(in.dependency_failed[5], "dependency job 11 no longer exists (depends_on: succeeded)");
  EXPECT_EQ(in.dependency_failed.size(), 2u);
  EXPECT_EQ(in.awaited_jobs, (std::vector<int64_t>{1, 12}));
}

TEST(SchedulerInputTest, ASweepsThrottleCountsItsAttemptsAndWhatThisPassOffers) {
  auto point = [](SchedulableJob j, const std::string& owner, const std::string& sweep, uint32_t max) {
    j.job.set_owner(owner);
    v1::SweepSpec* s = j.job.mutable_spec()->mutable_sweep();
    s->set_max_concurrent(max);
    s->mutable_point()->set_sweep(sweep);
    s->mutable_point()->set_points(4);
    return j;
  };
  // alice's sweep "lr" allows 2: job 1's attempt holds one, so of 2..4 only 2 is offered.
  // bob's sweep of the same name is his own throttle; alice's "other" has no limit.
  const std::vector<SchedulableJob> queued = {
      point(Queued(2, 1, 1), "alice", "lr", 2), point(Queued(3, 1, 1), "alice", "lr", 2),
      point(Queued(4, 1, 1), "alice", "lr", 2), point(Queued(5, 1, 1), "bob", "lr", 2),
      point(Queued(6, 1, 1), "alice", "other", 0), point(Queued(7, 1, 1), "alice", "other", 0),
  };
  std::map<int64_t, AttemptTracker> attempts;
  attempts[1] = TwoNodeAttempt();
  attempts[1].owner = "alice";
  *attempts[1].spec.mutable_sweep() = queued[0].job.spec().sweep();
  SchedulerInput in = BuildSchedulerInput(queued, {GpuWorker("a", 8)}, attempts, kNow);
  std::vector<int64_t> offered;
  for (const sched::PendingJob& p : in.pending) offered.push_back(p.job_id);
  EXPECT_EQ(offered, (std::vector<int64_t>{2, 5, 6, 7}));
  ASSERT_EQ(in.held_back.count(3), 1u);
  EXPECT_EQ(in.held_back[3].code(), "SWEEP");
  EXPECT_EQ(in.held_back[3].message(), "sweep lr: 1 of 2 running, 1 next in line");
  EXPECT_EQ(in.held_back[4].message(), "sweep lr: 1 of 2 running, 1 next in line");
  // Job 1's end (or its attempt's) is worth a pass at once.
  EXPECT_EQ(in.awaited_jobs, (std::vector<int64_t>{1}));

  // With job 1's attempt gone, two of the three are offered.
  in = BuildSchedulerInput(queued, {GpuWorker("a", 8)}, {}, kNow);
  offered.clear();
  for (const sched::PendingJob& p : in.pending) offered.push_back(p.job_id);
  EXPECT_EQ(offered, (std::vector<int64_t>{2, 3, 5, 6, 7}));
  EXPECT_EQ(in.held_back[4].message(), "sweep lr: 0 of 2 running, 2 next in line");
}

TEST(PassPolicyTest, FreedCapacityOfAnAwaitedJobPassesAtOnce) {
  PassPolicy policy(absl::Milliseconds(20));
  const auto t0 = std::chrono::steady_clock::now();
  policy.Began(kNow);
  policy.Ran(QueuedJobsSnapshot(), 1, {}, {}, /*awaited_jobs=*/{4}, t0, t0);
  policy.CapacityFreed(3);
  EXPECT_FALSE(policy.Due(t0));
  policy.CapacityFreed(4);  // a sweep's job preempted: the next point may start
  EXPECT_TRUE(policy.Due(t0));
}

}  // namespace
}  // namespace llamafleet
