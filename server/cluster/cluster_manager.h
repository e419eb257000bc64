#ifndef LLAMAFLEET_SERVER_CLUSTER_CLUSTER_MANAGER_H_
#define LLAMAFLEET_SERVER_CLUSTER_CLUSTER_MANAGER_H_

// The coordinator's control loop: worker sessions, scheduling passes, attempts, failure
// handling. All of its state is confined to one thread (the strand); everything else
// posts to it. Every decision is committed to the database before anyone is told: an
// attempt is written before its tasks are sent, a failure is written before the gang is
// stopped.
//
// The loop is defined across server/cluster/, one file per part of its work:
//   cluster_manager.cc     the strand (posting, the loop, ticks), recovery, worker sessions
//                          (one process per name: worker_sessions.h)
//   attempts.cc            attempts: start, task reports, end, stop, release
//   checkpoint_reports.cc  recorded checkpoints: retention, elastic grow
//   scheduling_pass.cc     a pass: its input, the scheduler, applying its decisions
//   node_faults.cc         node faults: sessions that end, failures blamed on a lost
//                          peer, drains (operators', pre-flights', GPU health's),
//                          pre-flight results and GPU health samples
//   hangs.cc               hangs inside collectives and stragglers: ranks' progress,
//                          the hang check, the straggler flags and their policy
// and the parts it is built from, each with its own header: worker_registry (nodes,
// heartbeats, liveness), pass_policy (when a pass runs), port_allocator (MASTER_PORT),
// job_expiry (ttl_after_finished), cluster_view (what other threads read),
// attempt_tracker, scheduler_input, elastic_grow, checkpoint_retention.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "common/clock.h"
#include "scheduler/scheduler.h"
#include "server/cluster/attempt_tracker.h"
#include "server/cluster/checkpoint_retention.h"
#include "server/cluster/cluster_view.h"
#include "server/cluster/hang_rules.h"
#include "server/cluster/job_expiry.h"
#include "server/cluster/pass_policy.h"
#include "server/cluster/port_allocator.h"
#include "server/cluster/scheduler_input.h"
#include "server/cluster/worker_registry.h"
#include "server/serial_executor.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"
#include "storage/usage_store.h"

namespace llamafleet {

class CoordinatorMetrics;

struct ClusterOptions {
  // Workers must present this in their hello. Empty: every hello is refused.
  std::string join_token;
  // A worker silent this long is lost; its tasks fail.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // What workers are told to use.
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // How often the loop checks timeouts and retries scheduling.
  absl::Duration tick = absl::Milliseconds(250);
  // Passes for new submissions and registering workers are coalesced: at most one per
  // this long (or the last pass's duration, if longer), measured on the steady clock, so
  // a stream of commits is not one pass each. Capacity freed by an attempt that ended
  // starts a pass at once when a queued job could use it. TickNow() always passes.
  absl::Duration pass_interval = absl::Milliseconds(20);
  // SIGTERM → SIGKILL grace for cancelled jobs and for the rest of a failed gang.
  absl::Duration cancel_grace = absl::Seconds(15);
  // Preempted jobs get this long to checkpoint and stop.
  absl::Duration preemption_grace = absl::Seconds(60);
  // After a coordinator restart or a reconnect, how long a task the worker does not
  // report may take to show up (as a late status) before its attempt ends as a node fault
  // that uses no restart (the worker lost it; worker_sessions.h).
  // The same grace applies to a task of an attempt that has already ended: once it passes,
  // the task counts as failed and its slots are free again (its worker is told to kill it
  // should it ever report it running).
  absl::Duration missing_task_grace = absl::Seconds(3);
  // A task asked to stop has its grace (cancel or preemption) plus this long to report
  // that it stopped; after that it is released as abandoned, so a silent worker never
  // holds capacity for a task nobody runs.
  absl::Duration stop_report_slack = absl::Seconds(10);
  // After a coordinator restart, how long the workers of recovered attempts have to
  // reconnect (their reconnect backoff reaches 5 s) before they count as lost.
  absl::Duration recovery_grace = absl::Seconds(15);
  // A node drained by a failed pre-flight comes back when a pre-flight passes this long
  // after the drain (node_health.h); operators' drains only by `worker undrain`.
  absl::Duration drain_cooloff = absl::Minutes(10);
  // How often the drains table is read for operators' drains and undrains (another
  // process writes them), on this clock.
  absl::Duration drain_poll = absl::Seconds(1);
  // Hangs inside collectives (hang_rules.h): the bound's floor (zero: off) and factor.
  HangPolicy hang;
  // Stragglers (straggler_rules.h): the rule, and what each queue does with one (a queue
  // not named here: kFlag).
  StragglerPolicy straggler;
  std::map<std::string, StragglerAction> straggler_actions;
  sched::Config scheduler;
  std::map<std::string, sched::QueueConfig> queues;
  // Checkpoints of jobs without checkpoint.dir go to checkpoint_root/<job id>.
  std::string checkpoint_root;
  // Sent in every task (TaskSpec.path_roots): workers re-check the job's paths against them.
  std::vector<std::string> path_roots;
  // The Unix identity a job owner's trainers run as (TaskSpec.identity;
  // server/user_identities.h), on the loop's thread; must not block. nullopt, or no
  // function: the task carries none.
  std::function<std::optional<v1::RunIdentity>(const std::string& owner)> identity_of;
  // Prices an attempt's usage when it ends (storage/usage_store.h). Empty: unpriced.
  PriceTable pricing;
  // Runs on the manager's file-system thread (never the loop: the storage may hang) after
  // a job's record was deleted (ttl_after_finished, or DeleteJob), to remove what the job
  // left: logs, its default checkpoint dir and, when `export_dir` is not empty, that export.
  // Returns a line per thing removed or kept ("checkpoint dir ... removed"). Empty: nothing.
  std::function<std::vector<std::string>(int64_t job_id, const std::string& export_dir)> on_job_deleted;
  // First TCP port handed out as MASTER_PORT (a range of 1000).
  int master_port_base = 29500;
  Clock* clock = Clock::Real();
  // Where scheduling passes are recorded (not owned; must outlive the manager). Null: none.
  CoordinatorMetrics* metrics = nullptr;
  // Called on the loop's thread when an attempt holds nothing any more (every task
  // terminal or abandoned), e.g. to close its log files. Must not block. Null: none.
  std::function<void(int64_t job_id, int attempt)> on_attempt_released;
};

class ClusterManager : public ClusterView {
 public:
  // `store` must outlive the manager. Recovers active attempts from the database, then
  // starts the loop.
  static absl::StatusOr<std::unique_ptr<ClusterManager>> Start(JobStore* store,
                                                               ClusterOptions options);
  // Stops the loop (tasks keep running on the workers; a restarted coordinator picks
  // them up again).
  ~ClusterManager() override;

