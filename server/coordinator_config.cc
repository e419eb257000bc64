#include "server/coordinator_config.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/cluster/straggler_rules.h"
#include "server/identity_config.h"
#include "server/permissions.h"
#include "server/webhooks.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

// paths: {roots: [DIR, ...]}
absl::Status ApplyPaths(const YAML::Node& node, const FlagGiven& flag_given,
                        CoordinatorOptions* options) {
  if (!node.IsMap() || !node["roots"] || !node["roots"].IsSequence() || node.size() != 1) {
    return Bad("paths must be a mapping with roots: [DIR, ...]");
  }
  if (!flag_given("--path-root")) {
    options->path_roots = node["roots"].as<std::vector<std::string>>();
  }
  return absl::OkStatus();
}

// limits: {max_active_jobs_per_user: N, max_priority: {ROLE: N, ...}}
absl::Status ApplyLimits(const YAML::Node& node, CoordinatorOptions* options) {
  if (!node.IsMap()) return Bad("limits must be a mapping");
  for (const auto& limit : node) {
    const std::string name = limit.first.as<std::string>();
    if (name == "max_active_jobs_per_user") {
      options->max_active_jobs_per_user = limit.second.as<int64_t>();
      if (options->max_active_jobs_per_user < 0) {
        return Bad("limits.max_active_jobs_per_user must be >= 0 (0: no limit)");
      }
    } else if (name == "max_priority") {
      if (!limit.second.IsMap()) {
        return Bad("limits.max_priority must map roles (viewer, user, admin) to priorities");
      }
      for (const auto& role : limit.second) {
        const std::string role_name = role.first.as<std::string>();
        if (!ParseRole(role_name).ok()) {
          return Bad(absl::StrCat("limits.max_priority.", role_name,
                                  ": not a role (viewer, user, admin)"));
        }
        options->max_priority[role_name] = role.second.as<int32_t>();
      }
    } else {
      return Bad(
          absl::StrCat("unknown key limits.", name, " (max_active_jobs_per_user, max_priority)"));
    }
  }
  return absl::OkStatus();
}

// pricing: {INSTANCE_TYPE: PRICE_PER_INSTANCE_HOUR, ...}
absl::Status ApplyPricing(const YAML::Node& node, CoordinatorOptions* options) {
  if (!node.IsMap()) return Bad("pricing must map instance types to prices per instance-hour");
  for (const auto& p : node) {
    const std::string type = p.first.as<std::string>();
    double price = 0;
    if (!p.second.IsScalar() || !YAML::convert<double>::decode(p.second, price) ||
        !std::isfinite(price) || price <= 0) {
      return Bad(absl::StrCat("pricing.", type, " must be a price per instance-hour > 0 (got ",
                              p.second.IsScalar() ? p.second.Scalar() : "a non-number", ")"));
    }
    options->pricing[type] = price;
  }
  return absl::OkStatus();
}

// queues.NAME: {gpu_quota: N, straggler_policy: flag|restart-without}
absl::Status ApplyQueue(const std::string& name, const YAML::Node& node,
                        CoordinatorOptions* options) {
  if (!node.IsMap() || !node["gpu_quota"]) {
    return Bad(absl::StrCat("queues.", name, " must be a mapping with gpu_quota"));
  }
  for (const auto& field : node) {
    const std::string key = field.first.as<std::string>();
    if (key == "gpu_quota") continue;
    if (key != "straggler_policy") {
      return Bad(
          absl::StrCat("unknown key queues.", name, ".", key, " (gpu_quota, straggler_policy)"));
    }
    const std::string value = field.second.as<std::string>();
    const std::optional<StragglerAction> action = ParseStragglerAction(value);
    if (!action.has_value()) {
      return Bad(absl::StrCat("queues.", name, ".straggler_policy: \"", value,
                              "\" is not flag or restart-without"));
    }
    options->straggler_actions[name] = *action;
  }
  const int64_t quota = node["gpu_quota"].as<int64_t>();
  if (quota < 0) return Bad(absl::StrCat("queues.", name, ".gpu_quota must be >= 0"));
  options->queue_gpu_quotas[name] = quota;
  return absl::OkStatus();
}

