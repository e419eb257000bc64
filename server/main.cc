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

}  // namespace

int main(int argc, char** argv) {
  llamafleet::CoordinatorOptions options;
  std::string config_file;
  std::string synchronous = "full";
  bool no_group_commit = false;
  std::string log_level = "info";
  std::string join_token_file;
  double heartbeat_timeout_s = 10;
  double cancel_grace_s = 15;
  double drain_cooloff_s = 600;
  double hang_floor_s = 60;
  double hang_step_factor = 5;
  double straggler_factor = 2;
  int straggler_rounds = 5;
  double stream_idle_timeout_s = 300;
  double stream_max_lifetime_s = 86400;
  double auth_failure_window_s = 60;
  double auth_failure_block_s = 300;
  double worker_hello_timeout_s = 20;
  double http_unauthenticated_timeout_s = 5;

  CLI::App app{"llamafleet coordinator: job API, durable queue, scheduler"};
  app.add_option("--listen", options.listen, "gRPC address HOST:PORT (port 0 = any free port)");
  app.add_option("--data-dir", options.data_dir, "directory for the database");
  app.add_option("--config", config_file,
                 "YAML file with any of: listen, data_dir, synchronous, group_commit, log_level, "
                 "http_listen, queues, paths (roots), limits (max_active_jobs_per_user, "
                 "max_priority), pricing (instance type: price per instance-hour), users (API user: Unix "
                 "identity), dynamic_uid_range");
  app.add_option("--synchronous", synchronous, "SQLite durability: full (fsync every commit) or normal")
      ->check(CLI::IsMember({"full", "normal"}));
  app.add_flag("--no-group-commit", no_group_commit,
               "one transaction per write (for measuring the group-commit baseline)");
  app.add_option("--join-token", options.join_token,
                 "shared secret workers must present (visible in ps: prefer --join-token-file or "
                 "LLAMAFLEET_JOIN_TOKEN; default: DATA_DIR/join-token, created)");
  app.add_option("--join-token-file", join_token_file, "file holding the join token");
  std::string webhook_secret_file;
  app.add_option("--webhook", options.webhooks.urls,
                 "POST a signed JSON body here when a job or a sweep ends (repeatable; http:// or https://)");
  app.add_option("--webhook-secret-file", webhook_secret_file,
                 "file holding the webhooks' HMAC-SHA256 key (required with --webhook)");
  app.add_option("--heartbeat-timeout", heartbeat_timeout_s,
                 "seconds without a heartbeat before a worker is lost");
  app.add_option("--cancel-grace", cancel_grace_s,
                 "seconds between SIGTERM and SIGKILL when a job is cancelled or its gang fails");
  app.add_option("--drain-cooloff", drain_cooloff_s,
                 "seconds after a failed pre-flight drained a worker before a passing one brings it back");
  app.add_option("--hang-floor", hang_floor_s,
                 "seconds: the least a gang may make no progress inside a collective before it is "
                 "hung (the bound is max(this, --hang-step-factor x the median step time); 0: off)");
  app.add_option("--hang-step-factor", hang_step_factor,
                 "the hang bound's multiple of the job's median recent step time (>= 1)");
  app.add_option("--straggler-factor", straggler_factor,
                 "a rank working more than this x the other ranks' median a step is slow (> 1)");
  app.add_option("--straggler-rounds", straggler_rounds,
                 "rounds (every rank stepped) in a row a rank must be slow to be flagged a straggler (>= 1)");
  app.add_option("--max-streams-per-user", options.max_streams_per_user,
                 "event and log streams with follow one user may hold open at once, gRPC and HTTP together "
                 "(0: no cap)");
  app.add_option("--stream-idle-timeout", stream_idle_timeout_s,
                 "seconds a stream's client may leave a written message untaken before the stream is ended (0: never)");
  app.add_option("--stream-max-lifetime", stream_max_lifetime_s,
                 "seconds a following stream may stay open; then it ends with UNAVAILABLE and clients reconnect "
                 "(0: no bound)");
  app.add_option("--auth-failure-limit", options.auth_failure_limit,
                 "failed token, join token or worker credential attempts from one address within "
                 "--auth-failure-window that block it for --auth-failure-block (0: off)");
  app.add_option("--auth-failure-window", auth_failure_window_s, "seconds over which failed attempts are counted");
  app.add_option("--auth-failure-block", auth_failure_block_s,
                 "seconds a blocked address's calls are refused (RESOURCE_EXHAUSTED, HTTP 429)");
  app.add_option("--max-worker-identities", options.max_worker_identities,
                 "worker names the join token may mint (0: no cap); llamafleet-coordinator worker forget frees one");
  app.add_option(
      "--max-unauthenticated-sessions", options.max_unauthenticated_sessions,
      "worker sessions waiting for their hello, in all (0: no cap); a new one from an address "
      "holding fewer takes the place of one from the address holding the most");
  app.add_option(
      "--max-unauthenticated-sessions-per-address",
      options.max_unauthenticated_sessions_per_address,
      "worker sessions waiting for their hello from one address; more are refused (0: no cap)");
  app.add_option(
      "--worker-hello-timeout", worker_hello_timeout_s,
      "seconds a worker session may wait for its hello (the worker's pre-flight runs first) "
      "before it is ended (0: forever)");
  app.add_option(
      "--http-max-unauthenticated-connections", options.http_max_unauthenticated,
      "HTTP connections without a good token yet, in all (0: no cap but the 512 in "
      "all); a new one takes the place of an idle one from the address holding the most");
  app.add_option("--http-max-unauthenticated-per-address",
                 options.http_max_unauthenticated_per_address,
                 "HTTP connections without a good token yet from one address; more are answered "
                 "503 (0: no cap)");
  app.add_option(
      "--http-unauthenticated-timeout", http_unauthenticated_timeout_s,
      "seconds an HTTP connection without a good token yet has to send each request's head");
  app.add_option("--http-listen", options.http_listen,
                 "HTTP/JSON API, web portal and /metrics on HOST:PORT (port 0 = any free port)");
  app.add_option("--tls-cert", options.tls_cert_file, "PEM certificate chain: serve gRPC and HTTP over TLS")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", options.tls_key_file, "PEM private key for --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--path-root", options.path_roots,
                 "directory jobs may name paths in (repeatable; shared storage such as an FSx "
                 "mount); the first also holds default checkpoint dirs. Without one, no job "
                 "can be submitted");
  bool no_check_paths = false;
  app.add_flag("--no-check-paths", no_check_paths,
               "do not check jobs' inputs and outputs on the path roots at submission (for a "
               "coordinator whose path roots are not the workers' storage)");
  std::string dynamic_uid_range;
  app.add_option("--dynamic-uid-range", dynamic_uid_range,
                 "FIRST-LAST: Unix uids given, one per user for good, to users that users: in the config does not "
                 "map; their jobs run as them on root workers (default 61184-65519; none: such users cannot submit)");
  bool insecure_no_auth = false;
  app.add_flag("--insecure-no-auth", insecure_no_auth,
               "turn off token authentication: every caller is an admin (local demos only)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));

  // llamafleet-coordinator token create|list|revoke: API tokens in DATA_DIR's database.
  // Safe while a coordinator serves the same data dir (SQLite WAL; the coordinator reads
  // tokens from the database on every call, so a new or revoked token counts at once).
  CLI::App* token_cmd = app.add_subcommand("token", "manage API tokens (admin, on the coordinator host)");
  token_cmd->require_subcommand(1);
  std::string token_dir, token_user, token_role, token_output;
  int64_t token_id = 0;
  CLI::App* token_create = token_cmd->add_subcommand(
      "create", "create a token; prints it alone on stdout, or writes it with --output");
  token_create->add_option("--data-dir", token_dir, "the coordinator's data dir")->required();
  token_create->add_option("--user", token_user, "user the token names")->required();
  token_create->add_option("--role", token_role, "viewer, user or admin")->required();
  token_create->add_option(
      "--output", token_output,
      "write the token to this new file, readable by you only (mode 0600), not to stdout");
  CLI::App* token_list = token_cmd->add_subcommand("list", "list tokens (never the secrets)");
  token_list->add_option("--data-dir", token_dir, "the coordinator's data dir")->required();
  CLI::App* token_revoke = token_cmd->add_subcommand("revoke", "revoke a token by id");
  token_revoke->add_option("--data-dir", token_dir, "the coordinator's data dir")->required();
  token_revoke->add_option("--id", token_id, "token id (from token list)")->required();
  // llamafleet-coordinator worker forget NAME: release a worker name's credential.
  CLI::App* worker_cmd = app.add_subcommand("worker", "manage worker identities (admin, on the coordinator host)");
  worker_cmd->require_subcommand(1);
  std::string worker_dir, worker_name;
  CLI::App* worker_forget = worker_cmd->add_subcommand(
      "forget", "release a worker name: the next worker joining under it gets a new credential");
  worker_forget->add_option("name", worker_name, "the worker's name")->required();
  worker_forget->add_option("--data-dir", worker_dir, "the coordinator's data dir")->required();
  // llamafleet-coordinator worker drain|undrain NAME: no new placements (or again).
  std::string drain_reason;
  CLI::App* worker_drain = worker_cmd->add_subcommand(
      "drain", "stop placing work on a worker; its running attempts restart elsewhere");
  worker_drain->add_option("name", worker_name, "the worker's name")->required();
  worker_drain->add_option("--reason", drain_reason, "why (shown in workers, the portal and metrics)")
      ->required();
  worker_drain->add_option("--data-dir", worker_dir, "the coordinator's data dir")->required();
  CLI::App* worker_undrain = worker_cmd->add_subcommand("undrain", "let a drained worker take placements again");
  worker_undrain->add_option("name", worker_name, "the worker's name")->required();
  worker_undrain->add_option("--reason", drain_reason, "why (logged)");
  worker_undrain->add_option("--data-dir", worker_dir, "the coordinator's data dir")->required();
  CLI11_PARSE(app, argc, argv);

  if (worker_cmd->parsed()) {
    spdlog::set_level(spdlog::level::warn);
    return RunWorkerCommand(worker_drain->parsed() ? "drain" : worker_undrain->parsed() ? "undrain" : "forget",
                            worker_dir, worker_name, drain_reason);
  }
  if (token_cmd->parsed()) {
    spdlog::set_level(spdlog::level::warn);
    return RunTokenCommand(token_create->parsed() ? "create"
                           : token_list->parsed() ? "list"
                                                  : "revoke",
                           token_dir, token_user, token_role, token_id, token_output);
  }

  // The config file fills in what the command line did not set.
  if (!config_file.empty()) {
    YAML::Node config;
    try {
      config = YAML::LoadFile(config_file);
    } catch (const YAML::Exception& e) {
      return Fail(absl::StrCat("cannot read config ", config_file, ": ", e.what()));
    }
    if (!config.IsNull() && !config.IsMap()) {
      return Fail(absl::StrCat("config ", config_file, ": expected a mapping"));
    }
    const std::set<std::string> known = {"listen",    "data_dir",    "synchronous", "group_commit",
                                         "log_level", "http_listen", "queues",
                                         "paths",     "limits",      "pricing",
                                         "users",     "dynamic_uid_range"};
    try {
      for (const auto& kv : config) {
        const std::string key = kv.first.as<std::string>();
        if (!known.count(key)) return Fail(absl::StrCat("config ", config_file, ": unknown key ", key));
        if (key == "listen" && app.count("--listen") == 0) options.listen = kv.second.as<std::string>();
        if (key == "data_dir" && app.count("--data-dir") == 0) {
          options.data_dir = kv.second.as<std::string>();
        }
        if (key == "synchronous" && app.count("--synchronous") == 0) {
          synchronous = kv.second.as<std::string>();
          if (synchronous != "full" && synchronous != "normal") {
            return Fail(absl::StrCat("config ", config_file, ": synchronous must be full or normal"));
          }
        }
        if (key == "group_commit" && app.count("--no-group-commit") == 0) {
          no_group_commit = !kv.second.as<bool>();
        }
        if (key == "log_level" && app.count("--log-level") == 0) log_level = kv.second.as<std::string>();
        if (key == "http_listen" && app.count("--http-listen") == 0) {
          options.http_listen = kv.second.as<std::string>();
        }
        if (key == "paths") {
          // paths: {roots: [DIR, ...]}
          if (!kv.second.IsMap() || !kv.second["roots"] || !kv.second["roots"].IsSequence() ||
              kv.second.size() != 1) {
            return Fail(absl::StrCat("config ", config_file, ": paths must be a mapping with roots: [DIR, ...]"));
          }
          if (app.count("--path-root") == 0) {
            options.path_roots = kv.second["roots"].as<std::vector<std::string>>();
          }
        }
        if (key == "limits") {
          // limits: {max_active_jobs_per_user: N, max_priority: {ROLE: N, ...}}
          if (!kv.second.IsMap()) return Fail(absl::StrCat("config ", config_file, ": limits must be a mapping"));
          for (const auto& limit : kv.second) {
            const std::string name = limit.first.as<std::string>();
            if (name == "max_active_jobs_per_user") {
              options.max_active_jobs_per_user = limit.second.as<int64_t>();
              if (options.max_active_jobs_per_user < 0) {
                return Fail(absl::StrCat("config ", config_file,
                                         ": limits.max_active_jobs_per_user must be >= 0 (0: no limit)"));
              }
            } else if (name == "max_priority") {
              if (!limit.second.IsMap()) {
                return Fail(absl::StrCat("config ", config_file,
                                         ": limits.max_priority must map roles (viewer, user, admin) to priorities"));
              }
              for (const auto& role : limit.second) {
                const std::string role_name = role.first.as<std::string>();
                if (!llamafleet::ParseRole(role_name).ok()) {
                  return Fail(absl::StrCat("config ", config_file, ": limits.max_priority.", role_name,
                                           ": not a role (viewer, user, admin)"));
                }
                options.max_priority[role_name] = role.second.as<int32_t>();
              }
            } else {
              return Fail(absl::StrCat("config ", config_file, ": unknown key limits.", name,
                                       " (max_active_jobs_per_user, max_priority)"));
            }
          }
        }
        if (key == "users") {
          absl::StatusOr<std::map<std::string, v1::RunIdentity>> users = llamafleet::ParseUsersConfig(kv.second);
          if (!users.ok()) return Fail(absl::StrCat("config ", config_file, ": ", users.status().message()));
          options.identities.users = *std::move(users);
        }
        if (key == "dynamic_uid_range" && app.count("--dynamic-uid-range") == 0) {
          dynamic_uid_range = kv.second.as<std::string>();
          absl::StatusOr<std::optional<llamafleet::UidRange>> range =
              llamafleet::ParseUidRange(dynamic_uid_range, "dynamic_uid_range");
          if (!range.ok()) return Fail(absl::StrCat("config ", config_file, ": ", range.status().message()));
          options.identities.dynamic = *range;
        }
        if (key == "pricing") {
          // pricing: {INSTANCE_TYPE: PRICE_PER_INSTANCE_HOUR, ...}
          if (!kv.second.IsMap()) {
            return Fail(absl::StrCat("config ", config_file,
                                     ": pricing must map instance types to prices per instance-hour"));
          }
          for (const auto& p : kv.second) {
            const std::string type = p.first.as<std::string>();
            double price = 0;
            if (!p.second.IsScalar() || !YAML::convert<double>::decode(p.second, price) || !std::isfinite(price) ||
                price <= 0) {
              return Fail(absl::StrCat("config ", config_file, ": pricing.", type,
                                       " must be a price per instance-hour > 0 (got ",
                                       p.second.IsScalar() ? p.second.Scalar() : "a non-number", ")"));
            }
            options.pricing[type] = price;
          }
        }
        if (key == "queues") {
          // queues: {NAME: {gpu_quota: N, straggler_policy: flag|restart-without}, ...}
          if (!kv.second.IsMap()) return Fail(absl::StrCat("config ", config_file, ": queues must be a mapping"));
          for (const auto& q : kv.second) {
            const std::string name = q.first.as<std::string>();
            if (!q.second.IsMap() || !q.second["gpu_quota"]) {
              return Fail(absl::StrCat("config ", config_file, ": queues.", name,
                                       " must be a mapping with gpu_quota"));
            }
            for (const auto& field : q.second) {
              const std::string key = field.first.as<std::string>();
              if (key == "gpu_quota") continue;
              if (key != "straggler_policy") {
                return Fail(absl::StrCat("config ", config_file, ": unknown key queues.", name, ".", key,
                                         " (gpu_quota, straggler_policy)"));
              }
              const std::string value = field.second.as<std::string>();
              const std::optional<llamafleet::StragglerAction> action = llamafleet::ParseStragglerAction(value);
              if (!action.has_value()) {
                return Fail(absl::StrCat("config ", config_file, ": queues.", name, ".straggler_policy: \"", value,
                                         "\" is not flag or restart-without"));
              }
              options.straggler_actions[name] = *action;
            }
            const int64_t quota = q.second["gpu_quota"].as<int64_t>();
            if (quota < 0) {
              return Fail(absl::StrCat("config ", config_file, ": queues.", name,
                                       ".gpu_quota must be >= 0"));
            }
            options.queue_gpu_quotas[name] = quota;
          }
        }
      }
    } catch (const YAML::Exception& e) {
      return Fail(absl::StrCat("config ", config_file, ": ", e.what()));
    }
  }
  if (app.count("--dynamic-uid-range") > 0) {
    absl::StatusOr<std::optional<llamafleet::UidRange>> range =
        llamafleet::ParseUidRange(dynamic_uid_range, "--dynamic-uid-range");
    if (!range.ok()) return Fail(std::string(range.status().message()));
    options.identities.dynamic = *range;
  }
  if (absl::Status s = llamafleet::ValidateIdentityConfig(options.identities); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  options.synchronous_full = synchronous == "full";
  options.auth_enabled = !insecure_no_auth;
  options.check_job_paths = !no_check_paths;
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Fail("--tls-cert and --tls-key go together");
  }
  options.heartbeat_timeout = absl::Seconds(heartbeat_timeout_s);
  if (stream_idle_timeout_s < 0 || stream_max_lifetime_s < 0 || auth_failure_window_s <= 0 || auth_failure_block_s < 0) {
    return Fail("--stream-idle-timeout, --stream-max-lifetime and --auth-failure-block must be >= 0, "
                "--auth-failure-window > 0");
  }
  options.stream_idle_timeout = absl::Seconds(stream_idle_timeout_s);
  options.stream_max_lifetime = absl::Seconds(stream_max_lifetime_s);
  options.auth_failure_window = absl::Seconds(auth_failure_window_s);
  options.auth_failure_block = absl::Seconds(auth_failure_block_s);
  if (worker_hello_timeout_s < 0) return Fail("--worker-hello-timeout must be >= 0 seconds");
  options.worker_hello_timeout = absl::Seconds(worker_hello_timeout_s);
  if (!(http_unauthenticated_timeout_s > 0)) {
    return Fail("--http-unauthenticated-timeout must be more than 0 seconds");
  }
  options.http_unauthenticated_timeout = absl::Seconds(http_unauthenticated_timeout_s);
  options.cancel_grace = absl::Seconds(cancel_grace_s);
  if (drain_cooloff_s < 0) return Fail("--drain-cooloff must be >= 0 seconds");
  options.drain_cooloff = absl::Seconds(drain_cooloff_s);
  if (!(hang_floor_s >= 0 && hang_floor_s <= 86400)) {
    return Fail("--hang-floor must be between 0 and 86400 seconds");
  }
  if (!(hang_step_factor >= 1 && hang_step_factor <= 1000)) {
    return Fail("--hang-step-factor must be between 1 and 1000");
  }
  if (!(straggler_factor > 1 && straggler_factor <= 1000)) {
    return Fail("--straggler-factor must be more than 1 (and at most 1000)");
  }
  if (straggler_rounds < 1 || straggler_rounds > 100000) {
    return Fail("--straggler-rounds must be between 1 and 100000");
  }
  options.straggler.factor = straggler_factor;
  options.straggler.consecutive = straggler_rounds;
  options.hang_floor = absl::Seconds(hang_floor_s);
  options.hang_step_factor = hang_step_factor;
  if (!options.join_token.empty()) {
    std::cerr << "llamafleet-coordinator: warning: --join-token is visible to every user in ps; "
                 "use --join-token-file or LLAMAFLEET_JOIN_TOKEN\n";
  } else if (const char* env = std::getenv("LLAMAFLEET_JOIN_TOKEN");
             env != nullptr && join_token_file.empty()) {
    options.join_token = env;
  }
  unsetenv("LLAMAFLEET_JOIN_TOKEN");
  if (!join_token_file.empty()) {
    std::ifstream in(join_token_file);
    if (!std::getline(in, options.join_token) || options.join_token.empty()) {
      return Fail(absl::StrCat("cannot read a join token from ", join_token_file));
    }
  }
  options.group_commit = !no_group_commit;
  if (!options.webhooks.urls.empty() || !webhook_secret_file.empty()) {
    std::ifstream in(webhook_secret_file);
    if (webhook_secret_file.empty() || !std::getline(in, options.webhooks.secret) || options.webhooks.secret.empty()) {
      return Fail("--webhook needs --webhook-secret-file naming a file that holds the secret");
    }
    for (const std::string& url : options.webhooks.urls) {
      if (absl::Status s = llamafleet::ValidateWebhookUrl(url); !s.ok()) return Fail(std::string(s.message()));
    }
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("coordinator"));
  spdlog::set_level(spdlog::level::from_str(log_level));

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
  spdlog::info("data dir {}, synchronous={}, group commit {}", options.data_dir, synchronous,
               options.group_commit ? "on" : "off");
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
