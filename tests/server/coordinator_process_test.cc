// The coordinator as a real process: crash safety under SIGKILL, graceful SIGTERM,
// recovery on restart, and clear start-up errors.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "storage/job_store.h"
#include "tests/testing/cluster.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::CoordinatorArgv;
using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::Subprocess;
using ::llamafleet::testing::TempDir;

std::unique_ptr<Subprocess> StartCoordinator(const std::string& data_dir, std::string* address) {
  absl::StatusOr<testing::Coordinator> c = testing::StartCoordinator(
      {.data_dir = data_dir, .path_roots = {"/"}, .flags = {"--log-level", "warn"}});
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  *address = c->address;
  return std::move(c->process);
}

TEST(CoordinatorProcessTest, SigkillMidLoadLosesNoAcknowledgedJob) {
  TempDir dir;
  std::string address;
  std::unique_ptr<Subprocess> coordinator = StartCoordinator(dir.path(), &address);
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::JobService::NewStub(channel);

  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> acked;  // id, idempotency key
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        v1::SubmitJobRequest req;
        *req.mutable_spec() = testing::SpecBuilder(absl::StrCat("c", t, "-", i)).ModelPath("/m").Build();
        req.set_idempotency_key(absl::StrCat("k-", t, "-", i));
        v1::SubmitJobResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        if (!stub->SubmitJob(&ctx, req, &resp).ok()) break;  // the coordinator died
        std::lock_guard<std::mutex> lock(mu);
        acked.emplace_back(resp.job().id(), req.idempotency_key());
      }
    });
  }
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return acked.size() >= 2000;
      },
      absl::Minutes(2)))
      << "2000 submissions were not acknowledged";
  coordinator->Signal(SIGKILL);
  stop = true;
  for (auto& c : clients) c.join();
  ASSERT_EQ(*coordinator->Wait(absl::Seconds(10)), 128 + SIGKILL);

  JobStoreOptions options;
  options.path = dir.path() + "/coordinator.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const auto& [id, key] : acked) {
    absl::StatusOr<v1::Job> job = (*store)->GetJob(std::stoll(id));
    ASSERT_TRUE(job.ok()) << "acknowledged job " << id << " was lost";
    EXPECT_EQ(job->idempotency_key(), key);
  }
  // Nothing duplicated: one job per key.
  ListJobsQuery all;
  all.page_size = 10000;
  absl::StatusOr<ListJobsResult> jobs = (*store)->ListJobs(all);
  std::set<std::string> keys;
  for (const v1::Job& j : jobs->jobs) EXPECT_TRUE(keys.insert(j.idempotency_key()).second);
}

TEST(CoordinatorProcessTest, SigtermShutsDownCleanlyAndRestartRecovers) {
  TempDir dir;
  std::string address;
  std::unique_ptr<Subprocess> coordinator = StartCoordinator(dir.path(), &address);
  auto stub = v1::JobService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest req;
  *req.mutable_spec() = testing::SpecBuilder("survivor").ModelPath("/m").Build();
  v1::SubmitJobResponse resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SubmitJob(&ctx, req, &resp).ok());
  }
  coordinator->Signal(SIGTERM);
  absl::StatusOr<int> code = coordinator->Wait(absl::Seconds(15));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  // The WAL was checkpointed into the database file on close.
  const std::string wal = dir.path() + "/coordinator.db-wal";
  EXPECT_TRUE(!std::filesystem::exists(wal) || std::filesystem::file_size(wal) == 0);

  coordinator = StartCoordinator(dir.path(), &address);
  stub = v1::JobService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::GetJobRequest get;
  get.set_job_id(resp.job().id());
  v1::Job job;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->GetJob(&ctx, get, &job).ok());
  EXPECT_EQ(job.spec().name(), "survivor");
  EXPECT_EQ(job.state(), v1::QUEUED);
}

TEST(CoordinatorProcessTest, RunsOnTcmallocWhenBuiltWithIt) {
  // The build links it --no-as-needed (llamafleet_link_tcmalloc, top-level CMakeLists.txt)
  // because nothing names its symbols: a linker that dropped it would leave glibc's
  // malloc, silently.
  if (!LLAMAFLEET_COORDINATOR_TCMALLOC) GTEST_SKIP() << "built without tcmalloc_minimal";
  TempDir dir;
  std::string address;
  std::unique_ptr<Subprocess> coordinator = StartCoordinator(dir.path(), &address);
  std::ifstream maps("/proc/" + std::to_string(coordinator->pid()) + "/maps");
  std::string line;
  bool tcmalloc = false;
  while (std::getline(maps, line)) tcmalloc = tcmalloc || line.find("libtcmalloc") != std::string::npos;
  EXPECT_TRUE(tcmalloc) << "libtcmalloc_minimal is not mapped into the coordinator";
}