  // --- From worker sessions (any thread).
  void OnHello(std::shared_ptr<WorkerLink> link, v1::Hello hello);
  void OnWorkerMessage(const std::string& worker, v1::WorkerMessage message);
  void OnDisconnected(const std::string& worker, const WorkerLink* link);

  // Asks for a scheduling pass soon (after submissions).
  void Poke();

  // Deletes a finished job's record, then what on_job_deleted removes (`export_dir` too,
  // when not empty), and calls `done` with its lines (any thread; `done` runs on the
  // manager's file-system thread). FAILED_PRECONDITION while the job is not finished or its
  // last attempt is still stopping; NOT_FOUND when there is no such job.
  void DeleteJob(int64_t job_id, std::string export_dir,
                 std::function<void(absl::StatusOr<std::vector<std::string>>)> done);

  // Snapshot for ListWorkers (any thread).
  std::vector<v1::WorkerInfo> Workers() const;
  // Snapshot for ListQueues and metrics (any thread).
  ClusterUsage Usage() const override;
  bool PendingInfoFor(int64_t job_id, v1::PendingInfo* info) const override;

  // Whether `task_id` belongs to an active attempt and was assigned to `worker` (any
  // thread): reports about a task are accepted only from its own worker.
  bool IsAssigned(const std::string& task_id, const std::string& worker) const;

  // Blocks until the loop has processed everything posted so far (tests).
  void Sync();
  // Runs one tick (timeouts, abandoned tasks, a scheduling pass) now and waits for it
  // (tests with a fake clock).
  void TickNow();
  // Recorded checkpoints whose storage check, and the grow decision that follows it, are
  // done (or skipped): a test waits for it before it moves a fake clock, so the decision
  // is taken at the time the checkpoint arrived.
  int64_t checkpoints_checked() const { return checkpoints_checked_.load(); }

 private:
  using ActiveAttempt = AttemptTracker;

  ClusterManager(JobStore* store, ClusterOptions options);

