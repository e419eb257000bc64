#include "server/coordinator.h"

#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/random_hex.h"
#include "common/status_macros.h"
#include "server/auth.h"
#include "server/auth_failures.h"
#include "server/cluster/checkpoint_retention.h"
#include "server/cluster/cluster_manager.h"
#include "server/hello_limits.h"
#include "server/http/http_server.h"
#include "server/job_service.h"
#include "server/listen_address.h"
#include "server/log_store.h"
#include "server/metrics.h"
#include "server/reserved_dir.h"
#include "server/stream_limits.h"
#include "server/submit_policy.h"
#include "server/user_identities.h"
#include "server/worker_service.h"
#include "spdlog/spdlog.h"
#include "storage/job_store.h"

namespace llamafleet {
namespace {

// Takes an exclusive lock on DIR/LOCK so two coordinators never share a database.
absl::StatusOr<int> LockDataDir(const std::string& dir) {
  const std::string path = dir + "/LOCK";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("data dir ", dir, " is in use by another coordinator",
                     n > 0 ? absl::StrCat(" (pid ", std::string(pid, n), ")") : ""));
  }
  std::string me = absl::StrCat(getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) < 0) {
    spdlog::warn("cannot record pid in {}: {}", path, std::strerror(errno));
  }
  return fd;
}

