// JobService over real gRPC on a loopback port: every RPC, validation, paging,
// idempotency, watch (including resume), cancel races, health and reflection.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "server/coordinator.h"
#include "storage/job_store.h"
#include "tests/testing/in_process.h"
#include "tests/testing/process.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::SpecBuilder;
using ::llamafleet::testing::TempDir;

// The suite's job: two one-GPU nodes, queued for good (the coordinator has no workers).
v1::JobSpec ValidSpec(const std::string& name = "job") { return SpecBuilder(name).Nodes(2).Build(); }

class JobServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options = testing::InProcessOptions(dir_.path());
    // Jobs may name only configured queues (and default).
    options.queue_gpu_quotas = {{"even", 0}, {"odd", 0}, {"research", 0}};
    coordinator_ = testing::StartInProcess(options);
    ASSERT_NE(coordinator_, nullptr);
    channel_ = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::JobService::NewStub(channel_);
  }
  void TearDown() override { coordinator_.reset(); }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& user = "alice") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("x-llamafleet-user", user);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return ctx;
  }

  v1::Job Submit(const v1::JobSpec& spec, const std::string& key = "",
                 const std::string& user = "alice") {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_idempotency_key(key);
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(Context(user).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job();
  }

  grpc::Status Cancel(const std::string& id, v1::CancelJobResponse* resp,
                      const std::string& user = "alice") {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    return stub_->CancelJob(Context(user).get(), req, resp);
  }

  // Every response of a watch from `after_seq` to its end; `read`, when given, counts them
  // as they arrive.
  std::vector<v1::WatchJobResponse> WatchAll(const std::string& id, int64_t after_seq,
                                             grpc::Status* status, std::atomic<int>* read = nullptr) {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_after_seq(after_seq);
    auto ctx = Context();
    auto reader = stub_->WatchJob(ctx.get(), req);
    std::vector<v1::WatchJobResponse> out;
    v1::WatchJobResponse r;
    while (reader->Read(&r)) {
      out.push_back(r);
      if (read != nullptr) ++*read;
    }
    *status = reader->Finish();
    return out;
  }

  TempDir dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

TEST_F(JobServiceTest, SubmitStoresDefaultsAndGetReturnsTheJob) {
  v1::Job job = Submit(ValidSpec("first"));
  EXPECT_EQ(job.id(), "1");
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.spec().fsdp().sharding(), v1::FULL_SHARD);  // default filled in
  EXPECT_EQ(job.spec().queue(), "default");

  v1::GetJobRequest get;
  get.set_job_id(job.id());
  v1::Job got;
  ASSERT_TRUE(stub_->GetJob(Context().get(), get, &got).ok());
  EXPECT_EQ(got.spec().name(), "first");
  EXPECT_EQ(got.last_event_seq(), 1);

  get.set_job_id("77");
  EXPECT_EQ(stub_->GetJob(Context().get(), get, &got).error_code(), grpc::StatusCode::NOT_FOUND);
  get.set_job_id("abc");
  grpc::Status bad = stub_->GetJob(Context().get(), get, &got);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("job_id"), std::string::npos);
}

