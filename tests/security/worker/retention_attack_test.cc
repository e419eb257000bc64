// Issue findings H1 and H2 end to end, with real processes: a coordinator with one path
// root, a CPU worker, and a /bin/sh stand-in trainer that checkpoints the way the real one
// does at the interface (its directory marked with the job id, step-N with a manifest,
// checkpoint_saved events) and, in between, does what a user with a shell on the storage
// does: moves the job's checkpoint directory away and puts a link in its place, to a
// directory outside the roots (H2) or to another user's checkpoint directory (H1). With
// keep_last: 1 the coordinator's retention then deletes the older step: nothing outside
// the job's own directory may go.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;

// @CK@: the job's checkpoint dir; @TARGET@: where the link put in its place leads.
constexpr char kSwappingTrainer[] = R"sh(#!/bin/sh
CK=@CK@
JOB=${LLAMAFLEET_TASK_ID%%-*}
mkdir -p "$CK/step-1" && echo "$JOB" > "$CK/.llamafleet-job" && echo '{}' > "$CK/step-1/manifest.json"
echo '{"type":"event","event":"started","total_steps":2}'
echo "{\"type\":\"event\",\"event\":\"checkpoint_saved\",\"step\":1,\"path\":\"$CK/step-1\",\"bytes\":2,\"manifest_sha256\":\"x\",\"loss\":1.0}"
sleep 1
# The swap, between two checkpoints.
mv "$CK" "$CK.real" && ln -s @TARGET@ "$CK"
echo "{\"type\":\"event\",\"event\":\"checkpoint_saved\",\"step\":2,\"path\":\"$CK/step-2\",\"bytes\":2,\"manifest_sha256\":\"x\",\"loss\":1.0}"
sleep 2
echo '{"type":"event","event":"exit","code":"OK","message":""}'
exit 0
)sh";

class RetentionAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    fs::create_directories(root_ + "/bob");
    auto c = testing::StartCoordinator({.data_dir = dir_.path() + "/coord",
                                        .join_token = "secret",
                                        .path_roots = {root_},
                                        .log_path = dir_.path() + "/coordinator.log"});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(c->process);
    jobs_ = v1::JobService::NewStub(grpc::CreateChannel(c->address, grpc::InsecureChannelCredentials()));
    address_ = c->address;
  }

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "coordinator log:\n" << ReadFile(dir_.path() + "/coordinator.log") << "\nworker log:\n"
                << ReadFile(dir_.path() + "/w1.log");
    }
  }

  // Runs one job whose trainer swaps its checkpoint dir for a link to `target`; returns the
  // job once it has ended and retention has had its turn.
  v1::Job RunSwappingJob(const std::string& target) {
    const std::string ck = root_ + "/bob/ck";
    const std::string trainer = dir_.path() + "/swap-train.sh";
    std::ofstream(trainer) << absl::StrReplaceAll(kSwappingTrainer, {{"@CK@", ck}, {"@TARGET@", target}});
    fs::permissions(trainer, fs::perms::owner_all);
    auto w = testing::StartWorker({.coordinator = address_,
                                   .name = "w1",
                                   .data_dir = dir_.path() + "/w1",
                                   .join_token = "secret",
                                   .trainer = trainer,
                                   .heartbeat_interval = 0.3,
                                   .log_path = dir_.path() + "/w1.log"});
    EXPECT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(absl::StrCat(
        "name: swap\nmodel: {preset: tiny}\ndata: {train_path: ", root_,
        "/d.jsonl, format: tokens}\nresources: {nodes: 1, gpus_per_node: 1}\ncheckpoint: {dir: ", ck,
        ", keep_last: 1}\n"));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    v1::SubmitJobRequest req;
    *req.mutable_spec() = (*parsed)[0].spec;
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    v1::Job job;
    testing::WaitFor(
        [&] {
          v1::GetJobRequest get;
          get.set_job_id(resp.job().id());
          grpc::ClientContext c;
          job = v1::Job();
          (void)jobs_->GetJob(&c, get, &job);
          return job.state() == v1::SUCCEEDED || job.state() == v1::FAILED;
        },
        absl::Seconds(40), absl::Milliseconds(100));
    // Retention runs off the loop, after the end; the attacks check that it removed nothing
    // it must not, so there is no state to poll for.
    absl::SleepFor(absl::Milliseconds(500));
    return job;
  }

  TempDir dir_;
  std::string root_, address_;
  std::unique_ptr<testing::Subprocess> coordinator_, worker_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(RetentionAttackTest, ALinkToOutsideTheRootsSwappedInMidJobLetsRetentionDeleteNothingThere) {
  const std::string outside = dir_.path() + "/outside";
  fs::create_directories(outside + "/step-1");
  fs::create_directories(outside + "/step-2");
  std::ofstream(outside + "/step-1/precious") << "root's";
  std::ofstream(outside + "/step-2/manifest.json") << "{}";
  v1::Job job = RunSwappingJob(outside);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.status_reason();
  EXPECT_EQ(ReadFile(outside + "/step-1/precious"), "root's") << "deleted outside the roots";
  EXPECT_TRUE(fs::exists(root_ + "/bob/ck.real/step-1/manifest.json"));
  const std::string log = ReadFile(dir_.path() + "/coordinator.log");
  EXPECT_NE(log.find("symbolic link"), std::string::npos) << log;
}

TEST_F(RetentionAttackTest, ALinkToAnotherUsersCheckpointDirSwappedInMidJobLeavesHerFilesAlone) {
  const std::string alices = root_ + "/alice/ck";
  fs::create_directories(alices + "/step-1");
  fs::create_directories(alices + "/step-2");
  std::ofstream(alices + "/.llamafleet-job") << "1\n";
  std::ofstream(alices + "/step-1/manifest.json") << "alice's step 1";
  std::ofstream(alices + "/step-2/manifest.json") << "{}";
  v1::Job job = RunSwappingJob(alices);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.status_reason();
  EXPECT_EQ(ReadFile(alices + "/step-1/manifest.json"), "alice's step 1");
  EXPECT_EQ(ReadFile(alices + "/.llamafleet-job"), "1\n");
}

}  // namespace
}  // namespace llamafleet
