#include "tests/testing/cluster.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llamafleet::testing {

absl::StatusOr<Coordinator> StartCoordinator(const CoordinatorOptions& options) {
  std::vector<std::string> argv = {BinaryPath("llamafleet-coordinator"), "--listen", options.listen,
                                   "--data-dir", options.data_dir};
  if (!options.auth) argv.push_back("--insecure-no-auth");
  if (!options.join_token.empty()) argv.insert(argv.end(), {"--join-token", options.join_token});
  for (const std::string& root : options.path_roots) argv.insert(argv.end(), {"--path-root", root});
  argv.insert(argv.end(), options.flags.begin(), options.flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(argv, {}, options.log_path);
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
