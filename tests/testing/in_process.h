#ifndef LLAMAFLEET_TESTS_TESTING_IN_PROCESS_H_
#define LLAMAFLEET_TESTS_TESTING_IN_PROCESS_H_

// A coordinator inside the test's own process (server/coordinator.h), for suites that call
// its gRPC and HTTP services over real sockets and read its store directly.

#include <memory>
#include <string>

#include "server/coordinator.h"

namespace llamafleet::testing {

// What such suites start from: gRPC and HTTP on ports the kernel picks, `data_dir`,
// callers named by x-llamafleet-user (no tokens), any path allowed. Suites change what
// their subject needs (auth_enabled, queues, pricing, clock, ...).
llamafleet::CoordinatorOptions InProcessOptions(const std::string& data_dir);

// Coordinator::Start; on failure a test failure naming the status, and null.
std::unique_ptr<llamafleet::Coordinator> StartInProcess(const llamafleet::CoordinatorOptions& options);

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_IN_PROCESS_H_
