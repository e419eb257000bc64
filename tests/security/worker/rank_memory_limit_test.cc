// A rank that a hostile model file makes allocate without end must fail in itself, not take
// the node: a real worker started without --trainer-memory-limit gives each trainer rank a
// bound on its private memory (RLIMIT_DATA) from its inventory, 90% of the host's memory
// among its ranks, and no bound on its address space (which CUDA reserves by the hundreds
// of GiB). A /bin/sh stand-in trainer reports the limits it was started with.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"
#include "worker/rank_memory.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;

// @OUT@: where each rank writes its limits (KiB, as ulimit prints them).
constexpr char kLimitsTrainer[] = R"sh(#!/bin/sh
echo "data=$(ulimit -d) hard=$(ulimit -H -d) as=$(ulimit -v)" > "@OUT@.$LOCAL_RANK"
echo '{"type":"event","event":"exit","code":"OK","message":""}'
exit 0
)sh";

class RankMemoryLimitTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << "worker log:\n" << ReadFile(WorkerLog());
  }
  std::string Run() const { return absl::StrCat(dir_.path(), "/", runs_); }
  std::string WorkerLog() const { return Run() + "/w1.log"; }

  // Runs a job of two ranks on a new cluster of one CPU worker started with `flags`;
  // returns rank 0's limits.
  std::string RanksLimits(const std::vector<std::string>& flags) {
    ++runs_;
    const std::string root = Run() + "/root", out = root + "/limits";
    fs::create_directories(root);
    std::ofstream(root + "/d.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
    auto c = testing::StartCoordinator({.data_dir = Run() + "/coord",
                                        .join_token = "secret",
                                        .path_roots = {root},
                                        .log_path = Run() + "/coordinator.log"});
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return "";
    const std::string trainer = Run() + "/limits-train.sh";
    std::string script = kLimitsTrainer;
    script.replace(script.find("@OUT@"), 5, out);
    std::ofstream(trainer) << script;
    fs::permissions(trainer, fs::perms::owner_all);
    auto w = testing::StartWorker({.coordinator = c->address,
                                   .name = "w1",
                                   .data_dir = Run() + "/w1",
                                   .join_token = "secret",
                                   .cpu_ranks = 2,
                                   .trainer = trainer,
                                   .heartbeat_interval = 0.3,
                                   .flags = flags,
                                   .log_path = WorkerLog()});
    EXPECT_TRUE(w.ok()) << w.status();
    absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(
        absl::StrCat("name: limits\nmodel: {preset: tiny}\ndata: {train_path: ", root,
                     "/d.jsonl, format: tokens}\nresources: {nodes: 1, gpus_per_node: 2}\n"));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (!parsed.ok()) return "";
    auto jobs = v1::JobService::NewStub(
        grpc::CreateChannel(c->address, grpc::InsecureChannelCredentials()));
    v1::SubmitJobRequest req;
    *req.mutable_spec() = (*parsed)[0].spec;
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = jobs->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(testing::WaitFor([&] { return fs::exists(out + ".1") && fs::exists(out + ".0"); },
                                 absl::Seconds(30), absl::Milliseconds(100)));
    return ReadFile(out + ".0");
  }

  TempDir dir_;
  int runs_ = 0;
};

TEST_F(RankMemoryLimitTest, ByDefaultEachRankGetsAShareOfTheHostsMemory) {
  const uint64_t host =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t kib = worker::DefaultRankMemoryLimit(host, 2) / 1024;
  EXPECT_EQ(RanksLimits({}), absl::StrCat("data=", kib, " hard=", kib, " as=unlimited\n"));
  EXPECT_NE(ReadFile(WorkerLog()).find("each trainer rank may allocate at most"),
            std::string::npos);
}

TEST_F(RankMemoryLimitTest, TheFlagSetsItOrTurnsItOff) {
  EXPECT_EQ(RanksLimits({"--trainer-memory-limit", "3G"}),
            "data=3145728 hard=3145728 as=unlimited\n");
  EXPECT_EQ(RanksLimits({"--trainer-memory-limit", "none"}),
            "data=unlimited hard=unlimited as=unlimited\n");
  EXPECT_NE(ReadFile(WorkerLog()).find("without a memory limit"), std::string::npos);
}

}  // namespace
}  // namespace llamafleet