  // --- The strand (cluster_manager.cc).
  void Post(std::function<void()> fn);
  // `done`, counted as a write in flight until it has run: the destructor waits for
  // every callback.
  std::function<void(absl::Status)> Counted(std::function<void(absl::Status)> done);
  // store_->Write, counted.
  void Write(TxnFunction fn, std::function<void(absl::Status)> done);
  // store_->WriteEach (a transaction per max_background functions, a savepoint each),
  // counted the same way.
  void WriteEach(std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> writes);
  void Loop();
  // Timeouts (lost workers, abandoned tasks, stalls, deadlines), expired jobs, and a
  // scheduling pass when PassPolicy says so.
  void Tick();
  void HandleHello(std::shared_ptr<WorkerLink> link, const v1::Hello& hello);
  // `name` was just marked lost: its unfinished tasks are recorded as failed and their
  // attempts end as node faults.
  void HandleWorkerLost(const std::string& name);
  // A job joined the queue ("submitted", or back to QUEUED): a pass once allowed.
  void HandleQueueGrew();
  // What readers on other threads see (Workers, Usage, IsAssigned) is rebuilt from the
  // strand's state, which costs O(workers + tasks): changes only mark it stale, and
  // Publish() rebuilds it once per turn of the loop (and before Sync/TickNow return), not
  // once per task report.
  void Publish();
  bool publish_workers_ = false;
  bool publish_assignments_ = false;

  // --- Attempts (attempts.cc).
  void HandleTaskStatus(const std::string& worker, const v1::TaskStatus& status);
  void HandleMetrics(const std::string& worker, const v1::TrainMetrics& metrics);
  void HandlePhase(const std::string& worker, const v1::StartupPhase& phase);
  void HandleTokenizing(const std::string& worker, const v1::TokenizingProgress& progress);
  // Rank 0's evaluation: the job's eval figures and an "eval" event (finite values only).
  void HandleEval(const std::string& worker, const v1::EvalResult& eval);
  void HandleEarlyStop(const std::string& worker, const v1::EarlyStop& stop);
  // A job was cancelled (committed CANCELLED): its attempt ends and its gang is stopped.
  void HandleCancelled(const v1::JobEvent& event);
  ActiveAttempt* AttemptOfTask(const std::string& task_id);
  // The attempt of a task reported by `worker`, or null (logged) when the task is not
  // an active attempt's or was assigned to another worker.
  ActiveAttempt* BoundAttempt(const std::string& worker, const std::string& task_id,
                              const char* what);
  // Holds the placement's resources as a new attempt of `job` (so the next pass cannot
  // place on them twice) and returns the write that starts it; the workers are told once
  // it is durable. `unavailable`: lost or disconnected workers (named when a gang shrinks).
  std::pair<TxnFunction, std::function<void(absl::Status)>> StartAttempt(
      const SchedulableJob& job, const sched::Placement& placement,
      const std::set<std::string>& unavailable, absl::Time now);
  // Stops the victim's gang once its preemption is committed.
  void Preempt(const sched::Preemption& preemption);
  // Writes how the attempt ended (once) and stops the rest of its gang.
  void EndAttempt(ActiveAttempt& attempt, AttemptOutcome outcome, const std::string& reason,
                  const std::string& excluded_worker = "");
  void StopTasks(ActiveAttempt& attempt, absl::Duration grace, const std::string& reason);
  void SendAssignments(int64_t job_id);
  // Forgets an ended attempt once it holds nothing (every task terminal or on a lost worker).
  void MaybeRelease(int64_t job_id);
  // Releases tasks nobody will report any more (missing past the grace, or past their
  // stop deadline): recorded as failed, their attempt ended if it was not (a missing
  // task's as a node fault of its worker, kNodeDrained).
  void ReleaseAbandoned(absl::Time now);
  // Ends attempts that stalled (no step progress for stall_timeout_seconds) or ran past
  // their active deadline.
  void EndStalledAndOverdue(absl::Time now);
  // Calls fn for each attempt there is now, looking each up again first: fn (or what it
  // calls, e.g. MaybeRelease) may erase attempts, and an erased one is skipped.
  void ForEachAttemptMayErase(const std::function<void(int64_t job_id, ActiveAttempt& attempt)>& fn);

  // --- Checkpoints (checkpoint_reports.cc).
  void HandleCheckpoint(const std::string& worker, const v1::CheckpointReport& report);
  // After checkpoint `step` of the job's `attempt` was recorded: ends the attempt of an
  // elastic gang below `nodes` to grow it back when capacity returned (elastic_grow.h).
  void MaybeGrow(int64_t job_id, int attempt, int64_t step);
  // After checkpoint `step` at `path` was recorded: on files_ (the storage may hang),
  // forgets it again unless CheckRecordedCheckpoint passes, else grows an elastic gang from
  // it (MaybeGrow, on the strand) and applies retention. At most kMaxStorageChecks wait at
  // once; beyond, a checkpoint stays recorded unchecked (logged).
  void CheckOnStorage(int64_t job_id, int attempt, int keep_last, const std::string& job_dir,
                      const std::string& path, int64_t step);
  static constexpr int kMaxStorageChecks = 64;
  // On files_ (not the strand): deletes the job's checkpoints beyond keep_last that are
  // its own step-N directories, then forgets their rows.
  void ApplyRetention(int64_t job_id, int keep_last, const std::string& job_dir);

