#ifndef LLAMAFLEET_SERVER_CLUSTER_MANAGER_H_
#define LLAMAFLEET_SERVER_CLUSTER_MANAGER_H_

// The coordinator's control loop: worker sessions, scheduling passes, attempts, failure
// handling. All of its state is confined to one thread (the strand); everything else
// posts to it. Every decision is committed to the database before anyone is told: an
// attempt is written before its tasks are sent, a failure is written before the gang is
// stopped.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "scheduler/clock.h"
#include "scheduler/scheduler.h"
#include "server/attempt_tracker.h"
#include "server/checkpoint_retention.h"
#include "server/scheduler_input.h"
#include "server/serial_executor.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"

namespace llamafleet {

class CoordinatorMetrics;

// The coordinator's end of one worker session. Thread-safe; after Detach() it drops
// everything.
class WorkerLink {
 public:
  virtual ~WorkerLink() = default;
  virtual void Send(v1::CoordinatorMessage message) = 0;
  // Ends the session with `status` (e.g. UNAUTHENTICATED, or replaced by a newer one).
  virtual void Close(const absl::Status& status) = 0;
};

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
  // report may take to show up (as a late status) before its attempt fails.
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
  sched::Config scheduler;
  std::map<std::string, sched::QueueConfig> queues;
  // Checkpoints of jobs without checkpoint.dir go to checkpoint_root/<job id>.
  std::string checkpoint_root;
  // Sent in every task (TaskSpec.path_roots): workers re-check the job's paths against them.
  std::vector<std::string> path_roots;
  // Runs on the manager's thread after ttl_after_finished deleted a job's record (to
  // remove what the job left: logs, its default checkpoint dir). Empty: nothing.
  std::function<void(int64_t job_id)> on_job_deleted;
  // First TCP port handed out as MASTER_PORT (a range of 1000).
  int master_port_base = 29500;
  Clock* clock = Clock::Real();
  // Where scheduling passes are recorded (not owned; must outlive the manager). Null: none.
  CoordinatorMetrics* metrics = nullptr;
  // Called on the loop's thread when an attempt holds nothing any more (every task
  // terminal or abandoned), e.g. to close its log files. Must not block. Null: none.
  std::function<void(int64_t job_id, int attempt)> on_attempt_released;
};

// What the cluster holds, as of the last scheduling pass (or worker coming or going).
struct QueueUsage {
  // Jobs with an attempt not yet ended (scheduled, running, preempting).
  int running_jobs = 0;
  // GPUs (CPU ranks on CPU workers) held by the queue's attempts, including ended ones
  // whose tasks are still stopping.
  int64_t gpus_allocated = 0;
};
struct ClusterUsage {
  std::map<std::string, QueueUsage> queues;  // only queues that hold something
  std::map<v1::WorkerState, int> workers;    // workers by state
  int64_t gpus_total = 0;      // on workers not lost: GPUs, or CPU ranks on CPU-only workers
  int64_t gpus_allocated = 0;  // of those, held by attempts
};

// What the job service reads of the cluster (thread-safe): where QUEUED jobs stand, from
// the last scheduling pass, and what the running attempts hold.
class ClusterView {
 public:
  virtual ~ClusterView() = default;
  virtual bool PendingInfoFor(int64_t job_id, v1::PendingInfo* info) const = 0;
  virtual ClusterUsage Usage() const = 0;
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

 private:
  struct LiveWorker {
    std::string name;
    v1::Inventory inventory;
    std::shared_ptr<WorkerLink> link;  // null while disconnected
    absl::Time last_heartbeat;
    std::vector<v1::GpuSample> gpus;
    bool lost = false;
    // A copy of `inventory` that published snapshots share (made at each hello).
    std::shared_ptr<const v1::Inventory> shared_inventory;
  };
  // A worker as Workers() shows it, without its inventory copied.
  struct PublishedWorker {
    std::string name;
    v1::WorkerState state = v1::WORKER_READY;
    std::shared_ptr<const v1::Inventory> inventory;
    absl::Time last_heartbeat;
    std::vector<std::string> running_task_ids;
    int gpus_allocated = 0;
    std::vector<v1::GpuSample> gpus;
  };
  using ActiveAttempt = AttemptTracker;