// The join token from DIR/join-token, created (mode 0600, random) if missing.
absl::StatusOr<std::string> LoadOrCreateJoinToken(const std::string& dir) {
  const std::string path = dir + "/join-token";
  std::ifstream in(path);
  std::string token;
  if (in && std::getline(in, token) && !token.empty()) return token;
  std::optional<std::string> random = RandomHex(24);
  if (!random.has_value()) return absl::InternalError("no randomness for a join token");
  token = *std::move(random);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, (token + "\n").data(), token.size() + 1) < 0) {
    if (fd >= 0) close(fd);
    return absl::FailedPreconditionError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  fsync(fd);
  close(fd);
  return token;
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, ": cannot read"));
  }
  if (data.find("-----BEGIN") == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, ": not a PEM file"));
  }
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->options_ = options;
  // Debian builds absl with mutex deadlock detection on, which tracks a lock graph on
  // every absl::Mutex (gRPC's included) and cost several percent of submit throughput.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create data dir ", options.data_dir, ": ", ec.message()));
  }
  absl::StatusOr<int> lock = LockDataDir(options.data_dir);
  if (!lock.ok()) return lock.status();
  c->lock_fd_ = *lock;
  // Before anything starts: a port another process holds is one line, not a listener
  // that fails (or shares the port) once the rest is running.
  LF_RETURN_IF_ERROR(CheckCanListen(options.listen, "--listen"));
  if (!options.http_listen.empty()) {
    LF_RETURN_IF_ERROR(CheckCanListen(options.http_listen, "--http-listen"));
  }

  JobStoreOptions store_options;
  store_options.path = options.data_dir + "/coordinator.db";
  store_options.synchronous_full = options.synchronous_full;
  store_options.group_commit = options.group_commit;
  store_options.max_page_count = options.max_page_count;
  store_options.clock = options.clock;
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(store_options);
  if (!store.ok()) return store.status();
  c->store_ = std::move(*store);

  // Recovery: everything the coordinator knows comes from the database.
  absl::StatusOr<JobCounts> counts = c->store_->CountJobs();
  if (!counts.ok()) return counts.status();
  std::string summary;
  int64_t total = 0;
  for (const auto& [state, n] : counts->by_state) {
    absl::StrAppend(&summary, summary.empty() ? "" : ", ", n, " ", v1::JobState_Name(state));
    total += n;
  }
  spdlog::info("recovered {} jobs from {}{}", total, store_options.path,
               summary.empty() ? "" : absl::StrCat(" (", summary, ")"));

  c->join_token_ = options.join_token;
  if (c->join_token_.empty()) {
    absl::StatusOr<std::string> token = LoadOrCreateJoinToken(options.data_dir);
    if (!token.ok()) return token.status();
    c->join_token_ = *token;
    spdlog::info("workers join with --join-token-file {}/join-token", options.data_dir);
  }
  absl::StatusOr<std::vector<std::string>> roots = NormalizeRoots(options.path_roots, "path roots");
  if (!roots.ok()) return roots.status();
  SubmitPolicy policy;
  policy.path_roots = *roots;
  policy.check_paths = options.check_job_paths;
  for (const auto& [queue, quota] : options.queue_gpu_quotas) policy.queues.insert(queue);
  policy.max_active_jobs_per_user = options.max_active_jobs_per_user;
  for (const auto& [role_name, max] : options.max_priority) {
    absl::StatusOr<v1::Role> role = ParseRole(role_name);
    if (!role.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("limits.max_priority.", role_name, ": ",
                                                     role.status().message()));
    }
    policy.max_priority[*role] = max;
  }
  if (policy.path_roots.empty()) {
    spdlog::warn("no path roots (--path-root DIR or paths.roots): every job names a path, so "
                 "every submission is refused until one is configured");
  } else {
    spdlog::info("path roots: {}", absl::StrJoin(policy.path_roots, ", "));
    bool unchecked = false;
    LF_RETURN_IF_ERROR(PrepareReservedDir(policy.path_roots[0], &unchecked));
    if (unchecked) {
      spdlog::warn("path root {} is not there or not writable here: {}/llamafleet is left to the workers to make",
                   policy.path_roots[0], policy.path_roots[0]);
    }
  }
  if (!options.pricing.empty()) {
    std::vector<std::string> prices;
    for (const auto& [type, price] : options.pricing) prices.push_back(absl::StrCat(type, " ", price));
    spdlog::info("pricing per instance-hour: {}", absl::StrJoin(prices, ", "));
  }
  // Each user's Unix identity on the workers; owners of jobs queued before identities
  // existed get theirs now, so that no task goes out without one.
  absl::StatusOr<std::unique_ptr<UserIdentities>> identities = UserIdentities::Load(c->store_.get(), options.identities);
  if (!identities.ok()) return identities.status();
  c->identities_ = std::move(*identities);
  for (const std::string& refusal : c->identities_->EnsureActiveOwners()) {
    spdlog::error("{} (their tasks carry no identity, which root workers without --run-as refuse)", refusal);
  }
  spdlog::info("{}", c->identities_->Describe());
  c->logs_ = std::make_unique<LogStore>(options.data_dir + "/logs", options.max_log_file_bytes);
  CoordinatorMetricsOptions metrics_options;
  metrics_options.database_path = store_options.path;
  metrics_options.queue_gpu_quotas = options.queue_gpu_quotas;
  metrics_options.start_time = options.clock->Now();
  metrics_options.pricing = options.pricing;
  c->metrics_ = std::make_unique<CoordinatorMetrics>(std::move(metrics_options));
  ClusterOptions cluster;
  cluster.join_token = c->join_token_;
  cluster.heartbeat_timeout = options.heartbeat_timeout;
  cluster.heartbeat_interval = options.heartbeat_interval;
  cluster.cancel_grace = options.cancel_grace;
  cluster.drain_cooloff = options.drain_cooloff;
  cluster.hang.floor = options.hang_floor;
  cluster.hang.step_factor = options.hang_step_factor;
  cluster.straggler = options.straggler;
  cluster.straggler_actions = options.straggler_actions;
  // Default checkpoint dirs live under the first root, where workers may write; without
  // roots (no job can be submitted) jobs from before roots existed keep the old place.
  cluster.checkpoint_root = policy.path_roots.empty() ? options.data_dir + "/checkpoints"
                                                      : DefaultCheckpointRoot(policy.path_roots);
  cluster.path_roots = policy.path_roots;
  cluster.identity_of = [ids = c->identities_.get()](const std::string& owner) { return ids->Find(owner); };
  cluster.pricing = options.pricing;
  // A job deleted by ttl_after_finished takes its logs and its default checkpoint dir
  // (llamafleet's own, <first root>/llamafleet/checkpoints/<id>: ids are never reused)
  // with it. A checkpoint.dir the user named is theirs and stays.
  // Removed through descriptors, links never followed, only when the directory carries
  // the job's marker (checkpoint_retention.h).
  // DeleteJob's artifacts also take the export, under its own marker (kExportMarker).
  cluster.on_job_deleted = [logs = c->logs_.get(), checkpoint_root = cluster.checkpoint_root,
                            anchors = DeletionAnchors(cluster.path_roots, cluster.checkpoint_root)](
                               int64_t job_id, const std::string& export_dir) {
    std::vector<std::string> lines;
    if (absl::Status s = logs->RemoveJob(job_id); !s.ok()) {
      spdlog::warn("job {}: {}", job_id, std::string(s.message()));
      lines.push_back(absl::StrCat("logs kept: ", s.message()));
    } else {
      lines.push_back("logs removed");
    }
    auto remove = [&](const char* what, const std::string& dir, const char* marker) {
      std::error_code ec;
      const bool there = std::filesystem::symlink_status(dir, ec).type() != std::filesystem::file_type::not_found;
      if (absl::Status s = RemoveJobDir(anchors, dir, job_id, marker); !s.ok()) {
        spdlog::warn("job {}: its {} {} is left alone: {}", job_id, what, dir, std::string(s.message()));
        lines.push_back(absl::StrCat(what, " ", dir, " kept: ", s.message()));
      } else {
        lines.push_back(absl::StrCat(
            what, " ", dir, there ? " removed" : ": nothing to remove (the job never made it)"));
      }
    };
    remove("checkpoint dir", absl::StrCat(checkpoint_root, "/", job_id), kJobDirMarker);
    if (!export_dir.empty()) remove("export dir", export_dir, kExportMarker);
    return lines;
  };
  cluster.clock = options.clock;
  cluster.metrics = c->metrics_.get();
  // An attempt's log files are closed once it holds nothing (descriptors stay bounded).
  cluster.on_attempt_released = [logs = c->logs_.get()](int64_t job_id, int attempt) {
    logs->CloseAttempt(job_id, attempt);
  };
  for (const auto& [queue, quota] : options.queue_gpu_quotas) cluster.queues[queue].gpu_quota = quota;
  absl::StatusOr<std::unique_ptr<ClusterManager>> manager =
      ClusterManager::Start(c->store_.get(), cluster);
  if (!manager.ok()) return manager.status();
  c->cluster_ = std::move(*manager);
  if (!options.webhooks.urls.empty()) {
    WebhookOptions webhook_options = options.webhooks;
    webhook_options.dropped_counter = c->metrics_->webhook_deliveries_dropped();
    absl::StatusOr<std::unique_ptr<WebhookNotifier>> webhooks =
        WebhookNotifier::Start(c->store_.get(), webhook_options);
    if (!webhooks.ok()) return webhooks.status();
    c->webhooks_ = std::move(*webhooks);
    std::vector<std::string> shown;  // scheme://host[:port]: a URL's path may hold its secret
    for (const std::string& url : options.webhooks.urls) shown.push_back(WebhookUrlForDisplay(url));
    spdlog::info("webhooks: job and sweep ends posted to {}", absl::StrJoin(shown, ", "));
  }
  c->auth_failures_ = std::make_unique<AuthFailures>(AuthFailureOptions{
      .limit = options.auth_failure_limit, .window = options.auth_failure_window, .block = options.auth_failure_block});
  c->auth_ = std::make_unique<Authenticator>(c->store_.get(), options.auth_enabled);
  c->auth_->set_failures(c->auth_failures_.get());
  c->stream_limits_ = std::make_unique<StreamLimits>(StreamLimitOptions{.max_per_user = options.max_streams_per_user,
                                                                        .idle_timeout = options.stream_idle_timeout,
                                                                        .max_lifetime = options.stream_max_lifetime});
  c->worker_service_ =
      std::make_unique<WorkerServiceImpl>(c->cluster_.get(), c->logs_.get(), c->join_token_);
  c->worker_service_->set_authenticator(c->auth_.get());
  c->worker_service_->set_failures(c->auth_failures_.get());
  c->hello_limits_ = std::make_unique<HelloLimits>(
      HelloLimitOptions{.max_total = options.max_unauthenticated_sessions,
                        .max_per_peer = options.max_unauthenticated_sessions_per_address,
                        .hello_timeout = options.worker_hello_timeout});
  c->worker_service_->set_hello_limits(c->hello_limits_.get());
  c->worker_identity_ =
      std::make_unique<WorkerIdentity>(c->store_.get(), c->join_token_, options.max_worker_identities);
  c->worker_service_->set_identity(c->worker_identity_.get());

  c->job_service_ = std::make_unique<JobServiceImpl>(c->store_.get(), c->auth_.get());
  c->job_service_->set_cluster_view(c->cluster_.get());
  c->job_service_->set_job_deleter([cluster = c->cluster_.get()](int64_t id, std::string export_dir, auto done) {
    cluster->DeleteJob(id, std::move(export_dir), std::move(done));
  });
  c->job_service_->set_log_store(c->logs_.get());
  c->job_service_->set_queue_quotas(options.queue_gpu_quotas);
  c->job_service_->set_pricing(options.pricing);
  c->job_service_->set_submit_policy(std::move(policy));
  c->job_service_->set_metrics(c->metrics_.get());
  c->job_service_->set_user_identities(c->identities_.get());
  c->job_service_->set_stream_limits(c->stream_limits_.get());
  c->metrics_->Attach(c->store_.get(), c->cluster_.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadFile(options.tls_cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(options.tls_key_file, "--tls-key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    credentials = grpc::SslServerCredentials(ssl);
    spdlog::info("gRPC serves TLS with {}", options.tls_cert_file);
  }
  builder.AddListeningPort(options.listen, credentials, &c->port_);
  // gRPC sets SO_REUSEPORT by default: a second coordinator on the same port would bind it
  // too and take a share of the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(c->job_service_.get());
  builder.RegisterService(c->worker_service_.get());
  builder.SetMaxReceiveMessageSize(options.max_request_bytes);
  c->server_ = builder.BuildAndStart();
  if (c->server_ == nullptr || c->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("--listen: cannot listen on ", options.listen));
  }
  const size_t colon = options.listen.rfind(':');
  c->address_ = absl::StrCat(options.listen.substr(0, colon), ":", c->port_);

  if (!options.http_listen.empty()) {
    http::HttpServerOptions http;
    http.listen = options.http_listen;
    http.tls_cert_file = options.tls_cert_file;
    http.tls_key_file = options.tls_key_file;
    http.max_body_bytes = options.max_http_body_bytes;
    http.max_unauthenticated = options.http_max_unauthenticated;
    http.max_unauthenticated_per_peer = options.http_max_unauthenticated_per_address;
    http.unauthenticated_timeout = options.http_unauthenticated_timeout;
    // The HTTP server stops before metrics_ is detached and destroyed.
    http.metrics = [metrics = c->metrics_.get()] { return metrics->Render(); };
    http.path_roots = cluster.path_roots;  // the normalized roots
    http.checkpoint_root = cluster.checkpoint_root;
    http.forwarded_peer_proof = c->auth_failures_->forward_proof();
    absl::StatusOr<std::unique_ptr<http::HttpServer>> server =
        http::HttpServer::Start(http, c->server_->InProcessChannel(grpc::ChannelArguments()));
    if (!server.ok())
      return absl::Status(server.status().code(),
                          absl::StrCat("--http-listen: ", server.status().message()));
    c->http_ = std::move(*server);
    c->http_address_ = c->http_->address();
    spdlog::info("HTTP API and portal on {}://{}/", c->http_->tls() ? "https" : "http",
                 c->http_address_);
  }
  return c;
}

