#include "tests/testing/e2e_cluster.h"

#include <signal.h>

#include "absl/time/time.h"
#include "tests/testing/cluster.h"
#include "tests/testing/fake_trainer.h"

namespace llamafleet::testing {

void E2eClusterTest::SetUp() { trainer_ = WriteFakeTrainer(dir_.path()); }

void E2eClusterTest::StartCoordinator(const std::vector<std::string>& flags,
                                      const std::string& listen) {
  auto c =
      testing::StartCoordinator({.data_dir = dir_.path() + "/coord",
                                 .listen = listen,
                                 .join_token = "secret",
                                 // default checkpoint dirs under the first; specs name /d.jsonl
                                 .path_roots = {dir_.path(), "/"},
                                 .flags = flags,
                                 .log_path = dir_.path() + "/coordinator.log"});
  ASSERT_TRUE(c.ok()) << c.status();
  coordinator_ = std::move(c->process);
  address_ = c->address;
  client_ = std::make_unique<ClusterClient>(address_);
}

void E2eClusterTest::StartWorker(const std::string& name,
                                 const std::map<std::string, std::string>& env,
                                 const std::vector<std::string>& flags) {
  auto p = testing::StartWorker({.coordinator = address_,
                                 .name = name,
                                 .data_dir = dir_.path() + "/" + name,
                                 .join_token = "secret",
                                 .trainer = trainer_,
                                 .heartbeat_interval = 0.3,
                                 .flags = flags,
                                 .env = env,
                                 .log_path = dir_.path() + "/" + name + ".log"});
  ASSERT_TRUE(p.ok()) << p.status();
  workers_[name] = std::move(*p);
}

void E2eClusterTest::TearDown() {
  if (HasFailure()) PrintLogTails(dir_.path(), {"coordinator", "w1", "w2", "w3"});
  for (auto& [name, w] : workers_) w->Signal(SIGTERM);
  for (auto& [name, w] : workers_) (void)w->Wait(absl::Seconds(20));
  workers_.clear();
  coordinator_.reset();
}

}  // namespace llamafleet::testing
