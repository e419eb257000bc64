#ifndef LLAMAFLEET_SERVER_COORDINATOR_H_
#define LLAMAFLEET_SERVER_COORDINATOR_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/cluster/straggler_rules.h"
#include "server/identity_config.h"
#include "server/webhooks.h"

namespace grpc {
class Server;
}

namespace llamafleet {

class JobStore;
class JobServiceImpl;
class WorkerServiceImpl;
class ClusterManager;
class LogStore;
class Authenticator;
class AuthFailures;
class StreamLimits;
class HelloLimits;
class WorkerIdentity;
class CoordinatorMetrics;
class UserIdentities;
struct SubmitPolicy;
namespace http {
class HttpServer;
}

struct CoordinatorOptions {
  // gRPC listen address, HOST:PORT; port 0 picks a free port (see Coordinator::address()).
  std::string listen = "127.0.0.1:7070";
  // Holds the database (coordinator.db) and a LOCK file; created if missing.
  std::string data_dir = "./var/coordinator";
  // SQLite synchronous=FULL: every acknowledged write has been fsynced.
  bool synchronous_full = true;
  // Batch concurrent writes into one transaction (disable only to measure the baseline).
  bool group_commit = true;
  // Largest request message accepted, in bytes.
  int max_request_bytes = 4 << 20;
  // For tests; 0 = default.
  int64_t max_page_count = 0;
  // Shared secret workers present. Empty: read DATA_DIR/join-token, creating it with a
  // random token on first start.
  std::string join_token;
  // A worker silent this long is lost.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // SIGTERM → SIGKILL grace when a job is cancelled or its gang fails.
  absl::Duration cancel_grace = absl::Seconds(15);
  // A node drained by a failed pre-flight comes back when one passes this long after.
  absl::Duration drain_cooloff = absl::Minutes(10);
  // Hangs inside collectives (server/cluster/hang_rules.h): the bound's floor (zero: off)
  // and its factor over the median step time.
  absl::Duration hang_floor = absl::Seconds(60);
  double hang_step_factor = 5;
  // Stragglers (server/cluster/straggler_rules.h): the rule, and each queue's
  // straggler_policy (a queue not named: flag).
  StragglerPolicy straggler;
  std::map<std::string, StragglerAction> straggler_actions;
  // Largest log file per job, attempt and rank.
  int64_t max_log_file_bytes = 64 << 20;
  // HTTP/JSON API, portal and /metrics (Boost.Beast), HOST:PORT; port 0 picks a free
  // port (see Coordinator::http_address()). Empty: no HTTP server.
  std::string http_listen;
  // Largest HTTP request body accepted, in bytes (413 beyond it).
  int64_t max_http_body_bytes = 4 << 20;
  // PEM certificate chain and private key: when both are set, gRPC and HTTP serve TLS only.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Bearer-token authentication and role checks. false only with --insecure-no-auth:
  // every caller is then an admin named by x-llamafleet-user (or "anonymous").
  bool auth_enabled = true;
  // GPU quotas per queue (scheduler::QueueConfig); queues not named are unlimited.
  // Jobs may name only these queues and "default".
  std::map<std::string, int64_t> queue_gpu_quotas;
  // Directories jobs may name paths in (--path-root, paths.roots; absolute). Empty: no job
  // may name a path, which refuses every job (data.train_path is required). The first
  // holds default checkpoint dirs: <root>/llamafleet/checkpoints/<job id>.
  std::vector<std::string> path_roots;
  // Whether submissions' inputs and outputs are checked where the path roots are mounted
  // here (server/job_paths_check.h). false (--no-check-paths) where the coordinator's view
  // of the roots is not the workers' (another filesystem at the same path).
  bool check_job_paths = true;
  // Active (queued + running) jobs per user (limits.max_active_jobs_per_user); 0 = none.
  int64_t max_active_jobs_per_user = 10000;
  // Highest spec.priority per role name ("viewer", "user", "admin"; limits.max_priority).
  // A role not named may use the whole range.
  std::map<std::string, int32_t> max_priority;
  // Price per instance-hour by instance type (`pricing`), each > 0: what attempts' GPU
  // time costs (storage/usage_store.h). Empty: nothing is priced.
  std::map<std::string, double> pricing;
  // Where job and sweep ends are posted (server/webhooks.h); no URLs: none.
  WebhookOptions webhooks;
  // The Unix identity each user's jobs run as on root workers (`users:`,
  // `dynamic_uid_range`; server/user_identities.h).
  IdentityConfig identities;
  // Caps on what one caller can hold (docs/security.md). Following streams (WatchJob,
  // StreamJobLogs with follow, over gRPC and HTTP together) per user, and how long one may
  // stall or live (server/stream_limits.h; <= 0 / zero: none).
  int max_streams_per_user = 16;
  absl::Duration stream_idle_timeout = absl::Minutes(5);
  absl::Duration stream_max_lifetime = absl::Hours(24);
  // Failed token, join token and credential attempts per peer address: this many within
  // the window block the peer for auth_failure_block (server/auth_failures.h; <= 0: off).
  int auth_failure_limit = 20;
  absl::Duration auth_failure_window = absl::Minutes(1);
  absl::Duration auth_failure_block = absl::Minutes(5);
  // Worker names one join token may mint (server/cluster/worker_identity.h; <= 0: no cap).
  int64_t max_worker_identities = 1024;
  // Worker sessions before their hello is accepted (server/hello_limits.h): in all and from
  // one address (<= 0: no cap), and how long one may wait for its hello (zero: forever).
  int max_unauthenticated_sessions = 256;
  int max_unauthenticated_sessions_per_address = 8;
  absl::Duration worker_hello_timeout = absl::Seconds(20);
  // HTTP connections that have not presented a good token (server/http/connection_limits.h):
  // in all and from one address, and how long each may take to send a request head.
  int http_max_unauthenticated = 128;
  int http_max_unauthenticated_per_address = 32;
  absl::Duration http_unauthenticated_timeout = absl::Seconds(5);
  // Not owned.
  Clock* clock = Clock::Real();
};

// The coordinator process's parts, wired together in the order they must start and stop:
// lock the data dir, open (and recover) the store, then serve; stop serving new calls,
// finish in-flight ones, then close the store.
class Coordinator {
 public:
  // Starts serving. Errors: the data dir cannot be created or is locked by another
  // coordinator, the database cannot be opened, the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& options);
  ~Coordinator();

