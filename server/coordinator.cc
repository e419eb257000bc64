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
#include <functional>
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
absl::StatusOr<int> LockDir(const std::string& dir) {
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

// What ttl_after_finished and DeleteJob remove with a job: its logs and its default
// checkpoint dir (llamafleet's own, <first root>/llamafleet/checkpoints/<id>: ids are never
// reused), and its export under its own marker (kExportMarker). A checkpoint.dir the user
// named is theirs and stays. Removed through descriptors, links never followed, only when
// the directory carries the job's marker (checkpoint_retention.h). One line per thing.
std::function<std::vector<std::string>(int64_t, const std::string&)> JobDeletionHook(
    LogStore* logs, const std::string& checkpoint_root,
    const std::vector<std::string>& path_roots) {
  return [logs, checkpoint_root, anchors = DeletionAnchors(path_roots, checkpoint_root)](
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
      const bool there =
          std::filesystem::symlink_status(dir, ec).type() != std::filesystem::file_type::not_found;
      if (absl::Status s = RemoveJobDir(anchors, dir, job_id, marker); !s.ok()) {
        spdlog::warn("job {}: its {} {} is left alone: {}", job_id, what, dir,
                     std::string(s.message()));
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
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->options_ = options;
  // Debian builds absl with mutex deadlock detection on, which tracks a lock graph on
  // every absl::Mutex (gRPC's included) and cost several percent of submit throughput.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  LF_RETURN_IF_ERROR(c->LockDataDir());
  LF_RETURN_IF_ERROR(c->OpenStore());
  LF_ASSIGN_OR_RETURN(SubmitPolicy policy, c->MakeSubmitPolicy());
  LF_RETURN_IF_ERROR(c->LoadIdentitiesAndLogs());
  // Default checkpoint dirs live under the first root, where workers may write; without
  // roots (no job can be submitted) jobs from before roots existed keep the old place.
  const std::vector<std::string> roots = policy.path_roots;
  const std::string checkpoint_root =
      roots.empty() ? options.data_dir + "/checkpoints" : DefaultCheckpointRoot(roots);
  LF_RETURN_IF_ERROR(c->StartCluster(roots, checkpoint_root));
  LF_RETURN_IF_ERROR(c->StartWebhooks());
  c->MakeServices(std::move(policy));
  LF_RETURN_IF_ERROR(c->StartGrpc());
  LF_RETURN_IF_ERROR(c->StartHttp(roots, checkpoint_root));
  return c;
}

absl::Status Coordinator::LockDataDir() {
  std::error_code ec;
  std::filesystem::create_directories(options_.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create data dir ", options_.data_dir, ": ", ec.message()));
  }
  LF_ASSIGN_OR_RETURN(lock_fd_, LockDir(options_.data_dir));
  // Before anything starts: a port another process holds is one line, not a listener
  // that fails (or shares the port) once the rest is running.
  LF_RETURN_IF_ERROR(CheckCanListen(options_.listen, "--listen"));
  if (!options_.http_listen.empty()) {
    LF_RETURN_IF_ERROR(CheckCanListen(options_.http_listen, "--http-listen"));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::OpenStore() {
  JobStoreOptions store_options;
  store_options.path = options_.data_dir + "/coordinator.db";
  store_options.synchronous_full = options_.synchronous_full;
  store_options.group_commit = options_.group_commit;
  store_options.max_page_count = options_.max_page_count;
  store_options.clock = options_.clock;
  LF_ASSIGN_OR_RETURN(store_, JobStore::Open(store_options));

  // Recovery: everything the coordinator knows comes from the database.
  LF_ASSIGN_OR_RETURN(JobCounts counts, store_->CountJobs());
  std::string summary;
  int64_t total = 0;
  for (const auto& [state, n] : counts.by_state) {
    absl::StrAppend(&summary, summary.empty() ? "" : ", ", n, " ", v1::JobState_Name(state));
    total += n;
  }
  spdlog::info("recovered {} jobs from {}{}", total, store_options.path,
               summary.empty() ? "" : absl::StrCat(" (", summary, ")"));

  join_token_ = options_.join_token;
  if (join_token_.empty()) {
    LF_ASSIGN_OR_RETURN(join_token_, LoadOrCreateJoinToken(options_.data_dir));
    spdlog::info("workers join with --join-token-file {}/join-token", options_.data_dir);
  }
  return absl::OkStatus();
}

absl::StatusOr<SubmitPolicy> Coordinator::MakeSubmitPolicy() const {
  SubmitPolicy policy;
  LF_ASSIGN_OR_RETURN(policy.path_roots, NormalizeRoots(options_.path_roots, "path roots"));
  policy.check_paths = options_.check_job_paths;
  for (const auto& [queue, quota] : options_.queue_gpu_quotas) policy.queues.insert(queue);
  policy.max_active_jobs_per_user = options_.max_active_jobs_per_user;
  for (const auto& [role_name, max] : options_.max_priority) {
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
  if (!options_.pricing.empty()) {
    std::vector<std::string> prices;
    for (const auto& [type, price] : options_.pricing)
      prices.push_back(absl::StrCat(type, " ", price));
    spdlog::info("pricing per instance-hour: {}", absl::StrJoin(prices, ", "));
  }
  return policy;
}

absl::Status Coordinator::LoadIdentitiesAndLogs() {
  // Each user's Unix identity on the workers; owners of jobs queued before identities
  // existed get theirs now, so that no task goes out without one.
  LF_ASSIGN_OR_RETURN(identities_, UserIdentities::Load(store_.get(), options_.identities));
  for (const std::string& refusal : identities_->EnsureActiveOwners()) {
    spdlog::error("{} (their tasks carry no identity, which root workers without --run-as refuse)", refusal);
  }
  spdlog::info("{}", identities_->Describe());
  logs_ = std::make_unique<LogStore>(options_.data_dir + "/logs", options_.max_log_file_bytes);
  CoordinatorMetricsOptions metrics_options;
  metrics_options.database_path = options_.data_dir + "/coordinator.db";
  metrics_options.queue_gpu_quotas = options_.queue_gpu_quotas;
  metrics_options.start_time = options_.clock->Now();
  metrics_options.pricing = options_.pricing;
  metrics_ = std::make_unique<CoordinatorMetrics>(std::move(metrics_options));
  return absl::OkStatus();
}

absl::Status Coordinator::StartCluster(const std::vector<std::string>& path_roots,
                                       const std::string& checkpoint_root) {
  ClusterOptions cluster;
  cluster.join_token = join_token_;
  cluster.heartbeat_timeout = options_.heartbeat_timeout;
  cluster.heartbeat_interval = options_.heartbeat_interval;
  cluster.cancel_grace = options_.cancel_grace;
  cluster.drain_cooloff = options_.drain_cooloff;
  cluster.hang.floor = options_.hang_floor;
  cluster.hang.step_factor = options_.hang_step_factor;
  cluster.straggler = options_.straggler;
  cluster.straggler_actions = options_.straggler_actions;
  cluster.checkpoint_root = checkpoint_root;
  cluster.path_roots = path_roots;
  cluster.identity_of = [ids = identities_.get()](const std::string& owner) {
    return ids->Find(owner);
  };
  cluster.pricing = options_.pricing;
  cluster.on_job_deleted = JobDeletionHook(logs_.get(), checkpoint_root, path_roots);
  cluster.clock = options_.clock;
  cluster.metrics = metrics_.get();
  // An attempt's log files are closed once it holds nothing (descriptors stay bounded).
  cluster.on_attempt_released = [logs = logs_.get()](int64_t job_id, int attempt) {
    logs->CloseAttempt(job_id, attempt);
  };
  for (const auto& [queue, quota] : options_.queue_gpu_quotas)
    cluster.queues[queue].gpu_quota = quota;
  LF_ASSIGN_OR_RETURN(cluster_, ClusterManager::Start(store_.get(), cluster));
  return absl::OkStatus();
}

absl::Status Coordinator::StartWebhooks() {
  if (options_.webhooks.urls.empty()) return absl::OkStatus();
  WebhookOptions webhook_options = options_.webhooks;
  webhook_options.dropped_counter = metrics_->webhook_deliveries_dropped();
  LF_ASSIGN_OR_RETURN(webhooks_, WebhookNotifier::Start(store_.get(), webhook_options));
  std::vector<std::string> shown;  // scheme://host[:port]: a URL's path may hold its secret
  for (const std::string& url : options_.webhooks.urls) shown.push_back(WebhookUrlForDisplay(url));
  spdlog::info("webhooks: job and sweep ends posted to {}", absl::StrJoin(shown, ", "));
  return absl::OkStatus();
}

void Coordinator::MakeServices(SubmitPolicy policy) {
  const CoordinatorOptions& o = options_;
  auth_failures_ =
      std::make_unique<AuthFailures>(AuthFailureOptions{.limit = o.auth_failure_limit,
                                                        .window = o.auth_failure_window,
                                                        .block = o.auth_failure_block});
  auth_ = std::make_unique<Authenticator>(store_.get(), o.auth_enabled);
  auth_->set_failures(auth_failures_.get());
  stream_limits_ =
      std::make_unique<StreamLimits>(StreamLimitOptions{.max_per_user = o.max_streams_per_user,
                                                        .idle_timeout = o.stream_idle_timeout,
                                                        .max_lifetime = o.stream_max_lifetime});
  worker_service_ = std::make_unique<WorkerServiceImpl>(cluster_.get(), logs_.get(), join_token_);
  worker_service_->set_authenticator(auth_.get());
  worker_service_->set_failures(auth_failures_.get());
  hello_limits_ = std::make_unique<HelloLimits>(
      HelloLimitOptions{.max_total = o.max_unauthenticated_sessions,
                        .max_per_peer = o.max_unauthenticated_sessions_per_address,
                        .hello_timeout = o.worker_hello_timeout});
  worker_service_->set_hello_limits(hello_limits_.get());
  worker_identity_ =
      std::make_unique<WorkerIdentity>(store_.get(), join_token_, o.max_worker_identities);
  worker_service_->set_identity(worker_identity_.get());

  job_service_ = std::make_unique<JobServiceImpl>(store_.get(), auth_.get());
  job_service_->set_cluster_view(cluster_.get());
  job_service_->set_job_deleter(
      [cluster = cluster_.get()](int64_t id, std::string export_dir, auto done) {
        cluster->DeleteJob(id, std::move(export_dir), std::move(done));
      });
  job_service_->set_log_store(logs_.get());
  job_service_->set_queue_quotas(o.queue_gpu_quotas);
  job_service_->set_pricing(o.pricing);
  job_service_->set_submit_policy(std::move(policy));
  job_service_->set_metrics(metrics_.get());
  job_service_->set_user_identities(identities_.get());
  job_service_->set_stream_limits(stream_limits_.get());
  metrics_->Attach(store_.get(), cluster_.get());
}

absl::Status Coordinator::StartGrpc() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options_.tls_cert_file.empty()) {
    LF_ASSIGN_OR_RETURN(std::string cert, ReadFile(options_.tls_cert_file, "--tls-cert"));
    LF_ASSIGN_OR_RETURN(std::string key, ReadFile(options_.tls_key_file, "--tls-key"));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    credentials = grpc::SslServerCredentials(ssl);
    spdlog::info("gRPC serves TLS with {}", options_.tls_cert_file);
  }
  builder.AddListeningPort(options_.listen, credentials, &port_);
  // gRPC sets SO_REUSEPORT by default: a second coordinator on the same port would bind it
  // too and take a share of the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(job_service_.get());
  builder.RegisterService(worker_service_.get());
  builder.SetMaxReceiveMessageSize(options_.max_request_bytes);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("--listen: cannot listen on ", options_.listen));
  }
  const size_t colon = options_.listen.rfind(':');
  address_ = absl::StrCat(options_.listen.substr(0, colon), ":", port_);
  return absl::OkStatus();
}

absl::Status Coordinator::StartHttp(const std::vector<std::string>& path_roots,
                                    const std::string& checkpoint_root) {
  if (options_.http_listen.empty()) return absl::OkStatus();
  http::HttpServerOptions http;
  http.listen = options_.http_listen;
  http.tls_cert_file = options_.tls_cert_file;
  http.tls_key_file = options_.tls_key_file;
  http.max_body_bytes = options_.max_http_body_bytes;
  http.max_unauthenticated = options_.http_max_unauthenticated;
  http.max_unauthenticated_per_peer = options_.http_max_unauthenticated_per_address;
  http.unauthenticated_timeout = options_.http_unauthenticated_timeout;
  // The HTTP server stops before metrics_ is detached and destroyed.
  http.metrics = [metrics = metrics_.get()] { return metrics->Render(); };
  http.path_roots = path_roots;  // the normalized roots
  http.checkpoint_root = checkpoint_root;
  http.forwarded_peer_proof = auth_failures_->forward_proof();
  absl::StatusOr<std::unique_ptr<http::HttpServer>> server =
      http::HttpServer::Start(http, server_->InProcessChannel(grpc::ChannelArguments()));
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("--http-listen: ", server.status().message()));
  }
  http_ = std::move(*server);
  http_address_ = http_->address();
  spdlog::info("HTTP API and portal on {}://{}/", http_->tls() ? "https" : "http", http_address_);
  return absl::OkStatus();
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
