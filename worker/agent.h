#ifndef LLAMAFLEET_WORKER_AGENT_H_
#define LLAMAFLEET_WORKER_AGENT_H_

// llamafleet-worker's core: registers with the coordinator over one WorkerService.Session
// stream, runs the tasks it is given (TaskRunner), and relays heartbeats, task status,
// logs, metrics and checkpoint reports. It reconnects on its own, keeping its tasks
// running; tasks that end while it is disconnected are reported when it is back.

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "worker/gpu_health.h"
#include "worker/credential_file.h"
#include "worker/preflight.h"
#include "worker/rank_progress.h"
#include "worker/task_runner.h"
#include "worker/task_starts.h"
#include "worker/trainer_events.h"

namespace llamafleet::worker {

struct AgentOptions {
  std::string coordinator;              // HOST:PORT
  std::string join_token;
  std::string tls_ca_pem;               // CA of the coordinator's TLS certificate; "" = plaintext
  std::string data_dir;                 // task dirs live in data_dir/tasks/; the worker's
                                        // credential in data_dir/worker-credential (0600)
  std::string name;                     // default: host name
  std::string address;                  // what peers dial for MASTER_ADDR; default: host name
  int cpu_ranks = 0;                    // > 0: a CPU worker with this many ranks
  std::string instance_type;
  std::map<std::string, std::string> labels;
  std::vector<std::string> trainer_command;  // e.g. {"/path/llamafleet-train"}
  absl::Duration heartbeat_interval = absl::Seconds(2);
  absl::Duration failure_grace = absl::Seconds(10);  // SIGTERM → SIGKILL when a rank failed
  size_t max_buffered_log_lines = 10000;             // beyond: dropped, counted
  TrainerIdentities identities;         // who the trainers run as (see worker/run_as.h)
  // Pre-flight (worker/preflight.h): before each hello, after each task once none runs,
  // and this often while idle (zero: only then).
  absl::Duration preflight_interval = absl::Minutes(5);
  std::string preflight_fail_for_test;  // fault injection: fail while this file exists
  std::string gpu_health_fake_for_test;  // fault injection: GPU health events (gpu_health.h)
  // Private writable memory each rank may allocate (RLIMIT_DATA, worker/rank_memory.h);
  // unset: a share of the host's memory (DefaultRankMemoryLimit); 0: none.
  std::optional<uint64_t> trainer_memory_limit;
  uint64_t token_cache_max_bytes = 0;    // bound on each owner's token cache; 0 = none
};

class WorkerAgent : public TaskListener {
 public:
  explicit WorkerAgent(AgentOptions options);
  ~WorkerAgent() override;

  // Connects and serves until Shutdown(); reconnects with backoff after a lost session.
  // Returns an error only for a refusal that retrying cannot fix (bad join token).
  absl::Status Run();
  // Stops every task (SIGTERM, then SIGKILL after `grace`), reports them, and makes Run()
  // return. Safe from any thread (not from a signal handler).
  void Shutdown(absl::Duration grace = absl::Seconds(10));

  const v1::Inventory& inventory() const { return inventory_; }

  // TaskListener (runner threads).
  void OnLine(const std::string& task_id, int rank, bool is_stderr,
              const std::string& line) override;
  void OnFinished(const std::string& task_id, v1::TaskState state,
                  const std::vector<v1::RankExit>& exits, const std::string& message) override;

 private:
  // One connected session; returns how it ended.
  absl::Status RunSession();
  // On the session's reader thread: never waits for storage (a start goes to starts_).
  void HandleMessage(const v1::CoordinatorMessage& message);
  // On a thread of starts_: checks the task's paths, prepares it and launches its ranks.
  void StartTask(const v1::TaskSpec& task);
  std::string WorkerName() const;
  void SendLoop(grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>* stream,
                const std::atomic<bool>* session_done);
  void EnqueueReliable(v1::WorkerMessage message);
  // Stops at once the trainers of `task_ids` that still run, and cancels those still
  // starting: no session holds them (worker/session_hold.h).
  void StopUnheld(const std::vector<std::string>& task_ids, const std::string& why);
  std::vector<int> AllocateGpus(int count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a pre-flight now and records it as the latest (numbered); blocks for its length.
  v1::PreflightResult RunPreflightNow();
  // Runs pre-flights while the worker is idle: when one is wanted (a task ended) or the
  // interval passed; each result is sent at once in a heartbeat. Until Shutdown().
  void PreflightLoop();
  // The message a rank's event line is relayed as (metrics, phases, evals, checkpoints,
  // tokenizing progress at most once per kTokenizingRelayInterval...), or nullopt.
  std::optional<v1::WorkerMessage> StructuredMessage(const std::string& task_id,
                                                     const trainer_events::Event& event);
  // Appends `line` to the log batches to send, or counts it dropped when the buffer is full.
  void BufferLogLine(const std::string& task_id, int rank, bool is_stderr,
                     const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const AgentOptions options_;
  v1::Inventory inventory_;
  // Hello.instance_id: this process's, for its whole life (worker/session_hold.h).
  const std::string instance_id_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::unique_ptr<TaskRunner>> tasks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<int>> task_gpus_ ABSL_GUARDED_BY(mu_);
  std::set<int> free_gpus_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> total_steps_ ABSL_GUARDED_BY(mu_);
  // When each task's tokenizing progress was last relayed, and the dataset whose finished
  // build was last relayed (at most one per kTokenizingRelayInterval, and each finished
  // build once).
  struct TokenizingRelayed {
    absl::Time time;
    std::string finished_path;
  };
  std::map<std::string, TokenizingRelayed> last_tokenizing_ ABSL_GUARDED_BY(mu_);
  // Outbound: reliable messages (status, checkpoints, metrics) are kept across
  // reconnects; log lines are bounded and dropped (counted) when the buffer is full.
  std::deque<v1::WorkerMessage> reliable_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::LogLines> logs_ ABSL_GUARDED_BY(mu_);
  size_t buffered_log_lines_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::pair<std::string, int>, int64_t> dropped_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<TaskRunner>> finished_runners_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* session_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  v1::PreflightResult preflight_ ABSL_GUARDED_BY(mu_);  // the latest (sequence 0: none yet)
  int64_t preflight_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  bool preflight_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool preflights_done_ ABSL_GUARDED_BY(mu_) = false;  // Run() returned
  absl::Time last_preflight_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  // Every running rank's latest progress line, relayed in heartbeats (its own lock).
  RankProgressTable rank_progress_;
  // The GPUs' health samples, relayed in heartbeats (its own thread and lock).
  std::unique_ptr<GpuHealthMonitor> gpu_health_;
  // Task starts in flight, each on its own thread (its own lock; taken under mu_, never
  // the other way). Joined before the tasks are destroyed.
  std::unique_ptr<TaskStarts> starts_;
};

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_AGENT_H_
