#ifndef LLAMAFLEET_SERVER_COORDINATOR_CONFIG_H_
#define LLAMAFLEET_SERVER_COORDINATOR_CONFIG_H_

// The coordinator's settings from its command line and its YAML config file, turned into
// CoordinatorOptions. main.cc declares the flags; this file reads the config file (what the
// command line did not set) and checks and converts what both gave.

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "server/coordinator.h"

namespace llamafleet {

// Settings that are not CoordinatorOptions fields as they are: read as flags (or config
// keys), checked and converted by FinishCoordinatorOptions. Defaults are the flags'.
struct CoordinatorSettings {
  std::string config_file;           // --config
  std::string synchronous = "full";  // full | normal
  bool no_group_commit = false;
  std::string log_level = "info";
  std::string join_token_file;
  std::string webhook_secret_file;
  std::string dynamic_uid_range;        // FIRST-LAST or none; "" for the default
  bool dynamic_uid_range_flag = false;  // --dynamic-uid-range was given
  bool no_check_paths = false;
  bool insecure_no_auth = false;
  // Seconds (or factors), as typed.
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
};

// Whether the command line set the flag named (e.g. "--listen"): it wins over the file.
using FlagGiven = std::function<bool(const char* flag)>;

// Reads the YAML config file at `path` (keys: listen, data_dir, synchronous, group_commit,
// log_level, http_listen, queues, paths, limits, pricing, users, dynamic_uid_range) into
// `options` and `settings`, leaving what `flag_given` says the command line set.
// INVALID_ARGUMENT naming the file and the key for an unreadable file, an unknown key or a
// bad value; nothing is partly applied that the caller then uses (it exits).
absl::Status ApplyConfigFile(const std::string& path, const FlagGiven& flag_given,
                             CoordinatorOptions* options, CoordinatorSettings* settings);

// Checks `settings` (and the identity config) and fills the rest of `options`: timeouts,
// limits, authentication, the join token (flag, LLAMAFLEET_JOIN_TOKEN, which is then
// unset, or file) and the webhook secret. INVALID_ARGUMENT naming the flag otherwise.
absl::Status FinishCoordinatorOptions(const CoordinatorSettings& settings,
                                      CoordinatorOptions* options);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_COORDINATOR_CONFIG_H_
