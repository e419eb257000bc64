#include "tests/testing/cluster.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llamafleet::testing {

std::vector<std::string> CoordinatorArgv(const CoordinatorOptions& options) {
  std::vector<std::string> argv = {BinaryPath("llamafleet-coordinator")};
  auto flag = [&](const char* name, const std::string& value) {
    if (!value.empty()) argv.insert(argv.end(), {name, value});
  };
  flag("--config", options.config);
  flag("--listen", options.listen);
  flag("--data-dir", options.data_dir);
  if (!options.auth) argv.push_back("--insecure-no-auth");
  flag("--join-token", options.join_token);
  for (const std::string& root : options.path_roots) flag("--path-root", root);
  if (!options.check_paths) argv.push_back("--no-check-paths");
  flag("--log-level", options.log_level);
  flag("--tls-cert", options.tls_cert);
  flag("--tls-key", options.tls_key);
  argv.insert(argv.end(), options.flags.begin(), options.flags.end());
  return argv;
}

absl::StatusOr<Coordinator> StartCoordinator(const CoordinatorOptions& options) {
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Start(CoordinatorArgv(options), {}, options.log_path);
  if (!p.ok()) return p.status();
  absl::StatusOr<std::string> address = (*p)->WaitForListening();
  if (!address.ok()) return address.status();
  return Coordinator{std::move(*p), *address};
}

absl::StatusOr<std::unique_ptr<Subprocess>> StartWorker(const WorkerOptions& options) {
  std::vector<std::string> argv = {
      BinaryPath("llamafleet-worker"),
      "--coordinator",
      options.coordinator,
      "--data-dir",
      options.data_dir,
      "--name",
      options.name,
      "--address",
      "127.0.0.1",
      "--cpu-ranks",
      absl::StrCat(options.cpu_ranks),
      "--trainer",
      options.trainer.empty() ? BinaryPath("llamafleet-train") : options.trainer,
      "--heartbeat-interval",
      absl::StrFormat("%g", options.heartbeat_interval)};
  if (!options.per_owner) {
    argv.insert(argv.end(), {"--run-as", options.run_as.empty() ? absl::StrCat(geteuid()) : options.run_as});
  }
  if (!options.join_token.empty()) argv.insert(argv.end(), {"--join-token", options.join_token});
  argv.insert(argv.end(), options.flags.begin(), options.flags.end());
  return Subprocess::Start(argv, options.env, options.log_path);
}

}  // namespace llamafleet::testing