TEST_F(JobServiceTest, InvalidSpecNamesEveryFieldAndStoresNothing) {
  v1::JobSpec spec = ValidSpec();
  spec.mutable_resources()->set_nodes(0);
  spec.mutable_training()->set_lr(-1);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  grpc::Status s = stub_->SubmitJob(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.resources.nodes must be >= 1"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("spec.training.lr must be > 0"), std::string::npos);

  v1::ListJobsRequest list;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), list, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);

  grpc::ClientContext bad_user;
  bad_user.AddMetadata("x-llamafleet-user", "not a user!");
  *req.mutable_spec() = ValidSpec();
  EXPECT_EQ(stub_->SubmitJob(&bad_user, req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, BatchIsAllOrNothingAndNamesTheIndex) {
  v1::SubmitJobsRequest req;
  for (int i = 0; i < 3; ++i) *req.add_jobs()->mutable_spec() = ValidSpec(absl::StrCat("b", i));
  req.mutable_jobs(1)->mutable_spec()->mutable_training()->set_lr(0);
  req.mutable_jobs(1)->mutable_spec()->mutable_training()->clear_lr();
  req.mutable_jobs(2)->mutable_spec()->mutable_fsdp()->set_sharding(v1::HYBRID_SHARD);
  req.mutable_jobs(2)->mutable_spec()->mutable_fsdp()->set_hybrid_shard_group_size(3);
  v1::SubmitJobsResponse resp;
  grpc::Status s = stub_->SubmitJobs(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find(
                "jobs[2].spec.fsdp.hybrid_shard_group_size (3) must divide the world size (2)"),
            std::string::npos)
      << s.error_message();
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);

  req.mutable_jobs(2)->mutable_spec()->mutable_fsdp()->set_hybrid_shard_group_size(2);
  ASSERT_TRUE(stub_->SubmitJobs(Context().get(), req, &resp).ok());
  ASSERT_EQ(resp.jobs_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(resp.jobs(i).created());
    EXPECT_EQ(resp.jobs(i).job().spec().name(), absl::StrCat("b", i));
  }
  v1::SubmitJobsRequest empty;
  EXPECT_EQ(stub_->SubmitJobs(Context().get(), empty, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, IdempotencyKeyAndDryRun) {
  v1::Job a = Submit(ValidSpec("a"), "key-1");
  v1::Job again = Submit(ValidSpec("a"), "key-1");
  EXPECT_EQ(a.id(), again.id());
  v1::Job other_user = Submit(ValidSpec("a"), "key-1", "bob");
  EXPECT_NE(other_user.id(), a.id());

  v1::SubmitJobRequest req;
  *req.mutable_spec() = ValidSpec("dry");
  req.set_dry_run(true);
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(stub_->SubmitJob(Context().get(), req, &resp).ok());
  EXPECT_FALSE(resp.created());
  EXPECT_EQ(resp.job().id(), "");
  EXPECT_EQ(resp.job().spec().training().seq_len(), 4096);  // defaults shown
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 2);

  req.set_idempotency_key(std::string(300, 'k'));
  EXPECT_EQ(stub_->SubmitJob(Context().get(), req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, ListPagesNewestFirstWithFilters) {
  for (int i = 0; i < 12; ++i) {
    v1::JobSpec spec = ValidSpec(absl::StrCat("j", i));
    spec.set_queue(i % 2 ? "odd" : "even");
    (*spec.mutable_labels())["n"] = absl::StrCat(i % 3);
    Submit(spec, "", i < 4 ? "bob" : "alice");
  }
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(Cancel("5", &cancelled).ok());

  std::vector<std::string> ids;
  v1::ListJobsRequest req;
  req.set_page_size(5);
  int pages = 0;
  while (true) {
    v1::ListJobsResponse resp;
    ASSERT_TRUE(stub_->ListJobs(Context().get(), req, &resp).ok());
    ++pages;
    for (const v1::Job& j : resp.jobs()) ids.push_back(j.id());
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(ids.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(ids[i], absl::StrCat(12 - i));

  auto count = [&](v1::ListJobsRequest r) {
    v1::ListJobsResponse resp;
    grpc::Status s = stub_->ListJobs(Context().get(), r, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.jobs_size();
  };
  v1::ListJobsRequest by;
  by.set_queue("odd");
  EXPECT_EQ(count(by), 6);
  by.Clear();
  by.set_owner("bob");
  EXPECT_EQ(count(by), 4);
  by.Clear();
  by.add_labels("n=0");
  EXPECT_EQ(count(by), 4);
  by.Clear();
  by.add_states(v1::CANCELLED);
  by.add_states(v1::SUCCEEDED);
  EXPECT_EQ(count(by), 1);

  v1::ListJobsResponse resp;
  v1::ListJobsRequest bad;
  bad.set_page_token("garbage");
  grpc::Status s = stub_->ListJobs(Context().get(), bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("page_token"), std::string::npos);
  bad.Clear();
  bad.add_labels("novalue");
  s = stub_->ListJobs(Context().get(), bad, &resp);
  EXPECT_NE(s.error_message().find("labels[0] must be key=value"), std::string::npos);
  bad.Clear();
  bad.set_page_size(-1);
  EXPECT_EQ(stub_->ListJobs(Context().get(), bad, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, ListSearchesByNameSortsAndCountsAcrossPages) {
  // Names chosen so that name order, priority order and id order all differ.
  const std::vector<std::pair<std::string, int>> jobs = {
      {"llama-b", 5}, {"Llama-a", -3}, {"mistral", 9}, {"llama-c", 0}, {"gemma", 5}};
  for (const auto& [name, priority] : jobs) {
    v1::JobSpec spec = ValidSpec(name);
    spec.set_priority(priority);
    Submit(spec);
  }
  auto list_all = [&](v1::ListJobsRequest req, int64_t* total) {
    std::vector<std::string> names;
    req.set_page_size(2);
    while (true) {
      v1::ListJobsResponse resp;
      grpc::Status s = stub_->ListJobs(Context().get(), req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      *total = resp.total_size();
      for (const v1::Job& j : resp.jobs()) names.push_back(j.spec().name());
      if (resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
    return names;
  };
  int64_t total = 0;
  v1::ListJobsRequest req;
  req.set_name_contains("LLAMA");  // case-insensitive
  EXPECT_EQ(list_all(req, &total), (std::vector<std::string>{"llama-c", "Llama-a", "llama-b"}));
  EXPECT_EQ(total, 3);
  req.set_order_by("name");
  EXPECT_EQ(list_all(req, &total), (std::vector<std::string>{"Llama-a", "llama-b", "llama-c"}));
  req.Clear();
  req.set_order_by("-priority");  // ties: newest first
  EXPECT_EQ(list_all(req, &total),
            (std::vector<std::string>{"mistral", "gemma", "llama-b", "llama-c", "Llama-a"}));
  EXPECT_EQ(total, 5);
  req.set_order_by("create_time");
  EXPECT_EQ(list_all(req, &total),
            (std::vector<std::string>{"llama-b", "Llama-a", "mistral", "llama-c", "gemma"}));

  // A token from one order is refused by another; unknown orders are named.
  v1::ListJobsRequest first;
  first.set_order_by("name");
  first.set_page_size(2);
  v1::ListJobsResponse resp;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), first, &resp).ok());
  v1::ListJobsRequest other;
  other.set_order_by("-name");
  other.set_page_token(resp.next_page_token());
  grpc::Status s = stub_->ListJobs(Context().get(), other, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("order_by"), std::string::npos) << s.error_message();
  other.Clear();
  other.set_order_by("size");
  s = stub_->ListJobs(Context().get(), other, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("order_by must be one of"), std::string::npos);
}

TEST_F(JobServiceTest, ListReturnsSummariesUnlessTheFullViewIsAsked) {
  for (int i = 0; i < 5; ++i) {
    v1::JobSpec spec = ValidSpec(absl::StrCat("v", i));
    spec.set_queue("research");
    spec.set_priority(10 * i);
    (*spec.mutable_labels())["team"] = "nlp";
    Submit(spec, absl::StrCat("key-", i));
  }
  v1::GetJobRequest get;
  get.set_job_id("3");
  v1::Job stored;
  ASSERT_TRUE(stub_->GetJob(Context().get(), get, &stored).ok());
  // Passes for new submissions are coalesced: wait until one has explained every job, so
  // that the views compared below are of the same pass.
  testing::WaitFor(
      [&] {
        for (int i = 1; i <= 5; ++i) {
          v1::GetJobRequest one;
          one.set_job_id(absl::StrCat(i));
          v1::Job job;
          if (!stub_->GetJob(Context().get(), one, &job).ok() || !job.has_pending()) return false;
        }
        return true;
      },
      absl::Seconds(10), absl::Milliseconds(10));

  // Every page in both views: the same jobs, the same tokens, the same total.
  auto pages = [&](v1::JobView view, const std::string& order_by) {
    std::vector<v1::ListJobsResponse> out;
    v1::ListJobsRequest req;
    req.set_page_size(2);
    req.set_view(view);
    req.set_order_by(order_by);
    while (true) {
      v1::ListJobsResponse resp;
      grpc::Status s = stub_->ListJobs(Context().get(), req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      out.push_back(resp);
      if (resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
    return out;
  };
  for (const char* order_by : {"", "name", "-priority"}) {
    const std::vector<v1::ListJobsResponse> unset = pages(v1::JOB_VIEW_UNSPECIFIED, order_by);
    const std::vector<v1::ListJobsResponse> basic = pages(v1::JOB_VIEW_BASIC, order_by);
    const std::vector<v1::ListJobsResponse> full = pages(v1::JOB_VIEW_FULL, order_by);
    ASSERT_EQ(unset.size(), 3u) << order_by;
    ASSERT_EQ(basic.size(), 3u) << order_by;
    ASSERT_EQ(full.size(), 3u) << order_by;
    for (size_t p = 0; p < full.size(); ++p) {
      EXPECT_EQ(basic[p].next_page_token(), full[p].next_page_token()) << order_by;
      EXPECT_EQ(unset[p].next_page_token(), full[p].next_page_token()) << order_by;
      EXPECT_EQ(basic[p].total_size(), 5);
      EXPECT_EQ(full[p].total_size(), 5);
      ASSERT_EQ(basic[p].jobs_size(), full[p].jobs_size());
      for (int j = 0; j < full[p].jobs_size(); ++j) {
        const v1::Job& b = basic[p].jobs(j);
        const v1::Job& f = full[p].jobs(j);
        EXPECT_EQ(unset[p].jobs(j).SerializeAsString(), b.SerializeAsString());
        EXPECT_EQ(b.id(), f.id());
        // What a list shows.
        EXPECT_EQ(b.owner(), "alice");
        EXPECT_EQ(b.state(), f.state());
        EXPECT_EQ(b.status_reason(), f.status_reason());
        EXPECT_EQ(b.create_time().seconds(), f.create_time().seconds());
        EXPECT_EQ(b.update_time().seconds(), f.update_time().seconds());
        EXPECT_EQ(b.last_event_seq(), f.last_event_seq());
        EXPECT_EQ(b.spec().name(), f.spec().name());
        EXPECT_EQ(b.spec().queue(), "research");
        EXPECT_EQ(b.spec().priority(), f.spec().priority());
        EXPECT_EQ(b.spec().resources().nodes(), 2);
        EXPECT_EQ(b.spec().resources().gpus_per_node(), 1);
        // What it leaves to the full view.
        EXPECT_FALSE(b.spec().has_model());
        EXPECT_FALSE(b.spec().has_data());
        EXPECT_FALSE(b.spec().has_training());
        EXPECT_TRUE(b.spec().labels().empty());
        EXPECT_TRUE(b.idempotency_key().empty());
        EXPECT_TRUE(f.spec().has_model());
        EXPECT_EQ(f.spec().labels().at("team"), "nlp");
        EXPECT_EQ(f.idempotency_key(), absl::StrCat("key-", f.id().back() - '1'));
        EXPECT_LT(b.ByteSizeLong() + 100, f.ByteSizeLong());
      }
    }
  }
  // The full view is the job GetJob returns (less what is derived per call).
  for (const v1::ListJobsResponse& page : pages(v1::JOB_VIEW_FULL, "")) {
    for (const v1::Job& f : page.jobs()) {
      if (f.id() != "3") continue;
      v1::Job expected = stored;
      expected.clear_memory_estimate();
      expected.clear_pending();  // the scheduler's, may move between the calls
      expected.clear_submitted_spec();  // GetJob's only
      v1::Job got = f;
      got.clear_pending();
      EXPECT_EQ(got.SerializeAsString(), expected.SerializeAsString());
    }
  }
  // A token made in one view pages on in the other.
  v1::ListJobsRequest req;
  req.set_page_size(2);
  v1::ListJobsResponse first, second;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), req, &first).ok());
  req.set_view(v1::JOB_VIEW_FULL);
  req.set_page_token(first.next_page_token());
  ASSERT_TRUE(stub_->ListJobs(Context().get(), req, &second).ok());
  ASSERT_EQ(second.jobs_size(), 2);
  EXPECT_EQ(second.jobs(0).id(), "3");
  EXPECT_TRUE(second.jobs(0).spec().has_model());

  v1::ListJobsRequest bad;
  bad.set_view(static_cast<v1::JobView>(7));
  v1::ListJobsResponse resp;
  grpc::Status s = stub_->ListJobs(Context().get(), bad, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("view"), std::string::npos) << s.error_message();
}

TEST_F(JobServiceTest, ListQueuesShowsDepthRunningAndQuota) {
  for (int i = 0; i < 3; ++i) {
    v1::JobSpec spec = ValidSpec(absl::StrCat("q", i));
    spec.set_queue(i == 0 ? "research" : "default");
    Submit(spec);
  }
  v1::ListQueuesResponse resp;
  grpc::Status s = stub_->ListQueues(Context().get(), v1::ListQueuesRequest(), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // By name: default and the configured ones (even and odd hold nothing).
  ASSERT_EQ(resp.queues_size(), 4);
  EXPECT_EQ(resp.queues(0).name(), "default");
  EXPECT_EQ(resp.queues(0).queued(), 2);
  EXPECT_EQ(resp.queues(0).running(), 0);
  EXPECT_TRUE(resp.queues(0).has_oldest_queued_time());
  EXPECT_EQ(resp.queues(1).name(), "even");
  EXPECT_EQ(resp.queues(1).queued(), 0);
  EXPECT_EQ(resp.queues(3).name(), "research");
  EXPECT_EQ(resp.queues(3).queued(), 1);
}

TEST_F(JobServiceTest, CancelIsIdempotentAndTerminalJobsStayAsTheyWere) {
  v1::Job job = Submit(ValidSpec());
  v1::CancelJobResponse resp;
  ASSERT_TRUE(Cancel(job.id(), &resp).ok());
  EXPECT_EQ(resp.job().state(), v1::CANCELLED);
  EXPECT_EQ(resp.message(), "cancelled");
  ASSERT_TRUE(Cancel(job.id(), &resp).ok());
  EXPECT_EQ(resp.job().state(), v1::CANCELLED);
  EXPECT_EQ(resp.message(), absl::StrCat("job ", job.id(), " is already CANCELLED; nothing changed"));
  EXPECT_EQ(Cancel("999", &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Cancel("", &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, ListAttemptsIsEmptyUntilScheduledAndNamesAnUnknownJob) {
  // Attempts with outcomes and tasks: job_store_test (storage) and cluster_e2e_test (live).
  v1::Job job = Submit(ValidSpec());
  v1::ListAttemptsRequest req;
  req.set_job_id(job.id());
  v1::ListAttemptsResponse resp;
  grpc::Status s = stub_->ListAttempts(Context().get(), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.attempts_size(), 0);
  req.set_job_id("999");
  s = stub_->ListAttempts(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  req.set_job_id("x");
  s = stub_->ListAttempts(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

TEST_F(JobServiceTest, ConcurrentCancelsChangeTheJobExactlyOnce) {
  for (int round = 0; round < 5; ++round) {
    v1::Job job = Submit(ValidSpec());
    std::atomic<int> changed{0};
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        v1::CancelJobResponse resp;
        if (Cancel(job.id(), &resp).ok()) {
          ++ok;
          if (resp.message() == "cancelled") ++changed;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(ok.load(), 8);
    EXPECT_EQ(changed.load(), 1);
    v1::GetJobEventsRequest req;
    req.set_job_id(job.id());
    v1::GetJobEventsResponse events;
    ASSERT_TRUE(stub_->GetJobEvents(Context().get(), req, &events).ok());
    ASSERT_EQ(events.events_size(), 2);
    EXPECT_EQ(events.events(1).to_state(), v1::CANCELLED);
  }
}

TEST_F(JobServiceTest, WatchStreamsLiveEventsAndEndsAtTerminalState) {
  v1::Job job = Submit(ValidSpec());
  v1::WatchJobRequest req;
  req.set_job_id(job.id());
  auto ctx = Context();
  auto reader = stub_->WatchJob(ctx.get(), req);
  v1::WatchJobResponse first;
  ASSERT_TRUE(reader->Read(&first));
  EXPECT_EQ(first.job().id(), job.id());
  EXPECT_EQ(first.job().state(), v1::QUEUED);
  v1::WatchJobResponse submitted;
  ASSERT_TRUE(reader->Read(&submitted));
  EXPECT_EQ(submitted.event().seq(), 1);
  EXPECT_EQ(submitted.event().type(), "submitted");

  // Cancelled while the watch waits: the event arrives and the stream ends.
  std::thread canceller([&] {
    // Paced so that the cancellation lands while the watch waits (nothing to poll for).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    v1::CancelJobResponse resp;
    EXPECT_TRUE(Cancel(job.id(), &resp).ok());
  });
  v1::WatchJobResponse cancelled;
  ASSERT_TRUE(reader->Read(&cancelled));
  EXPECT_EQ(cancelled.event().seq(), 2);
  EXPECT_EQ(cancelled.event().to_state(), v1::CANCELLED);
  EXPECT_FALSE(reader->Read(&cancelled));
  EXPECT_TRUE(reader->Finish().ok());
  canceller.join();
}

TEST_F(JobServiceTest, WatchResumesFromASequenceNumber) {
  v1::Job job = Submit(ValidSpec());
  v1::CancelJobResponse resp;
  ASSERT_TRUE(Cancel(job.id(), &resp).ok());

  grpc::Status status;
  std::vector<v1::WatchJobResponse> all = WatchAll(job.id(), 0, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(all.size(), 3u);  // snapshot, submitted, cancelled
  EXPECT_EQ(all[0].job().state(), v1::CANCELLED);
  EXPECT_EQ(all[1].event().seq(), 1);
  EXPECT_EQ(all[2].event().seq(), 2);

  std::vector<v1::WatchJobResponse> resumed = WatchAll(job.id(), 1, &status);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[1].event().seq(), 2);

  std::vector<v1::WatchJobResponse> caught_up = WatchAll(job.id(), 2, &status);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(caught_up.size(), 1u);
  EXPECT_TRUE(caught_up[0].has_job());

  WatchAll("4242", 0, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  WatchAll("x", 0, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, ManyWatchersRacingWithCancelAllSeeTheEndExactlyOnce) {
  v1::Job job = Submit(ValidSpec());
  std::vector<std::thread> watchers;
  std::atomic<int> complete{0};
  for (int i = 0; i < 8; ++i) {
    watchers.emplace_back([&] {
      grpc::Status status;
      std::vector<v1::WatchJobResponse> got = WatchAll(job.id(), 0, &status);
      std::vector<int64_t> seqs;
      for (size_t k = 1; k < got.size(); ++k) seqs.push_back(got[k].event().seq());
      if (status.ok() && seqs == std::vector<int64_t>{1, 2}) ++complete;
    });
  }
  // Racing is the point: some watchers are open by now, some may not be; all see the end.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  v1::CancelJobResponse resp;
  ASSERT_TRUE(Cancel(job.id(), &resp).ok());
  for (auto& t : watchers) t.join();
  EXPECT_EQ(complete.load(), 8);
}

TEST_F(JobServiceTest, ShutdownEndsOpenWatches) {
  v1::Job job = Submit(ValidSpec());
  grpc::Status status;
  std::atomic<int> read{0};
  std::thread watcher([&] { WatchAll(job.id(), 0, &status, &read); });
  ASSERT_TRUE(testing::WaitFor([&] { return read.load() >= 2; }, absl::Seconds(10)))  // snapshot, submitted
      << "the watch did not open";
  coordinator_->Shutdown();
  watcher.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(JobServiceTest, HealthCheckReportsServing) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(JobServiceTest, ReflectionListsTheJobService) {
  // ServerReflectionInfo with list_services (field 7), spoken as raw bytes.
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = generic.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                  &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, sizeof(request_bytes));
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("llamafleet.v1.JobService"), std::string::npos);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  ASSERT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(JobServiceTest, OversizedRequestsAreRefused) {
  v1::JobSpec spec = ValidSpec();
  spec.mutable_data()->set_train_path(std::string(5 << 20, 'x'));
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  EXPECT_EQ(stub_->SubmitJob(Context().get(), req, &resp).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

}  // namespace
}  // namespace llamafleet

namespace llamafleet {
namespace {

TEST_F(JobServiceTest, FullDatabaseGivesResourceExhaustedAndServiceContinues) {
  for (int i = 0; i < 3; ++i) Submit(ValidSpec());
  // Cap the database at its current size.
  absl::StatusOr<int64_t> pages = [&] {
    auto conn = sqlite::Connection::Open(dir_.path() + "/coordinator.db", false, false);
    return (*conn)->QueryInt("PRAGMA page_count");
  }();
  ASSERT_TRUE(pages.ok());
  ASSERT_TRUE(coordinator_->store()->SetMaxPageCount(*pages).ok());
  v1::SubmitJobsRequest req;
  for (int i = 0; i < 300; ++i) *req.add_jobs()->mutable_spec() = ValidSpec(absl::StrCat("f", i));
  v1::SubmitJobsResponse resp;
  grpc::Status s = stub_->SubmitJobs(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub_->ListJobs(Context().get(), v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 3);
  ASSERT_TRUE(coordinator_->store()->SetMaxPageCount(0).ok());
  s = stub_->SubmitJobs(Context().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.jobs_size(), 300);
}

}  // namespace
}  // namespace llamafleet
