// llamafleet-coordinator: parse flags (and an optional YAML config file), start, wait for
// SIGTERM/SIGINT, shut down in order.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "server/auth.h"
#include "server/coordinator.h"
#include "server/coordinator_config.h"
#include "server/identity_config.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "storage/job_store.h"
#include "storage/worker_credential_store.h"
#include "storage/worker_drain_store.h"
#include "yaml-cpp/yaml.h"

namespace {

namespace v1 = llamafleet::v1;

int Fail(const std::string& message) {
  std::cerr << "llamafleet-coordinator: " << message << std::endl;
  return 1;
}

// The coordinator database in `data_dir`; with `create`, made (and its directory) when
// missing.
absl::StatusOr<std::unique_ptr<llamafleet::JobStore>> OpenStore(const std::string& data_dir, bool create) {
  const std::string db = data_dir + "/coordinator.db";
  std::error_code ec;
  if (create) std::filesystem::create_directories(data_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create data dir ", data_dir, ": ", ec.message()));
  if (!create && !std::filesystem::exists(db)) {
    return absl::NotFoundError(absl::StrCat("no coordinator database in ", data_dir));
  }
  llamafleet::JobStoreOptions options;
  options.path = db;
  return llamafleet::JobStore::Open(options);
}

// Creates `path` for a secret, readable and writable by its owner only: refused when
// anything (a file, a link) is there already, so nothing is written through a link and
// no earlier file is replaced. The descriptor, or an error naming the path.
absl::StatusOr<int> CreatePrivateFile(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--output ", path, ": ",
        errno == EEXIST ? "exists; remove it or name a new file" : std::strerror(errno)));
  }
  if (fchmod(fd, 0600) != 0) {  // a umask may have taken the owner's bits too
    const int error = errno;
    close(fd);
    unlink(path.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("--output ", path, ": ", std::strerror(error)));
  }
  return fd;
}

// A warning when stdout, about to receive a secret, is a regular file that others may read
// (a `> alice.token` under the usual umask).
void WarnIfStdoutIsReadable() {
  struct stat st = {};
  if (fstat(STDOUT_FILENO, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) == 0) return;
  std::fprintf(stderr,
               "llamafleet-coordinator: warning: stdout is a file readable by others (mode %04o); "
               "the token is a "
               "secret: chmod 600 it, or use --output FILE, which is written with mode 0600\n",
               static_cast<unsigned>(st.st_mode & 07777));
}