absl::Status ApplyQueues(const YAML::Node& node, CoordinatorOptions* options) {
  if (!node.IsMap()) return Bad("queues must be a mapping");
  for (const auto& q : node) {
    LF_RETURN_IF_ERROR(ApplyQueue(q.first.as<std::string>(), q.second, options));
  }
  return absl::OkStatus();
}

// A key that sets one value, unless its flag was given.
absl::Status ApplyScalar(const std::string& key, const YAML::Node& value,
                         const FlagGiven& flag_given, CoordinatorOptions* options,
                         CoordinatorSettings* settings) {
  if (key == "listen" && !flag_given("--listen")) options->listen = value.as<std::string>();
  if (key == "data_dir" && !flag_given("--data-dir")) options->data_dir = value.as<std::string>();
  if (key == "synchronous" && !flag_given("--synchronous")) {
    settings->synchronous = value.as<std::string>();
    if (settings->synchronous != "full" && settings->synchronous != "normal") {
      return Bad("synchronous must be full or normal");
    }
  }
  if (key == "group_commit" && !flag_given("--no-group-commit")) {
    settings->no_group_commit = !value.as<bool>();
  }
  if (key == "log_level" && !flag_given("--log-level"))
    settings->log_level = value.as<std::string>();
  if (key == "http_listen" && !flag_given("--http-listen")) {
    options->http_listen = value.as<std::string>();
  }
  if (key == "dynamic_uid_range" && !flag_given("--dynamic-uid-range")) {
    settings->dynamic_uid_range = value.as<std::string>();
    LF_ASSIGN_OR_RETURN(std::optional<UidRange> range,
                        ParseUidRange(settings->dynamic_uid_range, "dynamic_uid_range"));
    options->identities.dynamic = range;
  }
  return absl::OkStatus();
}

absl::Status ApplyKey(const std::string& key, const YAML::Node& value, const FlagGiven& flag_given,
                      CoordinatorOptions* options, CoordinatorSettings* settings) {
  static const std::set<std::string> kKnown = {
      "listen", "data_dir", "synchronous", "group_commit", "log_level", "http_listen",
      "queues", "paths",    "limits",      "pricing",      "users",     "dynamic_uid_range"};
  if (!kKnown.count(key)) return Bad(absl::StrCat("unknown key ", key));
  if (key == "paths") return ApplyPaths(value, flag_given, options);
  if (key == "limits") return ApplyLimits(value, options);
  if (key == "pricing") return ApplyPricing(value, options);
  if (key == "queues") return ApplyQueues(value, options);
  if (key == "users") {
    LF_ASSIGN_OR_RETURN(options->identities.users, ParseUsersConfig(value));
    return absl::OkStatus();
  }
  return ApplyScalar(key, value, flag_given, options, settings);
}

// The durations and factors of the failure detectors and the connection limits.
absl::Status ApplyTimeouts(const CoordinatorSettings& s, CoordinatorOptions* options) {
  options->heartbeat_timeout = absl::Seconds(s.heartbeat_timeout_s);
  if (s.stream_idle_timeout_s < 0 || s.stream_max_lifetime_s < 0 || s.auth_failure_window_s <= 0 ||
      s.auth_failure_block_s < 0) {
    return Bad(
        "--stream-idle-timeout, --stream-max-lifetime and --auth-failure-block must be >= 0, "
        "--auth-failure-window > 0");
  }
  options->stream_idle_timeout = absl::Seconds(s.stream_idle_timeout_s);
  options->stream_max_lifetime = absl::Seconds(s.stream_max_lifetime_s);
  options->auth_failure_window = absl::Seconds(s.auth_failure_window_s);
  options->auth_failure_block = absl::Seconds(s.auth_failure_block_s);
  if (s.worker_hello_timeout_s < 0) return Bad("--worker-hello-timeout must be >= 0 seconds");
  options->worker_hello_timeout = absl::Seconds(s.worker_hello_timeout_s);
  if (!(s.http_unauthenticated_timeout_s > 0)) {
    return Bad("--http-unauthenticated-timeout must be more than 0 seconds");
  }
  options->http_unauthenticated_timeout = absl::Seconds(s.http_unauthenticated_timeout_s);
  options->cancel_grace = absl::Seconds(s.cancel_grace_s);
  if (s.drain_cooloff_s < 0) return Bad("--drain-cooloff must be >= 0 seconds");
  options->drain_cooloff = absl::Seconds(s.drain_cooloff_s);
  return absl::OkStatus();
}