TEST(CoordinatorProcessTest, SecondCoordinatorOnTheSameDataDirIsRefused) {
  TempDir dir;
  std::string address;
  std::unique_ptr<Subprocess> first = StartCoordinator(dir.path(), &address);
  absl::StatusOr<testing::CommandResult> second = RunCommand(CoordinatorArgv({.data_dir = dir.path()}));
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->exit_code, 0);
  EXPECT_NE(second->err.find("is in use by another coordinator"), std::string::npos)
      << second->err;
}

TEST(CoordinatorProcessTest, StartupErrorsAreOneClearLine) {
  TempDir dir;
  {
    JobStoreOptions options;
    options.path = dir.path() + "/coordinator.db";
    ASSERT_TRUE(JobStore::Open(options).ok());
  }
  {
    auto conn = sqlite::Connection::Open(dir.path() + "/coordinator.db", false, false);
    ASSERT_TRUE((*conn)->Exec("PRAGMA user_version=999").ok());
  }
  absl::StatusOr<testing::CommandResult> r = RunCommand(CoordinatorArgv({.data_dir = dir.path()}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("schema version 999, newer than this llamafleet build supports"),
            std::string::npos)
      << r->err;

  r = RunCommand(CoordinatorArgv({.data_dir = dir.path() + "/other", .listen = "not-an-address", .auth = true}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("cannot listen on not-an-address"), std::string::npos) << r->err;

  const std::string config = dir.path() + "/config.yaml";
  {
    std::ofstream(config) << "listen: 127.0.0.1:0\nbogus_key: 1\n";
  }
  const std::vector<std::string> from_config = CoordinatorArgv({.listen = "", .auth = true, .config = config});
  r = RunCommand(from_config);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("unknown key bogus_key"), std::string::npos) << r->err;
  // Prices: a mapping of instance types to positive numbers, the bad one named.
  for (const auto& [pricing, error] : std::vector<std::pair<std::string, std::string>>{
           {"[98.32]", "pricing must map instance types to prices per instance-hour"},
           {"{p5.48xlarge: -3}", "pricing.p5.48xlarge must be a price per instance-hour > 0 (got -3)"},
           {"{p5.48xlarge: cheap}", "pricing.p5.48xlarge must be a price per instance-hour > 0 (got cheap)"},
           {"{p5.48xlarge: {usd: 1}}", "pricing.p5.48xlarge must be a price per instance-hour > 0 (got a non-number)"}}) {
    std::ofstream(config) << "listen: 127.0.0.1:0\npricing: " << pricing << "\n";
    r = RunCommand(from_config);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 1) << pricing;
    EXPECT_NE(r->err.find(error), std::string::npos) << r->err;
  }

  // Webhooks: a secret is required, and only http(s) URLs are taken.
  const std::string hooks = dir.path() + "/hooks";
  r = RunCommand(CoordinatorArgv({.data_dir = hooks, .flags = {"--webhook", "http://hooks.internal/x"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("--webhook needs --webhook-secret-file"), std::string::npos) << r->err;
  std::ofstream(dir.path() + "/secret") << "k\n";
  r = RunCommand(CoordinatorArgv(
      {.data_dir = hooks,
       .flags = {"--webhook", "file:///etc/passwd", "--webhook-secret-file", dir.path() + "/secret"}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("webhook URL file:///etc/passwd: must start with http:// or https://"), std::string::npos)
      << r->err;
}

TEST(CoordinatorProcessTest, ConfigFileSetsFlags) {
  TempDir dir;
  const std::string config = dir.path() + "/config.yaml";
  {
    std::ofstream(config) << "listen: 127.0.0.1:0\ndata_dir: " << dir.path()
                          << "/from-config\nsynchronous: normal\nlog_level: warn\n"
                          << "pricing: {p5.48xlarge: 98.32, c7i.8xlarge: 1}\n";
  }
  absl::StatusOr<testing::Coordinator> c = testing::StartCoordinator({.listen = "", .auth = true, .config = config});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/from-config/coordinator.db"));
}

}  // namespace
}  // namespace llamafleet