  // --- Node faults (node_faults.cc).
  // Records `task_id` as failed with `message` (its attempt's end is the caller's).
  void WriteTaskFailed(const std::string& task_id, const std::string& message);
  // A new process of `worker` said hello (worker_sessions.h, kNewProcess): the tasks
  // placed on its previous process are abandoned and their attempts end as node faults
  // that use no restart (kNodeDrained, `worker` excluded).
  void EndPreviousProcessTasks(const std::string& worker);
  // The session `link` of `worker` ended: shown DISCONNECTED at once, and a failure held
  // in its gang (node_loss.h) is blamed on it.
  void HandleDisconnected(const std::string& worker, const WorkerLink* link);
  // A task failure on `worker` that a lost peer may have caused: ended at once as the
  // peer's node fault when one is gone already, else held for kPeerLossSettle.
  void HoldOrBlame(ActiveAttempt& attempt, const std::string& worker, const TaskReportEffect& effect);
  // Ends attempts whose held failure has a peer gone by now (blamed on it), or whose
  // settle time has passed (as reported).
  void SettleHeldFailures(absl::Time now);
  // A worker's pre-flight result (from its hello or a heartbeat, each sequence once):
  // recorded, and drains or undrains the worker as node_health.h says.
  void HandlePreflight(const std::string& worker, const v1::PreflightResult& result);
  // A worker's GPU health samples (each heartbeat's): events counted and logged, and a
  // fatal one drains the worker (gpu_health_rules.h).
  void HandleGpuHealth(const std::string& worker,
                       const google::protobuf::RepeatedPtrField<v1::GpuSample>& samples);
  // Records the drain and applies it (ApplyDrain).
  void Drain(const WorkerDrainRecord& record);
  // Reads the drains table (every drain_poll) and applies what changed since the last read.
  void ReadDrains(absl::Time now);
  // The worker gets no new placements from now on, and the attempts running on it end as
  // kNodeDrained (restarted elsewhere at once, no restart used). Idempotent.
  void ApplyDrain(const WorkerDrainRecord& drain);
  void ApplyUndrain(const std::string& worker);

  // --- Hangs inside collectives (hangs.cc).
  // The ranks' progress from a heartbeat of `worker`: kept by the attempts of tasks
  // assigned to it (anything else, or out of range, is dropped).
  void HandleRankProgress(const std::string& worker,
                          const google::protobuf::RepeatedPtrField<v1::RankProgress>& ranks);
  // Ends attempts whose gang is hung (hang_rules.h): as a node fault of the rank's worker
  // that uses no restart and excludes it (kNodeDrained), or retryable when no rank is to
  // blame.
  void EndHung(absl::Time now);
  // After new progress of `job_id`'s gang: flags its stragglers (an event, a metric) and,
  // under the queue's restart-without, ends the attempt without the straggler's node.
  void CheckStragglers(int64_t job_id, ActiveAttempt& attempt);

  // --- A scheduling pass (scheduling_pass.cc), over `queue` when given (read by Tick)
  // or the queue as it is now.
  void RunPass(std::optional<QueuedJobsSnapshot> queue);
  // The state of every job that a job of `queue` depends on, where the store still has it
  // (queued ones from the snapshot, the others read).
  std::map<int64_t, v1::JobState> ParentStates(const QueuedJobsSnapshot& queue);

  // Constant after construction.
  JobStore* const store_;
  const ClusterOptions options_;
  const sched::Scheduler scheduler_;
  int64_t subscription_ = 0;

  // Strand state.
  WorkerRegistry workers_;
  std::map<int64_t, ActiveAttempt> attempts_;
  PortAllocator ports_;
  PassPolicy pass_;
  JobExpiry expiry_;
  std::deque<std::pair<std::string, std::string>> recently_released_;  // (task, worker), bounded
  // The drains table as last read (ReadDrains applies only what changed since).
  std::map<std::string, WorkerDrainRecord> drains_read_;
  absl::Time next_drain_read_ = absl::InfinitePast();

  // The loop.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::atomic<int64_t> inflight_writes_{0};
  // Checks of recorded checkpoints queued on files_ and not done (CheckOnStorage).
  std::atomic<int> storage_checks_{0};
  std::atomic<int64_t> checkpoints_checked_{0};

  // Published for readers on other threads.
  PublishedCluster published_;

  // File-system work (checkpoint checks and retention, a deleted job's files) off the loop.
  // Declared last: destroyed first, finishing what was queued while the store is still there.
  std::unique_ptr<SerialExecutor> files_;
};

// ClassifyFailure (how a failed task's exits are classified) is in attempt_tracker.h.

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_CLUSTER_MANAGER_H_
