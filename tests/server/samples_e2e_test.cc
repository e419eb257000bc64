// The samples of a job's evaluations and DPO's rewards end to end: a coordinator and a CPU
// worker as real processes, the fake trainer (tests/testing/fake_trainer.h) printing
// "sample" lines every 10 steps (one of them hostile: a 40000-byte text, 12 scores) and
// metrics lines with DPO rewards. What ListSamples and GetJobMetrics return is checked.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llamafleet/v1/job.grpc.pb.h"
#include "storage/sample_store.h"
#include "tests/testing/e2e_cluster.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

class SamplesE2eTest : public testing::E2eClusterTest {
 protected:
  void SetUp() override {
    E2eClusterTest::SetUp();
    StartCoordinator({"--heartbeat-timeout", "5"});
    stub_ =
        v1::JobService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  grpc::Status List(const std::string& id, int64_t step, bool latest,
                    v1::ListSamplesResponse* out) {
    grpc::ClientContext context;
    v1::ListSamplesRequest request;
    request.set_job_id(id);
    request.set_step(step);
    request.set_latest(latest);
    return stub_->ListSamples(&context, request, out);
  }

  std::unique_ptr<v1::JobService::Stub> stub_;
};

std::vector<std::pair<int64_t, int>> StepsAndIndexes(const v1::ListSamplesResponse& r) {
  std::vector<std::pair<int64_t, int>> out;
  for (const v1::Sample& s : r.samples()) out.emplace_back(s.step(), s.index());
  return out;
}

TEST_F(SamplesE2eTest, SampleLinesAreStoredBoundedAndListedAndDpoRewardsReachMetrics) {
  StartWorker("w1", {{"LLAMAFLEET_FAKE_STEPS", "30"},
                     {"LLAMAFLEET_FAKE_SAMPLES_EVERY", "10"},
                     {"LLAMAFLEET_FAKE_DPO", "1"}});
  ASSERT_TRUE(testing::WaitFor([&] { return client_->ReadyWorkers() >= 1; }, absl::Seconds(20)));
  absl::StatusOr<std::string> id = client_->Submit(
      testing::SpecBuilder("samples").Tokenizer("/t.model").TrainPath("/d.jsonl").Build());
  ASSERT_TRUE(id.ok()) << id.status();
  v1::Job job = client_->WaitFor(
      *id, [](const v1::Job& j) { return j.state() == v1::SUCCEEDED; }, absl::Seconds(30));
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.status_reason();

  v1::ListSamplesResponse all;
  ASSERT_TRUE(List(*id, 0, false, &all).ok());
  EXPECT_EQ(std::vector<int64_t>(all.steps().begin(), all.steps().end()),
            (std::vector<int64_t>{10, 20, 30}));
  EXPECT_EQ(StepsAndIndexes(all),
            (std::vector<std::pair<int64_t, int>>{
                {10, 0}, {10, 1}, {10, 2}, {20, 0}, {20, 1}, {30, 0}, {30, 1}}));
  const v1::Sample& first = all.samples(0);
  EXPECT_EQ(first.attempt(), 1);
  EXPECT_EQ(first.prompt(), "Q0");
  EXPECT_EQ(first.text(), "step 10 answer 0");
  EXPECT_EQ(first.reference(), "step 10 answer 0");
  EXPECT_EQ(first.stop_reason(), "eos");
  EXPECT_EQ(first.tokens(), 4);
  EXPECT_EQ(first.scores().at("exact_match"), 1.0);
  EXPECT_TRUE(first.has_time());
  EXPECT_EQ(all.samples(1).prompt(), "Q1\nline two");
  // The hostile line: its text cut to the bound, its scores to the first eight.
  const v1::Sample& hostile = all.samples(2);
  EXPECT_EQ(hostile.text(), std::string(kMaxSampleTextBytes, 'x'));
  EXPECT_EQ(hostile.scores_size(), kMaxSampleScores);

  v1::ListSamplesResponse one;
  ASSERT_TRUE(List(*id, 20, false, &one).ok());
  EXPECT_EQ(StepsAndIndexes(one), (std::vector<std::pair<int64_t, int>>{{20, 0}, {20, 1}}));
  EXPECT_EQ(one.steps_size(), 3) << "steps lists every step whatever was selected";
  v1::ListSamplesResponse latest;
  ASSERT_TRUE(List(*id, 20, true, &latest).ok());
  EXPECT_EQ(StepsAndIndexes(latest), (std::vector<std::pair<int64_t, int>>{{30, 0}, {30, 1}}))
      << "latest wins over step";
  v1::ListSamplesResponse none;
  ASSERT_TRUE(List(*id, 15, false, &none).ok());
  EXPECT_EQ(none.samples_size(), 0);
  EXPECT_EQ(List(*id, -1, false, &none).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(List("999", 0, false, &none).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(List("x", 0, false, &none).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // DPO's rewards: on every metrics point and on the job's latest metrics.
  grpc::ClientContext context;
  v1::GetJobMetricsRequest request;
  request.set_job_id(*id);
  v1::GetJobMetricsResponse metrics;
  ASSERT_TRUE(stub_->GetJobMetrics(&context, request, &metrics).ok());
  ASSERT_EQ(metrics.points_size(), 30);
  const v1::JobMetricsPoint& p = metrics.points(19);
  EXPECT_EQ(p.step(), 20);
  ASSERT_TRUE(p.has_dpo());
  EXPECT_DOUBLE_EQ(p.dpo().chosen(), 2.0);
  EXPECT_DOUBLE_EQ(p.dpo().rejected(), -1.0);
  EXPECT_DOUBLE_EQ(p.dpo().accuracy(), 0.75);
  EXPECT_DOUBLE_EQ(p.dpo().margin(), 3.0);
  EXPECT_DOUBLE_EQ(client_->Get(*id).latest_metrics().dpo().chosen(), 3.0);
}

}  // namespace
}  // namespace llamafleet
