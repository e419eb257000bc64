// Dynamic uids that are someone else's on a host, with real processes, real groups and a
// root worker: a coordinator whose dynamic_uid_range holds an existing group's gid refuses
// to start, naming it; and a worker told to run a job as a dynamic uid whose number is a
// group on the worker (made after the coordinator handed the uid out, as a second
// coordinator or another host's administrator would) refuses the task before anything
// runs as it, naming the group. Groups are made with groupadd and removed at the end;
// their gids (742xx) lie outside the default range, so coordinators of other tests on this
// host are not refused while these run. Skips without root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/testing/cluster.h"
#include "tests/testing/cluster_client.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;

// shadow's tool `name` (groupadd, groupdel), "" when this host has none.
std::string ShadowTool(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/sbin/"}) {
    if (::access((dir + name).c_str(), X_OK) == 0) return dir + name;
  }
  return "";
}

// A group of this host's group database for the test's lifetime (groupadd, groupdel).
class TempGroup {
 public:
  TempGroup(const std::string& name, uint32_t gid) : name_(name) {
    absl::StatusOr<testing::CommandResult> r =
        RunCommand({ShadowTool("groupadd"), "-g", absl::StrCat(gid), name});
    if (!r.ok()) {
      error_ = r.status().ToString();
    } else if (r->exit_code != 0) {
      error_ = r->err;
    }
  }
  ~TempGroup() {
    if (error_.empty()) (void)RunCommand({ShadowTool("groupdel"), name_});
  }
  const std::string& error() const { return error_; }

 private:
  const std::string name_;
  std::string error_;
};

// Prints that the job started and exits 0: a task that runs at all succeeds.
constexpr char kTrainer[] = R"sh(#!/bin/sh
echo '{"type":"event","event":"started","total_steps":1}'
exit 0
)sh";

class IdentityOverlapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: adds groups and runs a root worker";
    if (ShadowTool("groupadd").empty()) GTEST_SKIP() << "no groupadd here";
    fs::permissions(dir_.path(), fs::perms(0755));
    root_ = dir_.path() + "/root";
    fs::create_directories(root_);
    fs::permissions(root_, fs::perms(01777));
  }
  void TearDown() override {
    if (HasFailure()) testing::PrintLogTails(dir_.path(), {"coordinator", "w1"});
  }
  std::string Group(const char* suffix) { return absl::StrCat("lfsec", getpid(), suffix); }

  TempDir dir_;
  std::string root_;
};

TEST_F(IdentityOverlapTest, ACoordinatorRefusesADynamicRangeHoldingAnExistingGroup) {
  const std::string name = Group("r");
  TempGroup group(name, 74213);
  ASSERT_EQ(group.error(), "");
  const std::string log = dir_.path() + "/coordinator.log";
  absl::StatusOr<std::unique_ptr<testing::Subprocess>> c = testing::Subprocess::Start(
      testing::CoordinatorArgv({.data_dir = dir_.path() + "/coord",
                                .path_roots = {root_},
                                .flags = {"--dynamic-uid-range", "74210-74219"}}),
      {}, log);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::string> listening = (*c)->WaitForListening(absl::Seconds(20));
  ASSERT_FALSE(listening.ok()) << "started with a dynamic uid range that holds group " << name;
  absl::StatusOr<int> code = (*c)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  const std::string said = ReadFile(log);
  EXPECT_TRUE(absl::StrContains(said, absl::StrCat("gid 74213 is group '", name, "'"))) << said;
  EXPECT_TRUE(absl::StrContains(said, "74210-74219")) << said;
}

TEST_F(IdentityOverlapTest, AWorkerRefusesToRunAJobAsADynamicUidThatIsAGroupThere) {
  const std::string trainer = dir_.path() + "/train.sh";
  std::ofstream(trainer) << kTrainer;
  fs::permissions(trainer, fs::perms(0755));
  std::ofstream(root_ + "/data.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
  fs::permissions(root_ + "/data.jsonl", fs::perms(0644));
  absl::StatusOr<testing::Coordinator> c =
      testing::StartCoordinator({.data_dir = dir_.path() + "/coord",
                                 .join_token = "secret",
                                 .path_roots = {root_},
                                 .flags = {"--dynamic-uid-range", "74220-74229"},
                                 .log_path = dir_.path() + "/coordinator.log"});
  ASSERT_TRUE(c.ok()) << c.status();
  testing::ClusterClient client(c->address);
  // The owner's first submission hands out the range's first uid, 74220 (its gid the same).
  absl::StatusOr<std::string> id = client.Submit(
      absl::StrCat("name: as-a-group\nmodel: {preset: tiny}\ndata: {train_path: ", root_,
                   "/data.jsonl, format: tokens}\nresources: {nodes: 1, gpus_per_node: 1}\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string name = Group("w");
  TempGroup group(name, 74220);
  ASSERT_EQ(group.error(), "");
  absl::StatusOr<std::unique_ptr<testing::Subprocess>> w =
      testing::StartWorker({.coordinator = c->address,
                            .name = "w1",
                            .data_dir = dir_.path() + "/w1",
                            .join_token = "secret",
                            .trainer = trainer,
                            .heartbeat_interval = 0.3,
                            .per_owner = true,
                            .log_path = dir_.path() + "/w1.log"});
  ASSERT_TRUE(w.ok()) << w.status();
  const v1::Job job = client.WaitFor(
      *id, [](const v1::Job& j) { return j.state() == v1::SUCCEEDED || j.state() == v1::FAILED; },
      absl::Seconds(30));
  ASSERT_EQ(job.state(), v1::FAILED)
      << "ran as uid 74220, whose number is group " << name << " here: " << job.status_reason();
  EXPECT_TRUE(absl::StrContains(job.status_reason(), absl::StrCat("74220 is group '", name, "'")))
      << job.status_reason();
  EXPECT_EQ(job.restarts(), 0) << "a refused identity is permanent";
}

}  // namespace
}  // namespace llamafleet
