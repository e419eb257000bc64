#include "tests/testing/in_process.h"

#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace llamafleet::testing {

llamafleet::CoordinatorOptions InProcessOptions(const std::string& data_dir) {
  llamafleet::CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.http_listen = "127.0.0.1:0";
  options.data_dir = data_dir;
  options.auth_enabled = false;
  options.path_roots = {"/"};
  // Tests name paths nobody made; those that check them turn this back on.
  options.check_job_paths = false;
  return options;
}

std::unique_ptr<llamafleet::Coordinator> StartInProcess(const llamafleet::CoordinatorOptions& options) {
  absl::StatusOr<std::unique_ptr<llamafleet::Coordinator>> c = llamafleet::Coordinator::Start(options);
  if (!c.ok()) {
    ADD_FAILURE() << "coordinator did not start: " << c.status();
    return nullptr;
  }
  return std::move(*c);
}

}  // namespace llamafleet::testing