// The `token` subcommands. `create` prints the token alone on stdout, or writes it to
// `output` (mode 0600, a new file). Exit 0 on success, 1 on failure with one error line.
int RunTokenCommand(const std::string& command, const std::string& data_dir,
                    const std::string& user, const std::string& role_name, int64_t id,
                    const std::string& output) {
  v1::Role role = v1::ROLE_UNSPECIFIED;
  int output_fd = -1;
  if (command == "create") {
    // Check the arguments before touching the data dir: nothing is created for bad input.
    absl::StatusOr<v1::Role> parsed = llamafleet::ParseRole(role_name);
    if (!parsed.ok()) return Fail(absl::StrCat("--role: ", parsed.status().message()));
    if (absl::Status s = llamafleet::ValidateUserName(user, "--user"); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    role = *parsed;
    if (!output.empty()) {
      absl::StatusOr<int> fd = CreatePrivateFile(output);
      if (!fd.ok()) return Fail(std::string(fd.status().message()));
      output_fd = *fd;
    }
  }
  // A token that could not be created leaves no file behind.
  auto fail_create = [&](const absl::Status& s) {
    if (output_fd >= 0) {
      close(output_fd);
      unlink(output.c_str());
    }
    return Fail(std::string(s.message()));
  };
  absl::StatusOr<std::unique_ptr<llamafleet::JobStore>> store = OpenStore(data_dir, command == "create");
  if (!store.ok()) return fail_create(store.status());
  if (command == "create") {
    absl::StatusOr<std::string> token = llamafleet::CreateApiToken(store->get(), user, role);
    if (!token.ok()) return fail_create(token.status());
    if (output_fd >= 0) {
      const std::string line = *token + "\n";
      const bool written =
          write(output_fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
          fsync(output_fd) == 0;
      if (close(output_fd) != 0 || !written) {
        output_fd = -1;
        unlink(output.c_str());
        return Fail(absl::StrCat("--output ", output,
                                 ": cannot write the token; revoke it with token revoke"));
      }
      std::fprintf(stderr, "created a %s token for %s in %s (mode 0600); it is shown only there\n",
                   llamafleet::RoleName(role).c_str(), user.c_str(), output.c_str());
      return 0;
    }
    WarnIfStdoutIsReadable();
    std::printf("%s\n", token->c_str());
    std::fprintf(stderr, "created a %s token for %s; it is shown only now\n",
                 llamafleet::RoleName(role).c_str(), user.c_str());
    return 0;
  }
  if (command == "list") {
    absl::StatusOr<std::vector<llamafleet::ApiTokenRecord>> tokens = llamafleet::ListApiTokens(store->get());
    if (!tokens.ok()) return Fail(std::string(tokens.status().message()));
    std::printf("%-6s %-24s %-8s %-20s %s\n", "ID", "USER", "ROLE", "CREATED", "STATE");
    for (const auto& t : *tokens) {
      std::printf("%-6lld %-24s %-8s %-20s %s\n", static_cast<long long>(t.id), t.user.c_str(),
                  llamafleet::RoleName(t.role).c_str(),
                  absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMicros(t.create_time_us),
                                   absl::UTCTimeZone())
                      .c_str(),
                  t.revoked ? "revoked" : "active");
    }
    return 0;
  }
  if (absl::Status s = llamafleet::RevokeApiToken(store->get(), id); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::fprintf(stderr, "revoked token %lld\n", static_cast<long long>(id));
  return 0;
}

// The `worker` subcommands, rows a running coordinator reads as they change. `forget NAME`
// releases a worker name, so that the next worker joining under it (with the join token)
// gets a new credential; `drain NAME --reason TEXT` / `undrain NAME` set worker_drains,
// read every second (its attempts on a drained worker restart elsewhere without using a
// restart). Exit 0 on success, 1 with one error line.
int RunWorkerCommand(const std::string& command, const std::string& data_dir, const std::string& name,
                     const std::string& reason) {
  absl::StatusOr<std::unique_ptr<llamafleet::JobStore>> store = OpenStore(data_dir, false);
  if (!store.ok()) return Fail(std::string(store.status().message()));
  absl::Status s = command == "drain"     ? llamafleet::DrainWorker(store->get(), name, reason)
                   : command == "undrain" ? llamafleet::UndrainWorker(store->get(), name)
                                          : llamafleet::ForgetWorkerCredential(store->get(), name);
  if (!s.ok()) return Fail(std::string(s.message()));
  if (command == "drain") {
    std::fprintf(stderr,
                 "drained worker %s: no new placements; its running attempts restart elsewhere "
                 "without using a restart\n",
                 name.c_str());
  } else if (command == "undrain") {
    std::fprintf(stderr, "undrained worker %s: it takes placements again\n", name.c_str());
  } else {
    std::fprintf(stderr,
                 "released worker name %s: the next worker to join under it with the join token "
                 "gets a new credential\n",
                 name.c_str());
  }
  return 0;
}

using llamafleet::CoordinatorOptions;
using llamafleet::CoordinatorSettings;

// Where the coordinator listens, what it stores and how, whom it trusts.
void AddServingFlags(CLI::App& app, CoordinatorOptions* o, CoordinatorSettings* s) {
  app.add_option("--listen", o->listen, "gRPC address HOST:PORT (port 0 = any free port)");
  app.add_option("--data-dir", o->data_dir, "directory for the database");
  app.add_option(
      "--config", s->config_file,
      "YAML file with any of: listen, data_dir, synchronous, group_commit, log_level, "
      "http_listen, queues, paths (roots), limits (max_active_jobs_per_user, "
      "max_priority), pricing (instance type: price per instance-hour), users (API user: Unix "
      "identity), dynamic_uid_range");
  app.add_option("--synchronous", s->synchronous,
                 "SQLite durability: full (fsync every commit) or normal")
      ->check(CLI::IsMember({"full", "normal"}));
  app.add_flag("--no-group-commit", s->no_group_commit,
               "one transaction per write (for measuring the group-commit baseline)");
  app.add_option("--join-token", o->join_token,
                 "shared secret workers must present (visible in ps: prefer --join-token-file or "
                 "LLAMAFLEET_JOIN_TOKEN; default: DATA_DIR/join-token, created)");
  app.add_option("--join-token-file", s->join_token_file, "file holding the join token");
  app.add_option(
      "--webhook", o->webhooks.urls,
      "POST a signed JSON body here when a job or a sweep ends (repeatable; http:// or https://)");
  app.add_option("--webhook-secret-file", s->webhook_secret_file,
                 "file holding the webhooks' HMAC-SHA256 key (required with --webhook)");
  app.add_option("--http-listen", o->http_listen,
                 "HTTP/JSON API, web portal and /metrics on HOST:PORT (port 0 = any free port)");
  app.add_option("--tls-cert", o->tls_cert_file,
                 "PEM certificate chain: serve gRPC and HTTP over TLS")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", o->tls_key_file, "PEM private key for --tls-cert")
      ->check(CLI::ExistingFile);
  app.add_option("--path-root", o->path_roots,
                 "directory jobs may name paths in (repeatable; shared storage such as an FSx "
                 "mount); the first also holds default checkpoint dirs. Without one, no job "
                 "can be submitted");
  app.add_flag("--no-check-paths", s->no_check_paths,
               "do not check jobs' inputs and outputs on the path roots at submission (for a "
               "coordinator whose path roots are not the workers' storage)");
  app.add_option("--dynamic-uid-range", s->dynamic_uid_range,
                 "FIRST-LAST: Unix uids given, one per user for good, to users that users: in the "
                 "config does not "
                 "map; their jobs run as them on root workers (default 61184-65519; none: such "
                 "users cannot submit)");
  app.add_flag("--insecure-no-auth", s->insecure_no_auth,
               "turn off token authentication: every caller is an admin (local demos only)");
  app.add_option("--log-level", s->log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
}

// How failures are detected and handled: lost workers, grace periods, hangs, stragglers.
void AddFailureFlags(CLI::App& app, CoordinatorSettings* s) {
  app.add_option("--heartbeat-timeout", s->heartbeat_timeout_s,
                 "seconds without a heartbeat before a worker is lost");
  app.add_option("--cancel-grace", s->cancel_grace_s,
                 "seconds between SIGTERM and SIGKILL when a job is cancelled or its gang fails");
  app.add_option(
      "--drain-cooloff", s->drain_cooloff_s,
      "seconds after a failed pre-flight drained a worker before a passing one brings it back");
  app.add_option(
      "--hang-floor", s->hang_floor_s,
      "seconds: the least a gang may make no progress inside a collective before it is "
      "hung (the bound is max(this, --hang-step-factor x the median step time); 0: off)");
  app.add_option("--hang-step-factor", s->hang_step_factor,
                 "the hang bound's multiple of the job's median recent step time (>= 1)");
  app.add_option("--straggler-factor", s->straggler_factor,
                 "a rank working more than this x the other ranks' median a step is slow (> 1)");
  app.add_option(
      "--straggler-rounds", s->straggler_rounds,
      "rounds (every rank stepped) in a row a rank must be slow to be flagged a straggler (>= 1)");
}

// Bounds on what callers may hold: streams, failed logins, worker names, unauthenticated
// connections.
void AddLimitFlags(CLI::App& app, CoordinatorOptions* o, CoordinatorSettings* s) {
  app.add_option(
      "--max-streams-per-user", o->max_streams_per_user,
      "event and log streams with follow one user may hold open at once, gRPC and HTTP together "
      "(0: no cap)");
  app.add_option("--stream-idle-timeout", s->stream_idle_timeout_s,
                 "seconds a stream's client may leave a written message untaken before the stream "
                 "is ended (0: never)");
  app.add_option("--stream-max-lifetime", s->stream_max_lifetime_s,
                 "seconds a following stream may stay open; then it ends with UNAVAILABLE and "
                 "clients reconnect "
                 "(0: no bound)");
  app.add_option("--auth-failure-limit", o->auth_failure_limit,
                 "failed token, join token or worker credential attempts from one address within "
                 "--auth-failure-window that block it for --auth-failure-block (0: off)");
  app.add_option("--auth-failure-window", s->auth_failure_window_s,
                 "seconds over which failed attempts are counted");
  app.add_option("--auth-failure-block", s->auth_failure_block_s,
                 "seconds a blocked address's calls are refused (RESOURCE_EXHAUSTED, HTTP 429)");
  app.add_option("--max-worker-identities", o->max_worker_identities,
                 "worker names the join token may mint (0: no cap); llamafleet-coordinator worker "
                 "forget frees one");
  app.add_option(
      "--max-unauthenticated-sessions", o->max_unauthenticated_sessions,
      "worker sessions waiting for their hello, in all (0: no cap); a new one from an address "
      "holding fewer takes the place of one from the address holding the most");
  app.add_option(
      "--max-unauthenticated-sessions-per-address", o->max_unauthenticated_sessions_per_address,
      "worker sessions waiting for their hello from one address; more are refused (0: no cap)");
  app.add_option(
      "--worker-hello-timeout", s->worker_hello_timeout_s,
      "seconds a worker session may wait for its hello (the worker's pre-flight runs first) "
      "before it is ended (0: forever)");
  app.add_option(
      "--http-max-unauthenticated-connections", o->http_max_unauthenticated,
      "HTTP connections without a good token yet, in all (0: no cap but the 512 in "
      "all); a new one takes the place of an idle one from the address holding the most");
  app.add_option("--http-max-unauthenticated-per-address", o->http_max_unauthenticated_per_address,
                 "HTTP connections without a good token yet from one address; more are answered "
                 "503 (0: no cap)");
  app.add_option(
      "--http-unauthenticated-timeout", s->http_unauthenticated_timeout_s,
      "seconds an HTTP connection without a good token yet has to send each request's head");
}

// The admin subcommands (token create|list|revoke, worker forget|drain|undrain) and their
// arguments, filled by the parse.
struct AdminCommands {
  CLI::App* token = nullptr;
  CLI::App* token_create = nullptr;
  CLI::App* token_list = nullptr;
  std::string token_dir, token_user, token_role, token_output;
  int64_t token_id = 0;
  CLI::App* worker = nullptr;
  CLI::App* worker_drain = nullptr;
  CLI::App* worker_undrain = nullptr;
  std::string worker_dir, worker_name, drain_reason;
};

// llamafleet-coordinator token create|list|revoke: API tokens in DATA_DIR's database.
// Safe while a coordinator serves the same data dir (SQLite WAL; the coordinator reads
// tokens from the database on every call, so a new or revoked token counts at once).
void AddTokenCommands(CLI::App& app, AdminCommands* c) {
  c->token = app.add_subcommand("token", "manage API tokens (admin, on the coordinator host)");
  c->token->require_subcommand(1);
  c->token_create = c->token->add_subcommand(
      "create", "create a token; prints it alone on stdout, or writes it with --output");
  c->token_create->add_option("--data-dir", c->token_dir, "the coordinator's data dir")->required();
  c->token_create->add_option("--user", c->token_user, "user the token names")->required();
  c->token_create->add_option("--role", c->token_role, "viewer, user or admin")->required();
  c->token_create->add_option(
      "--output", c->token_output,
      "write the token to this new file, readable by you only (mode 0600), not to stdout");
  c->token_list = c->token->add_subcommand("list", "list tokens (never the secrets)");
  c->token_list->add_option("--data-dir", c->token_dir, "the coordinator's data dir")->required();
  CLI::App* revoke = c->token->add_subcommand("revoke", "revoke a token by id");
  revoke->add_option("--data-dir", c->token_dir, "the coordinator's data dir")->required();
  revoke->add_option("--id", c->token_id, "token id (from token list)")->required();
}

// llamafleet-coordinator worker forget NAME: release a worker name's credential;
// worker drain|undrain NAME: no new placements (or again).
void AddWorkerCommands(CLI::App& app, AdminCommands* c) {
  c->worker =
      app.add_subcommand("worker", "manage worker identities (admin, on the coordinator host)");
  c->worker->require_subcommand(1);
  CLI::App* forget = c->worker->add_subcommand(
      "forget", "release a worker name: the next worker joining under it gets a new credential");
  forget->add_option("name", c->worker_name, "the worker's name")->required();
  forget->add_option("--data-dir", c->worker_dir, "the coordinator's data dir")->required();
  c->worker_drain = c->worker->add_subcommand(
      "drain", "stop placing work on a worker; its running attempts restart elsewhere");
  c->worker_drain->add_option("name", c->worker_name, "the worker's name")->required();
  c->worker_drain
      ->add_option("--reason", c->drain_reason, "why (shown in workers, the portal and metrics)")
      ->required();
  c->worker_drain->add_option("--data-dir", c->worker_dir, "the coordinator's data dir")
      ->required();
  c->worker_undrain =
      c->worker->add_subcommand("undrain", "let a drained worker take placements again");
  c->worker_undrain->add_option("name", c->worker_name, "the worker's name")->required();
  c->worker_undrain->add_option("--reason", c->drain_reason, "why (logged)");
  c->worker_undrain->add_option("--data-dir", c->worker_dir, "the coordinator's data dir")
      ->required();
}

// Runs the admin subcommand that was parsed, if any: its exit code, or nullopt for none.
std::optional<int> RunAdminCommand(const AdminCommands& c) {
  if (c.worker->parsed()) {
    spdlog::set_level(spdlog::level::warn);
    return RunWorkerCommand(c.worker_drain->parsed()     ? "drain"
                            : c.worker_undrain->parsed() ? "undrain"
                                                         : "forget",
                            c.worker_dir, c.worker_name, c.drain_reason);
  }
  if (c.token->parsed()) {
    spdlog::set_level(spdlog::level::warn);
    return RunTokenCommand(c.token_create->parsed() ? "create"
                           : c.token_list->parsed() ? "list"
                                                    : "revoke",
                           c.token_dir, c.token_user, c.token_role, c.token_id, c.token_output);
  }
  return std::nullopt;
}

// Starts the coordinator, waits for SIGTERM or SIGINT, shuts it down. The exit code.
int Serve(const CoordinatorOptions& options, const CoordinatorSettings& settings) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("coordinator"));
  spdlog::set_level(spdlog::level::from_str(settings.log_level));
  // Block the stop signals in every thread; the main thread waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<std::unique_ptr<llamafleet::Coordinator>> coordinator =
      llamafleet::Coordinator::Start(options);
  if (!coordinator.ok()) return Fail(std::string(coordinator.status().message()));
  std::printf("listening on %s\n", (*coordinator)->address().c_str());
  if (!(*coordinator)->http_address().empty()) {
    std::printf("http listening on %s\n", (*coordinator)->http_address().c_str());
  }
  std::fflush(stdout);
  spdlog::info("data dir {}, synchronous={}, group commit {}", options.data_dir,
               settings.synchronous, options.group_commit ? "on" : "off");
  if (!options.auth_enabled) {
    spdlog::warn("*****************************************************************");
    spdlog::warn("AUTHENTICATION IS OFF (--insecure-no-auth): anyone who can reach");
    spdlog::warn("{} can submit and cancel any job as an admin.", (*coordinator)->address());
    spdlog::warn("*****************************************************************");
  }
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  spdlog::info("received {}", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  (*coordinator)->Shutdown();
  coordinator->reset();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CoordinatorOptions options;
  CoordinatorSettings settings;
  CLI::App app{"llamafleet coordinator: job API, durable queue, scheduler"};
  AddServingFlags(app, &options, &settings);
  AddFailureFlags(app, &settings);
  AddLimitFlags(app, &options, &settings);
  AdminCommands admin;
  AddTokenCommands(app, &admin);
  AddWorkerCommands(app, &admin);
  CLI11_PARSE(app, argc, argv);
  if (std::optional<int> code = RunAdminCommand(admin)) return *code;

  // The config file fills in what the command line did not set.
  if (!settings.config_file.empty()) {
    absl::Status s = llamafleet::ApplyConfigFile(
        settings.config_file, [&app](const char* flag) { return app.count(flag) > 0; }, &options,
        &settings);
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  settings.dynamic_uid_range_flag = app.count("--dynamic-uid-range") > 0;
  if (absl::Status s = llamafleet::FinishCoordinatorOptions(settings, &options); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  return Serve(options, settings);
}