  // "HOST:PORT" actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  JobStore* store() { return store_.get(); }
  ClusterManager* cluster() { return cluster_.get(); }
  const std::string& join_token() const { return join_token_; }
  // "HOST:PORT" of the HTTP server actually bound ("" without one).
  const std::string& http_address() const { return http_address_; }
  // One Prometheus scrape (text format 0.0.4; CoordinatorMetrics::kContentType), for
  // GET /metrics. Thread-safe; after Shutdown only the process's own counters.
  std::string MetricsText();

  // Graceful stop: stop the HTTP server (its event streams end), refuse new calls, end watch streams, let in-flight calls finish
  // (at most `grace`), commit pending writes, close the database. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(10));
  // Blocks until the server has shut down.
  void Wait();

 private:
  Coordinator() = default;

  // The stages of Start, in order; each returns the error that stops it.
  // The data dir made and locked, the listen ports checked free.
  absl::Status LockDataDir();
  // The database opened and its jobs counted; the join token read or made.
  absl::Status OpenStore();
  // What submissions are checked against (path roots normalized, reserved dir prepared).
  absl::StatusOr<SubmitPolicy> MakeSubmitPolicy() const;
  // Users' Unix identities, the log store and the metrics.
  absl::Status LoadIdentitiesAndLogs();
  // The cluster manager (scheduler, workers, attempts) over `path_roots`, default
  // checkpoint dirs under `checkpoint_root`.
  absl::Status StartCluster(const std::vector<std::string>& path_roots,
                            const std::string& checkpoint_root);
  absl::Status StartWebhooks();
  // Authentication, limits and the two gRPC services.
  void MakeServices(SubmitPolicy policy);
  absl::Status StartGrpc();
  absl::Status StartHttp(const std::vector<std::string>& path_roots,
                         const std::string& checkpoint_root);

  CoordinatorOptions options_;
  int lock_fd_ = -1;
  std::string address_;
  int port_ = 0;
  std::string join_token_;
  std::string http_address_;
  // Declared before what records into it, so it is destroyed after them.
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<UserIdentities> identities_;  // before what looks identities up
  std::unique_ptr<AuthFailures> auth_failures_;
  std::unique_ptr<Authenticator> auth_;
  // Outlives the job service's streams (server_ and http_ go first).
  std::unique_ptr<StreamLimits> stream_limits_;
  // Outlives the worker service's sessions.
  std::unique_ptr<HelloLimits> hello_limits_;
  std::unique_ptr<WorkerIdentity> worker_identity_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<ClusterManager> cluster_;
  std::unique_ptr<WebhookNotifier> webhooks_;  // before store_ is closed, it stops posting
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  // Calls the services through server_'s in-process channel: stopped before server_.
  std::unique_ptr<http::HttpServer> http_;
  bool shut_down_ = false;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_COORDINATOR_H_
