#ifndef LLAMAFLEET_TESTS_TESTING_CLUSTER_H_
#define LLAMAFLEET_TESTS_TESTING_CLUSTER_H_

// Real coordinator and worker processes for end-to-end tests, started with the flags every
// such test needs and the ones it chooses. Each process's stderr goes to a log file the
// test can print when it fails; the process group is killed when the handle goes.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/testing/process.h"

namespace llamafleet::testing {

struct CoordinatorOptions {
  std::string data_dir = {};                 // --data-dir unless empty (then config must set it)
  std::string listen = "127.0.0.1:0";        // port 0: the kernel picks one; "" = none
  bool auth = false;                         // false: --insecure-no-auth
  std::string join_token = {};               // --join-token unless empty
  std::vector<std::string> path_roots = {};  // one --path-root each
  bool check_paths = false;                  // false: --no-check-paths (paths nobody made)
  std::vector<std::string> flags = {};       // anything else, e.g. {"--cancel-grace", "2"}
  std::string log_path = {};                 // stderr; "" inherits the test's
  std::string config = {};                   // --config unless empty
  std::string log_level = {};                // --log-level unless empty
  std::string tls_cert = {};                 // --tls-cert and --tls-key unless empty
  std::string tls_key = {};
};

struct Coordinator {
  std::unique_ptr<Subprocess> process;
  std::string address = {};  // HOST:PORT it listens on
};

// The command line StartCoordinator runs, for tests of a coordinator that must refuse to
// start (run with RunCommand).
std::vector<std::string> CoordinatorArgv(const CoordinatorOptions& options);

// Starts llamafleet-coordinator and waits until it listens.
absl::StatusOr<Coordinator> StartCoordinator(const CoordinatorOptions& options);

struct WorkerOptions {
  std::string coordinator = {};  // HOST:PORT, required
  std::string name = {};         // --name, required
  std::string data_dir = {};     // required
  std::string join_token = {};   // --join-token unless empty
  int cpu_ranks = 1;
  std::string trainer = {};  // "" = the built llamafleet-train
  double heartbeat_interval = 0.5;
  std::string run_as = {};              // "" = this test's user (the fixture's files are its own)
  bool per_owner = false;               // no --run-as: a root worker runs each job as its owner's identity
  std::vector<std::string> flags = {};  // anything else
  std::map<std::string, std::string> env = {};
  std::string log_path = {};  // stderr; "" inherits the test's
};

// Starts llamafleet-worker on 127.0.0.1; it registers on its own.
absl::StatusOr<std::unique_ptr<Subprocess>> StartWorker(const WorkerOptions& options);

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_CLUSTER_H_