  ClusterManager(JobStore* store, ClusterOptions options);
  // A worker is connected and not lost: only then can a pass for a new submission place
  // anything (without one, the periodic pass still explains the queue).
  bool AnyWorkerConnected() const;
  void Post(std::function<void()> fn);
  // store_->Write, counted: the destructor waits for every callback.
  // `done`, counted as a write in flight until it has run.
  std::function<void(absl::Status)> Counted(std::function<void(absl::Status)> done);
  void Write(TxnFunction fn, std::function<void(absl::Status)> done);
  // store_->WriteEach (a transaction per max_background functions, a savepoint each),
  // counted the same way.
  void WriteEach(std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> writes);
  void Loop();

  // Strand-only.
  void Tick();
  // Runs a pass (RunPass) on pass_thread_ and waits for it, or on this thread while
  // passes are starved of CPU (see pass_thread_).
  void SchedulePass();
  void RunPass();
  void HandleHello(std::shared_ptr<WorkerLink> link, const v1::Hello& hello);
  void HandleTaskStatus(const std::string& worker, const v1::TaskStatus& status);
  void HandleMetrics(const std::string& worker, const v1::TrainMetrics& metrics);
  void HandlePhase(const std::string& worker, const v1::StartupPhase& phase);
  void HandleCheckpoint(const std::string& worker, const v1::CheckpointReport& report);
  // After checkpoint `step` of the job's `attempt` was recorded: ends the attempt of an
  // elastic gang below `nodes` to grow it back when capacity returned (elastic_grow.h).
  void MaybeGrow(int64_t job_id, int attempt, int64_t step);
  // The attempt of a task reported by `worker`, or null (logged) when the task is not
  // an active attempt's or was assigned to another worker.
  ActiveAttempt* BoundAttempt(const std::string& worker, const std::string& task_id,
                              const char* what);
  // Releases tasks nobody will report any more (missing past the grace, or past their
  // stop deadline): recorded as failed, their attempt ended if it was not.
  void ReleaseAbandoned(absl::Time now);
  // Calls fn for each attempt there is now, looking each up again first: fn (or what it
  // calls, e.g. MaybeRelease) may erase attempts, and an erased one is skipped.
  void ForEachAttemptMayErase(const std::function<void(int64_t job_id, ActiveAttempt& attempt)>& fn);
  // A job joined the queue ("submitted", or back to QUEUED): a pass once allowed.
  void HandleQueueGrew();
  // A job was cancelled (committed CANCELLED): its attempt ends and its gang is stopped.
  void HandleCancelled(const v1::JobEvent& event);
  // Writes how the attempt ended (once) and stops the rest of its gang.
  void EndAttempt(ActiveAttempt& attempt, AttemptOutcome outcome, const std::string& reason,
                  const std::string& excluded_worker = "");
  void StopTasks(ActiveAttempt& attempt, absl::Duration grace, const std::string& reason);
  void SendAssignments(int64_t job_id);
  void MaybeRelease(int64_t job_id);
  // After `job_id`'s attempt ended or released its slots: a pass at once if a queued job
  // could use them (see last_pass_waits_for_capacity_).
  void WantPassForFreedCapacity(int64_t job_id);
  // On files_ (not the strand): deletes the job's checkpoints beyond keep_last that are
  // its own step-N directories, then forgets their rows.
  void ApplyRetention(int64_t job_id, int keep_last, const std::string& job_dir);
  ActiveAttempt* AttemptOfTask(const std::string& task_id);
  int AllocateMasterPort();
  // What readers on other threads see (Workers, Usage, IsAssigned) is rebuilt from the
  // strand's state, which costs O(workers + tasks): changes only mark it stale, and
  // Publish() rebuilds it once per turn of the loop (and before Sync/TickNow return), not
  // once per task report (500 gangs finishing rebuilt the list of 1,000 workers ~1,500 times).
  void Publish();
  void PublishWorkers();
  void PublishAssignments();
  bool publish_workers_ = false;
  bool publish_assignments_ = false;

