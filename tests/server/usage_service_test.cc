// GPU time and cost through the API of a real coordinator (in-process, priced, on a fake
// clock): Job.usage from GetJob and ListJobs (both views), Attempt.gpu_seconds and cost
// from ListAttempts, Queue.usage from ListQueues, GetUsage over gRPC and HTTP. The attempts
// are written to its store as the cluster manager would write them, so the numbers are
// exact.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "server/coordinator.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"
#include "tests/testing/process.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/in_process.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::TempDir;
namespace bhttp = boost::beast::http;

// 8 GPUs at 80 per instance-hour: 10 per GPU-hour.
const PriceTable kPricing = {{"p5.48xlarge", 80.0}};

// GET `target` from the HTTP server at `address`: status and body.
std::pair<int, std::string> HttpGet(const std::string& address, const std::string& target) {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::resolver resolver(ioc);
  boost::beast::tcp_stream stream(ioc);
  const size_t colon = address.rfind(':');
  stream.connect(resolver.resolve(address.substr(0, colon), address.substr(colon + 1)));
  bhttp::request<bhttp::string_body> req(bhttp::verb::get, target, 11);
  req.set(bhttp::field::host, "localhost");
  req.set("x-llamafleet-user", "alice");
  bhttp::write(stream, req);
  boost::beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(stream, buffer, res);
  return {res.result_int(), res.body()};
}

class UsageServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options = testing::InProcessOptions(dir_.path());
    options.queue_gpu_quotas = {{"research", 0}};
    options.pricing = kPricing;
    options.clock = &clock_;
    coordinator_ = testing::StartInProcess(options);
    ASSERT_NE(coordinator_, nullptr);
    stub_ = v1::JobService::NewStub(
        grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
    // A worker the attempts run on, as its hello records it.
    v1::Inventory inv;
    inv.set_instance_type("p5.48xlarge");
    for (int i = 0; i < 8; ++i) inv.add_gpus()->set_index(i);
    ASSERT_TRUE(Store().WriteAndWait(UpsertWorkerTxn("g1", inv, v1::WORKER_DISCONNECTED)).ok());
  }
  void TearDown() override { coordinator_.reset(); }

  JobStore& Store() { return *coordinator_->store(); }
  std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("x-llamafleet-user", "alice");
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return ctx;
  }
  std::string Submit(const std::string& queue) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = testing::SpecBuilder("used").Queue(queue).Nodes(1, 8).Build();
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job().id();
  }
  void Start(const std::string& id, int attempt) {
    AttemptRecord a;
    a.job_id = std::stoll(id);
    a.attempt = attempt;
    a.master_addr = "10.0.0.1";
    a.master_port = 29500;
    a.tasks.push_back(TaskRecord{absl::StrCat(id, "-", attempt, "-0"), 0, "g1", 8, v1::TASK_STARTING});
    ASSERT_TRUE(Store().WriteAndWait(StartAttemptTxn(std::move(a))).ok());
  }
  void End(const std::string& id, int attempt, AttemptOutcome outcome) {
    AttemptEnd end{std::stoll(id), attempt, outcome, "ended", ""};
    end.pricing = kPricing;
    ASSERT_TRUE(Store().WriteAndWait(EndAttemptTxn(end)).ok());
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

TEST_F(UsageServiceTest, JobsAttemptsQueuesAndUsageShowGpuTimeAndCost) {
  const std::string id = Submit("research");
  Start(id, 1);
  clock_.Advance(absl::Seconds(900));  // 8 GPUs x 900 s = 7200 GPU-s, cost 20
  End(id, 1, AttemptOutcome::kRetryable);
  Start(id, 2);
  clock_.Advance(absl::Seconds(360));  // active: 2880 GPU-s so far, cost 8

  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::Job job;
  ASSERT_TRUE(stub_->GetJob(Context().get(), get, &job).ok());
  EXPECT_EQ(job.usage().gpu_seconds(), 7200 + 2880);
  EXPECT_EQ(job.usage().failed_gpu_seconds(), 7200);
  EXPECT_DOUBLE_EQ(job.usage().cost(), 28.0);
  EXPECT_DOUBLE_EQ(job.usage().failed_cost(), 20.0);

  for (v1::JobView view : {v1::JOB_VIEW_BASIC, v1::JOB_VIEW_FULL}) {
    v1::ListJobsRequest list;
    list.set_view(view);
    v1::ListJobsResponse listed;
    ASSERT_TRUE(stub_->ListJobs(Context().get(), list, &listed).ok());
    ASSERT_EQ(listed.jobs_size(), 1);
    EXPECT_EQ(listed.jobs(0).usage().gpu_seconds(), job.usage().gpu_seconds()) << v1::JobView_Name(view);
    EXPECT_DOUBLE_EQ(listed.jobs(0).usage().cost(), 28.0) << v1::JobView_Name(view);
  }

  v1::ListAttemptsRequest attempts_req;
  attempts_req.set_job_id(id);
  v1::ListAttemptsResponse attempts;
  ASSERT_TRUE(stub_->ListAttempts(Context().get(), attempts_req, &attempts).ok());
  ASSERT_EQ(attempts.attempts_size(), 2);
  EXPECT_EQ(attempts.attempts(0).gpu_seconds(), 2880) << "the active attempt, up to now";
  EXPECT_DOUBLE_EQ(attempts.attempts(0).cost(), 8.0);
  EXPECT_EQ(attempts.attempts(1).gpu_seconds(), 7200);
  EXPECT_DOUBLE_EQ(attempts.attempts(1).cost(), 20.0);

  v1::ListQueuesResponse queues;
  ASSERT_TRUE(stub_->ListQueues(Context().get(), v1::ListQueuesRequest(), &queues).ok());
  bool found = false;
  for (const v1::Queue& q : queues.queues()) {
    if (q.name() != "research") continue;
    found = true;
    EXPECT_EQ(q.usage().gpu_seconds(), 7200 + 2880);
    EXPECT_DOUBLE_EQ(q.usage().cost(), 28.0);
  }
  EXPECT_TRUE(found);

  v1::GetUsageRequest usage_req;
  usage_req.set_user("alice");
  v1::GetUsageResponse usage;
  ASSERT_TRUE(stub_->GetUsage(Context().get(), usage_req, &usage).ok());
  ASSERT_EQ(usage.rows_size(), 1);
  EXPECT_EQ(usage.rows(0).user(), "alice");
  EXPECT_EQ(usage.rows(0).queue(), "research");
  EXPECT_EQ(usage.rows(0).jobs(), 1);
  EXPECT_EQ(usage.rows(0).usage().gpu_seconds(), 7200 + 2880);
  EXPECT_DOUBLE_EQ(usage.rows(0).usage().cost(), 28.0);
  EXPECT_EQ(usage.pricing().at("p5.48xlarge"), 80.0);
  usage_req.set_user("bob");
  ASSERT_TRUE(stub_->GetUsage(Context().get(), usage_req, &usage).ok());
  EXPECT_EQ(usage.rows_size(), 0);

  // The HTTP gateway's route, with its one query parameter.
  auto [status, body] = HttpGet(coordinator_->http_address(), "/api/v1/usage?user=alice");
  ASSERT_EQ(status, 200) << body;
  const nlohmann::json json = nlohmann::json::parse(body);
  ASSERT_EQ(json["rows"].size(), 1u) << body;
  EXPECT_EQ(json["rows"][0]["queue"], "research");
  EXPECT_EQ(json["rows"][0]["jobs"], "1");  // int64 as a string, the protobuf JSON mapping
  EXPECT_DOUBLE_EQ(json["rows"][0]["usage"]["gpu_seconds"].get<double>(), 10080);
  EXPECT_DOUBLE_EQ(json["pricing"]["p5.48xlarge"].get<double>(), 80);
  EXPECT_EQ(HttpGet(coordinator_->http_address(), "/api/v1/usage?owner=alice").first, 400)
      << "an unknown parameter is refused";

  // Once it ends and the job is deleted, the totals keep it.
  clock_.Advance(absl::Seconds(3240));  // attempt 2: 3600 s in all
  End(id, 2, AttemptOutcome::kSucceeded);
  ASSERT_TRUE(Store().WriteAndWait(DeleteFinishedJobTxn(std::stoll(id))).ok());
  usage_req.set_user("");
  ASSERT_TRUE(stub_->GetUsage(Context().get(), usage_req, &usage).ok());
  ASSERT_EQ(usage.rows_size(), 1);
  EXPECT_EQ(usage.rows(0).usage().gpu_seconds(), 7200 + 28800);
  EXPECT_EQ(usage.rows(0).usage().failed_gpu_seconds(), 7200);
  EXPECT_DOUBLE_EQ(usage.rows(0).usage().cost(), 100.0);
}

}  // namespace
}  // namespace llamafleet
