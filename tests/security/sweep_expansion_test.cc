// Sweeps as a way to hold the coordinator (jobspec/sweep.h), against a real coordinator
// (tests/security/security_api.h) with a real worker heartbeating every 0.3 s under
// --heartbeat-timeout 2: four concurrent dry runs of the red team's request (400 one-value
// resources.node_labels.kN parameters x 150 seeds, under 16 KB each) are refused at once
// naming the bound, and four of the largest sweep the bounds allow are answered within a
// few seconds; meanwhile another user's GetJob is answered within a second and the worker
// is never lost.
#include <cstdio>
#include <thread>

#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/security/security_api.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

constexpr int kAttackers = 4;

struct Call {
  grpc::Status status;
  absl::Duration took;
  int jobs = 0;
};

class SweepExpansionTest : public SecurityApiTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SecurityApiTest::SetUp());
    Stop();
    ASSERT_NO_FATAL_FAILURE(Start({"--heartbeat-timeout", "2"}));
    auto worker = testing::StartWorker({.coordinator = address_,
                                        .name = "w1",
                                        .data_dir = dir_.path() + "/worker",
                                        .join_token = "secret",
                                        .heartbeat_interval = 0.3,
                                        .log_path = dir_.path() + "/worker.log"});
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
    workers_ = v1::WorkerService::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    ASSERT_TRUE(testing::WaitFor([&] { return WorkerState() == v1::WORKER_READY; },
                                 absl::Seconds(20), absl::Milliseconds(50)))
        << ReadFile(dir_.path() + "/worker.log");
    ASSERT_TRUE(Submit("bob", Spec(), &bob_job_).ok());
  }

  v1::WorkerState WorkerState() {
    v1::ListWorkersResponse resp;
    if (!workers_->ListWorkers(Context("root").get(), v1::ListWorkersRequest(), &resp).ok()) {
      return v1::WORKER_STATE_UNSPECIFIED;
    }
    for (const v1::WorkerInfo& w : resp.workers()) {
      if (w.name() == "w1") return w.state();
    }
    return v1::WORKER_STATE_UNSPECIFIED;
  }

  // One dry-run SubmitJobs of a sweep: `labels` one-value resources.node_labels.kN
  // parameters and training.seed over `seeds` values.
  static v1::SubmitJobsRequest Sweep(v1::JobSpec spec, int labels, int seeds) {
    spec.set_name("sweep");
    v1::SweepSpec* sweep = spec.mutable_sweep();
    for (int k = 0; k < labels; ++k) {
      (*sweep->mutable_parameters())[absl::StrCat("resources.node_labels.k", k)].add_values("v");
    }
    v1::SweepValues& seed = (*sweep->mutable_parameters())["training.seed"];
    for (int s = 0; s < seeds; ++s) seed.add_values(absl::StrCat(s));
    v1::SubmitJobsRequest req;
    *req.add_jobs()->mutable_spec() = std::move(spec);
    req.set_dry_run(true);
    return req;
  }

  // `request` from kAttackers threads at once (alice, 10 s deadline each), while bob reads
  // his job every 50 ms; bob's slowest read in *slowest_read.
  std::vector<Call> Attack(const v1::SubmitJobsRequest& request, absl::Duration* slowest_read) {
    std::vector<Call> calls(kAttackers);
    std::atomic<int> running{kAttackers};
    std::vector<std::thread> threads;
    for (int t = 0; t < kAttackers; ++t) {
      threads.emplace_back([&, t] {
        auto ctx = Context("alice");
        ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        v1::SubmitJobsResponse resp;
        const absl::Time start = absl::Now();
        calls[t].status = stub_->SubmitJobs(ctx.get(), request, &resp);
        calls[t].took = absl::Now() - start;
        calls[t].jobs = resp.jobs_size();
        --running;
      });
    }
    *slowest_read = absl::ZeroDuration();
    const absl::Time until_at_least = absl::Now() + absl::Milliseconds(500);
    while (running > 0 || absl::Now() < until_at_least) {
      v1::GetJobRequest req;
      req.set_job_id(bob_job_);
      v1::Job job;
      const absl::Time start = absl::Now();
      grpc::Status s = stub_->GetJob(Context("bob").get(), req, &job);
      *slowest_read = std::max(*slowest_read, absl::Now() - start);
      EXPECT_TRUE(s.ok()) << s.error_message();
      absl::SleepFor(absl::Milliseconds(50));
    }
    for (std::thread& t : threads) t.join();
    absl::Duration slowest_call;
    for (const Call& call : calls) slowest_call = std::max(slowest_call, call.took);
    std::printf("slowest of %d submissions: %s; slowest read meanwhile: %s\n", kAttackers,
                absl::FormatDuration(slowest_call).c_str(),
                absl::FormatDuration(*slowest_read).c_str());
    return calls;
  }

  void ExpectWorkerNeverLost() {
    EXPECT_EQ(WorkerState(), v1::WORKER_READY);
    const std::string log = ReadFile(dir_.path() + "/coordinator.log");
    EXPECT_FALSE(absl::StrContains(log, " lost (")) << log;
  }

  std::unique_ptr<testing::Subprocess> worker_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::string bob_job_;
};

// The report's request: 401 parameters, each labelling every job, are more than a job's 32
// labels allow: refused from the request's sizes before any point is made.
TEST_F(SweepExpansionTest, TheReportsRequestIsRefusedAtOnceWhileOthersAreAnswered) {
  const v1::SubmitJobsRequest request = Sweep(Spec(), 400, 150);
  EXPECT_LT(request.ByteSizeLong(), 16u << 10);
  absl::Duration slowest_read;
  for (const Call& call : Attack(request, &slowest_read)) {
    EXPECT_EQ(call.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << call.status.error_message();
    EXPECT_TRUE(absl::StrContains(call.status.error_message(),
                                  "jobs[0].spec.sweep.parameters has 401 parameters; at most 31"))
        << call.status.error_message();
    EXPECT_LT(call.took, absl::Seconds(1));
  }
  EXPECT_LT(slowest_read, absl::Seconds(1));
  ExpectWorkerNeverLost();
}

// The most the bounds allow: 31 parameters (30 labels and 1,000 seeds), 1,000 points, four
// at once, each answered in full within a few seconds on two cores; one seed more is
// refused naming the bound.
TEST_F(SweepExpansionTest, TheLargestSweepAllowedIsAnsweredWithinABound) {
  absl::Duration slowest_read;
  for (const Call& call : Attack(Sweep(Spec(), 30, 1000), &slowest_read)) {
    EXPECT_TRUE(call.status.ok()) << call.status.error_message();
    EXPECT_EQ(call.jobs, 1000);
    EXPECT_LT(call.took, absl::Seconds(5));
  }
  EXPECT_LT(slowest_read, absl::Seconds(1));
  ExpectWorkerNeverLost();

  v1::SubmitJobsResponse resp;
  grpc::Status s = stub_->SubmitJobs(Context("alice").get(), Sweep(Spec(), 30, 1001), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "training.seed has 1001 values; at most 1000"))
      << s.error_message();
}

}  // namespace
}  // namespace llamafleet