// The hang and straggler detectors' bounds.
absl::Status ApplyDetectors(const CoordinatorSettings& s, CoordinatorOptions* options) {
  if (!(s.hang_floor_s >= 0 && s.hang_floor_s <= 86400)) {
    return Bad("--hang-floor must be between 0 and 86400 seconds");
  }
  if (!(s.hang_step_factor >= 1 && s.hang_step_factor <= 1000)) {
    return Bad("--hang-step-factor must be between 1 and 1000");
  }
  if (!(s.straggler_factor > 1 && s.straggler_factor <= 1000)) {
    return Bad("--straggler-factor must be more than 1 (and at most 1000)");
  }
  if (s.straggler_rounds < 1 || s.straggler_rounds > 100000) {
    return Bad("--straggler-rounds must be between 1 and 100000");
  }
  options->straggler.factor = s.straggler_factor;
  options->straggler.consecutive = s.straggler_rounds;
  options->hang_floor = absl::Seconds(s.hang_floor_s);
  options->hang_step_factor = s.hang_step_factor;
  return absl::OkStatus();
}

// The join token (flag, LLAMAFLEET_JOIN_TOKEN or file) and the webhooks' secret.
absl::Status ReadSecrets(const CoordinatorSettings& s, CoordinatorOptions* options) {
  if (!options->join_token.empty()) {
    std::cerr << "llamafleet-coordinator: warning: --join-token is visible to every user in ps; "
                 "use --join-token-file or LLAMAFLEET_JOIN_TOKEN\n";
  } else if (const char* env = std::getenv("LLAMAFLEET_JOIN_TOKEN");
             env != nullptr && s.join_token_file.empty()) {
    options->join_token = env;
  }
  unsetenv("LLAMAFLEET_JOIN_TOKEN");
  if (!s.join_token_file.empty()) {
    std::ifstream in(s.join_token_file);
    if (!std::getline(in, options->join_token) || options->join_token.empty()) {
      return Bad(absl::StrCat("cannot read a join token from ", s.join_token_file));
    }
  }
  options->group_commit = !s.no_group_commit;
  if (!options->webhooks.urls.empty() || !s.webhook_secret_file.empty()) {
    std::ifstream in(s.webhook_secret_file);
    if (s.webhook_secret_file.empty() || !std::getline(in, options->webhooks.secret) ||
        options->webhooks.secret.empty()) {
      return Bad("--webhook needs --webhook-secret-file naming a file that holds the secret");
    }
    for (const std::string& url : options->webhooks.urls)
      LF_RETURN_IF_ERROR(ValidateWebhookUrl(url));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyConfigFile(const std::string& path, const FlagGiven& flag_given,
                             CoordinatorOptions* options, CoordinatorSettings* settings) {
  YAML::Node config;
  try {
    config = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return Bad(absl::StrCat("cannot read config ", path, ": ", e.what()));
  }
  if (!config.IsNull() && !config.IsMap()) {
    return Bad(absl::StrCat("config ", path, ": expected a mapping"));
  }
  try {
    for (const auto& kv : config) {
      absl::Status s =
          ApplyKey(kv.first.as<std::string>(), kv.second, flag_given, options, settings);
      if (!s.ok()) return Bad(absl::StrCat("config ", path, ": ", s.message()));
    }
  } catch (const YAML::Exception& e) {
    return Bad(absl::StrCat("config ", path, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status FinishCoordinatorOptions(const CoordinatorSettings& settings,
                                      CoordinatorOptions* options) {
  if (settings.dynamic_uid_range_flag) {
    LF_ASSIGN_OR_RETURN(options->identities.dynamic,
                        ParseUidRange(settings.dynamic_uid_range, "--dynamic-uid-range"));
  }
  LF_RETURN_IF_ERROR(ValidateIdentityConfig(options->identities));
  options->synchronous_full = settings.synchronous == "full";
  options->auth_enabled = !settings.insecure_no_auth;
  options->check_job_paths = !settings.no_check_paths;
  if (options->tls_cert_file.empty() != options->tls_key_file.empty()) {
    return Bad("--tls-cert and --tls-key go together");
  }
  LF_RETURN_IF_ERROR(ApplyTimeouts(settings, options));
  LF_RETURN_IF_ERROR(ApplyDetectors(settings, options));
  return ReadSecrets(settings, options);
}

}  // namespace llamafleet
