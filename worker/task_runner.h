#ifndef LLAMAFLEET_WORKER_TASK_RUNNER_H_
#define LLAMAFLEET_WORKER_TASK_RUNNER_H_

// Runs one task: one trainer process per local rank, with the environment torchrun would
// give, supervised as a gang. All ranks of a task share one process group, so a signal
// reaches every process they started; every rank dies with the worker (PR_SET_PDEATHSIG).

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llamafleet/v1/worker.pb.h"
#include "worker/run_as.h"

namespace llamafleet::worker {

struct TaskLaunch {
  v1::TaskSpec task;
  // Executable and leading arguments; the runner appends
  // `train --spec spec.json [--path-root <root>...]` (the spec relative to the ranks' working
  // directory, `work_dir`) and `--resume-candidates resume_candidates.json` (the task's
  // recorded checkpoints) or, when it has none, `--resume <dir>` (resume_from, if set).
  std::vector<std::string> trainer_command;
  // Per-task directory (created): spec.json, and the ranks' working directory.
  std::string work_dir;
  // Where the ranks keep tokenized datasets (worker/trainer/token_cache.h), passed as
  // --token-cache-dir: the job owner's directory, already prepared (token_cache_dir.h);
  // "" = the trainer's default.
  std::string token_cache_dir;
  // Bound on that directory's entries (--token-cache-max-size); 0 = none.
  uint64_t token_cache_max_bytes = 0;
  // GPU indices given to this task (CUDA_VISIBLE_DEVICES); empty on a CPU worker.
  std::vector<int> gpu_indices;
  // Set the NCCL/libfabric variables AWS documents for EFA.
  bool efa = false;
  // OpenMP threads per rank (OMP_NUM_THREADS); 0 = leave the inherited value.
  int cpu_threads_per_rank = 0;
  // Identity of the ranks (set: the worker is root and switches to it; `work_dir` is
  // handed to it). Every rank starts with no inherited descriptor beyond stdin/out/err and
  // the minimal environment of TrainerBaseEnvironment().
  std::optional<RunAs> run_as;
  // The ranks' umask (set: the job's directories are private to `run_as`, and what the
  // trainer creates in them stays so); unset: the worker's.
  std::optional<mode_t> umask;
  // Private writable memory each rank may allocate (RLIMIT_DATA, soft and hard, capped at
  // the worker's own hard limit), 0 = unlimited: past it an allocation fails in the rank
  // instead of the node running out of memory. GPU ranks too (worker/rank_memory.h).
  uint64_t memory_limit = 0;
};

// Receives what the ranks print and how the task ends. Called on the runner's own thread;
// implementations must not block (queue and return).
class TaskListener {
 public:
  virtual ~TaskListener() = default;
  virtual void OnLine(const std::string& task_id, int rank, bool is_stderr,
                      const std::string& line) = 0;
  // Exactly once per task, after every rank has been reaped. Each RankExit carries the
  // rank's exit record (status_code/status_message) when it printed one.
  virtual void OnFinished(const std::string& task_id, v1::TaskState state,
                          const std::vector<v1::RankExit>& exits, const std::string& message) = 0;
};

class TaskRunner {
 public:
  // Starts every rank. `listener` must outlive the runner. On error nothing is left running.
  static absl::StatusOr<std::unique_ptr<TaskRunner>> Start(TaskLaunch launch,
                                                           TaskListener* listener,
                                                           absl::Duration failure_grace);
  // Stops (SIGKILL) whatever still runs and reaps it.
  ~TaskRunner();

  // SIGTERM to every rank, SIGKILL after `grace`; the task ends KILLED (unless it had
  // already finished or failed). Idempotent; returns at once.
  void Stop(absl::Duration grace, const std::string& reason);

  const std::string& task_id() const { return launch_.task.task_id(); }
  bool finished() const { return finished_.load(); }
  pid_t process_group() const { return pgid_; }

 private:
  TaskRunner(TaskLaunch launch, TaskListener* listener, absl::Duration failure_grace)
      : launch_(std::move(launch)), listener_(listener), failure_grace_(failure_grace) {}
  // Creates the task's directory, hands it to the ranks' identity, and writes spec.json
  // (and resume_candidates.json) there. FAILED_PRECONDITION naming the directory or file.
  absl::Status PrepareWorkDir();
  absl::Status Launch();
  void KillLaunched();  // after a failed Launch: nothing may stay behind
  // The monitor thread's loop: forwards every rank's output lines, reaps the ranks, stops
  // the gang when one fails or a stop is requested, then reports how the task ended.
  void Monitor();

  // What Monitor knows of a failing gang (monitor thread only).
  struct Failure {
    bool failing = false;  // a rank failed: the others are being stopped
    std::string message;
    absl::Time kill_at = absl::InfiniteFuture();
  };

  struct Rank {
    int global_rank = 0;
    int local_rank = 0;
    pid_t pid = -1;
    int out_fd = -1;
    int err_fd = -1;
    std::string out_buffer, err_buffer;
    bool exited = false;
    int exit_code = 0;
    // The rank's exit record (its "exit" event line), if it printed one.
    std::optional<absl::Status> exit_record;
  };
  // Reads what the rank's stdout or stderr pipe holds now, forwarding whole lines (and an
  // overlong partial one, cut) to the listener; an exit record on stdout is kept in
  // r.exit_record. Returns true when the pipe is closed.
  bool Drain(Rank& r, bool is_stderr);
  // Waits up to 100 ms for output and drains what arrived.
  void PollOutputs();
  // Reaps the ranks that exited; the first nonzero exit (without a stop request) starts
  // stopping the gang. Returns true when every rank has exited.
  bool ReapRanks(Failure& failure);
  // After every rank exited: reads their pipes to EOF without waiting for grandchildren.
  void DrainExitedRanks();
  void ReportFinished(const Failure& failure);

  // Constant after construction.
  const TaskLaunch launch_;
  TaskListener* const listener_;
  const absl::Duration failure_grace_;

  std::vector<Rank> ranks_;  // monitor thread only (after Launch)
  pid_t pgid_ = 0;

  std::mutex mu_;
  bool stop_requested_ = false;                        // guarded by mu_
  absl::Time kill_deadline_ = absl::InfiniteFuture();  // guarded by mu_
  std::string stop_reason_;                            // guarded by mu_
  std::atomic<bool> finished_{false};
  std::thread monitor_;
};

// The variables a rank gets on top of TrainerBaseEnvironment() (exposed for tests).
std::map<std::string, std::string> RankEnvironment(const TaskLaunch& launch, int local_rank);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_TASK_RUNNER_H_
