#ifndef LLAMAFLEET_TESTS_TESTING_E2E_CLUSTER_H_
#define LLAMAFLEET_TESTS_TESTING_E2E_CLUSTER_H_

// The fixture of end-to-end cluster suites: a coordinator and CPU workers as real processes
// on loopback, all under one temporary directory, running the fake trainer
// (fake_trainer.h). Each process logs to DIR/<name>.log ("coordinator" for the
// coordinator); a failed test prints their tails. TearDown stops the workers (SIGTERM, 20 s
// each, so they stop their trainers), then the coordinator.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/cluster_client.h"
#include "tests/testing/process.h"

namespace llamafleet::testing {

class E2eClusterTest : public ::testing::Test {
 protected:
  // Writes the fake trainer; derived fixtures that override SetUp call this first.
  void SetUp() override;
  // Stops every worker, then the coordinator.
  void TearDown() override;

  // Starts the coordinator (join token "secret", path roots DIR and "/", paths unchecked)
  // with `flags`, on `listen` (port 0 on the first start; a restart passes the address it
  // had so the workers redial it). Sets address_ and client_. Fails the test otherwise.
  void StartCoordinator(const std::vector<std::string>& flags,
                        const std::string& listen = "127.0.0.1:0");
  // Starts worker `name` (data dir DIR/<name>, heartbeat every 0.3 s) running the fake
  // trainer with `env` and `flags`. Fails the test otherwise.
  void StartWorker(const std::string& name, const std::map<std::string, std::string>& env,
                   const std::vector<std::string>& flags = {});

  TempDir dir_;
  std::string trainer_;  // the fake trainer's path
  std::unique_ptr<Subprocess> coordinator_;
  std::string address_;
  std::unique_ptr<ClusterClient> client_;
  std::map<std::string, std::unique_ptr<Subprocess>> workers_;
};

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_E2E_CLUSTER_H_