void Coordinator::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  spdlog::info("shutting down: refusing new calls, finishing in-flight calls");
  if (http_ != nullptr) {
    // First: it is a client of the services below, and its event streams would hold
    // their calls open.
    http_->Shutdown();
    http_.reset();
    spdlog::debug("http stopped");
  }
  job_service_->StopWatches();
  worker_service_->CloseSessions();
  server_->GetHealthCheckService()->Shutdown();
  spdlog::debug("health stopped");
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoSeconds(grace));
  spdlog::debug("server shutdown returned");
  server_->Wait();
  spdlog::debug("server wait returned");
  const JobStore::WriterStats stats = store_->writer_stats();
  if (stats.transactions > 0) {
    spdlog::info(
        "writer: {} writes in {} transactions ({:.1f} per transaction), apply {:.3f} ms and "
        "commit {:.3f} ms per transaction{}",
        stats.writes, stats.transactions, double(stats.writes) / stats.transactions,
        absl::ToDoubleMilliseconds(stats.apply_time) / stats.transactions,
        absl::ToDoubleMilliseconds(stats.commit_time) / stats.transactions,
        stats.batches_retried_alone > 0
            ? absl::StrCat("; ", stats.batches_retried_alone,
                           " failed transactions retried write by write")
            : "");
  }
  metrics_->Detach();  // scrapes stop reading the cluster and the store
  cluster_.reset();  // the loop stops; tasks keep running on the workers
  store_.reset();  // commits what was accepted, checkpoints the WAL, closes
  spdlog::info("database closed");
}

void Coordinator::Wait() { server_->Wait(); }

std::string Coordinator::MetricsText() { return metrics_ != nullptr ? metrics_->Render() : ""; }

Coordinator::~Coordinator() {
  if (server_ != nullptr) Shutdown();
  if (lock_fd_ >= 0) close(lock_fd_);
}

}  // namespace llamafleet