  // Constant after construction.
  JobStore* const store_;
  const ClusterOptions options_;
  const sched::Scheduler scheduler_;
  int64_t subscription_ = 0;

  // Strand state.
  std::map<std::string, LiveWorker> workers_;
  std::map<int64_t, ActiveAttempt> attempts_;
  std::set<int> ports_in_use_;
  // Offset from master_port_base where the next search starts. It begins at a random
  // offset: coordinators sharing hosts (tests, several clusters on one box) would otherwise
  // all hand out master_port_base first and collide in their ranks' rendezvous.
  int next_master_port_ = 0;
  std::deque<std::pair<std::string, std::string>> recently_released_;  // (task, worker), bounded
  // A pass at the next turn of the loop (capacity freed, an attempt failed to start).
  bool schedule_wanted_ = true;
  // A pass once next_pass_allowed_ is reached (new submissions, a worker registered).
  bool pass_wanted_ = false;
  // Whether the last pass left a job waiting for capacity (any explanation but "no
  // matching workers" and "larger than the cluster"): only then does a released attempt
  // start a pass at once (MaybeRelease).
  bool last_pass_waits_for_capacity_ = true;
  // The last pass's queued jobs left out while their previous attempt was active.
  std::vector<int64_t> last_pass_held_by_attempt_;
  std::chrono::steady_clock::time_point next_pass_allowed_;
  PendingJobCache pending_jobs_;  // the queued jobs as the scheduler sees them
  // Bumped whenever a worker registers, disconnects or is lost: the scheduler's view of
  // the workers (views_) is rebuilt only then.
  uint64_t workers_version_ = 1;
  uint64_t views_version_ = 0;
  std::vector<WorkerView> views_;
  absl::Time last_pass_ = absl::InfinitePast();
  absl::Time last_ttl_sweep_ = absl::InfinitePast();

  // The loop.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::atomic<int64_t> inflight_writes_{0};

  // Published for readers on other threads.
  mutable std::mutex published_mu_;
  // The last pass's explanations of the jobs it left queued, as the scheduler made them
  // (immutable once published; readers take a reference and look up without the lock).
  struct PublishedPending {
    std::map<int64_t, v1::PendingInfo> held_back;  // in restart backoff
    std::vector<sched::Pending> pending;           // in scheduling order
    // job id → position in `pending`, built by the first lookup.
    mutable std::once_flag index_once;
    mutable std::unordered_map<int64_t, size_t> index;
    bool Find(int64_t job_id, v1::PendingInfo* info) const;
  };
  std::shared_ptr<const PublishedPending> pending_ ABSL_GUARDED_BY(published_mu_);
  std::shared_ptr<const std::vector<PublishedWorker>> worker_infos_ ABSL_GUARDED_BY(published_mu_);
  ClusterUsage usage_ ABSL_GUARDED_BY(published_mu_);
  std::map<std::string, std::string> assignments_ ABSL_GUARDED_BY(published_mu_);  // task → worker

  // File-system work (checkpoint retention) off the loop. Declared (nearly) last:
  // destroyed first, finishing what was queued while the store is still there.
  std::unique_ptr<SerialExecutor> files_;
  // Scheduling passes run here, at SCHED_IDLE, while the loop's thread waits for them.
  // A pass over a deep queue is milliseconds of CPU, and a thread it wakes (the database
  // writer, a gRPC thread acknowledging a submission) is queued on its CPU: at normal
  // priority, niced or not, the woken thread waited up to a scheduler tick (perf sched:
  // p99 1.3 ms, max 8 ms); a SCHED_IDLE thread is preempted at once. SCHED_IDLE gets
  // almost no CPU while every CPU is busy, so a pass that waited for a CPU over twice as
  // long as it computed (and over 50 ms) makes passes run on the loop's thread, at normal
  // priority, for the next 10 s. Null when SCHED_IDLE could not be set.
  std::unique_ptr<SerialExecutor> pass_thread_;
  std::chrono::steady_clock::time_point passes_inline_until_;
};

// ClassifyFailure (how a failed task's exits are classified) is in attempt_tracker.h.

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_MANAGER_H_
