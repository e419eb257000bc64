// GPU time and cost in the store (storage/usage_store.h): recorded once at each attempt's
// end, summed per job and per user and queue, failed attempts apart, priced by the
// workers' instance types, measured live while an attempt is active, kept in the totals
// when jobs are deleted, and backfilled by the migration to schema 10.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"
#include "storage/schema.h"
#include "storage/usage_store.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

// 8 GPUs at 80 per instance-hour: 10 per GPU-hour. A CPU worker: 4 ranks at 1.2 per hour.
const PriceTable kPricing = {{"p5.48xlarge", 80.0}, {"c7i.8xlarge", 1.2}};

class UsageStoreTest : public testing::StoreTest {
 protected:
  void SetUp() override {
    store_ = Open();
    ASSERT_NE(store_, nullptr);
    AddWorker("g1", "p5.48xlarge", 8, 0);
    AddWorker("g2", "p5.48xlarge", 8, 0);
    AddWorker("cpu", "c7i.8xlarge", 0, 4);
    AddWorker("odd", "x1.unpriced", 8, 0);
  }
  void AddWorker(const std::string& name, const std::string& type, int gpus, int cpu_ranks) {
    v1::Inventory inv;
    inv.set_instance_type(type);
    for (int i = 0; i < gpus; ++i) inv.add_gpus()->set_index(i);
    inv.set_cpu_ranks(cpu_ranks);
    ASSERT_TRUE(store_->WriteAndWait(UpsertWorkerTxn(name, inv, v1::WORKER_READY)).ok());
  }
  int64_t Submit(const std::string& owner, const std::string& queue) {
    return SubmitSpec(store_.get(), testing::SpecBuilder("used").Queue(queue).Build(), owner);
  }
  // Places attempt `attempt` of `job` with one task per {worker, ranks}.
  void Start(int64_t job, int attempt, const std::vector<std::pair<std::string, int>>& tasks) {
    AttemptRecord a;
    a.job_id = job;
    a.attempt = attempt;
    a.master_addr = "10.0.0.1";
    a.master_port = 29500;
    for (size_t i = 0; i < tasks.size(); ++i) {
      a.tasks.push_back(TaskRecord{absl::StrCat(job, "-", attempt, "-", i), static_cast<int>(i), tasks[i].first,
                                   tasks[i].second, v1::TASK_STARTING});
    }
    ASSERT_TRUE(store_->WriteAndWait(StartAttemptTxn(std::move(a))).ok());
  }
  void End(int64_t job, int attempt, AttemptOutcome outcome, const PriceTable& pricing = kPricing) {
    AttemptEnd end{job, attempt, outcome, "ended", ""};
    end.pricing = pricing;
    ASSERT_TRUE(store_->WriteAndWait(EndAttemptTxn(end)).ok());
  }
  v1::Usage JobUsage(int64_t job, const PriceTable& pricing = kPricing) {
    absl::StatusOr<std::map<int64_t, v1::Usage>> u = ReadJobUsage(*store_, {job}, pricing, clock_.Now());
    EXPECT_TRUE(u.ok()) << u.status();
    return u.ok() ? (*u)[job] : v1::Usage();
  }
  std::vector<v1::Attempt> Attempts(int64_t job, const PriceTable& pricing = kPricing) {
    absl::StatusOr<std::vector<v1::Attempt>> list = ListAttempts(*store_, job);
    EXPECT_TRUE(list.ok()) << list.status();
    if (!list.ok()) return {};
    EXPECT_TRUE(AddActiveAttemptUsage(*store_, pricing, clock_.Now(), &*list).ok());
    return *list;
  }
  std::vector<v1::UsageRow> Rows(const std::string& user = "", const PriceTable& pricing = kPricing) {
    absl::StatusOr<std::vector<v1::UsageRow>> rows = ReadUsageRows(*store_, user, pricing, clock_.Now());
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : std::vector<v1::UsageRow>{};
  }

  std::unique_ptr<JobStore> store_;
};

TEST_F(UsageStoreTest, GpuSecondsAddUpAcrossAttemptsWithTheFailedPartApart) {
  const int64_t job = Submit("alice", "research");
  // Attempt 1: 16 GPUs for 900 s, then a retryable failure.
  Start(job, 1, {{"g1", 8}, {"g2", 8}});
  clock_.Advance(absl::Seconds(900));
  End(job, 1, AttemptOutcome::kRetryable);
  // Attempt 2: 16 GPUs for 1800 s, preempted.
  Start(job, 2, {{"g1", 8}, {"g2", 8}});
  clock_.Advance(absl::Seconds(1800));
  End(job, 2, AttemptOutcome::kPreempted);
  // Attempt 3: 8 GPUs, active for 600 s so far: measured live.
  Start(job, 3, {{"g1", 8}});
  clock_.Advance(absl::Seconds(600));

  std::vector<v1::Attempt> attempts = Attempts(job);
  ASSERT_EQ(attempts.size(), 3u);
  EXPECT_EQ(attempts[2].gpu_seconds(), 14400);
  EXPECT_DOUBLE_EQ(attempts[2].cost(), 40.0) << "16 GPUs x 0.25 h x 10 per GPU-hour";
  EXPECT_EQ(attempts[1].gpu_seconds(), 28800);
  EXPECT_DOUBLE_EQ(attempts[1].cost(), 80.0);
  EXPECT_EQ(attempts[0].state(), v1::ATTEMPT_ACTIVE);
  EXPECT_EQ(attempts[0].gpu_seconds(), 4800) << "live: 8 GPUs x 600 s";
  EXPECT_DOUBLE_EQ(attempts[0].cost(), 8 * 600 * 10.0 / 3600);

  v1::Usage live = JobUsage(job);
  EXPECT_EQ(live.gpu_seconds(), 14400 + 28800 + 4800);
  EXPECT_EQ(live.failed_gpu_seconds(), 14400 + 28800) << "the failed and the preempted attempt";
  ASSERT_TRUE(live.has_cost());
  EXPECT_NEAR(live.cost(), 40 + 80 + 8 * 600 * 10.0 / 3600, 1e-9);
  EXPECT_NEAR(live.failed_cost(), 120, 1e-9);
  std::vector<v1::UsageRow> rows = Rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].jobs(), 1);
  EXPECT_EQ(rows[0].usage().gpu_seconds(), live.gpu_seconds()) << "totals plus the active attempt";

  clock_.Advance(absl::Seconds(3000));  // 3600 s in all
  End(job, 3, AttemptOutcome::kSucceeded);
  End(job, 3, AttemptOutcome::kSucceeded);  // a repeat records nothing more
  attempts = Attempts(job);
  double sum = 0;
  for (const v1::Attempt& a : attempts) sum += a.gpu_seconds();
  const v1::Usage done = JobUsage(job);
  EXPECT_EQ(done.gpu_seconds(), sum) << "a job's GPU time is its attempts'";
  EXPECT_EQ(done.gpu_seconds(), 14400 + 28800 + 28800);
  EXPECT_EQ(done.failed_gpu_seconds(), 43200);
  EXPECT_NEAR(done.cost(), 40 + 80 + 80, 1e-9);
  EXPECT_NEAR(done.failed_cost(), 120, 1e-9);
  rows = Rows("alice");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].user(), "alice");
  EXPECT_EQ(rows[0].queue(), "research");
  EXPECT_EQ(rows[0].jobs(), 1) << "counted once, at its first attempt's end";
  EXPECT_EQ(rows[0].usage().gpu_seconds(), done.gpu_seconds());
  EXPECT_EQ(rows[0].usage().failed_gpu_seconds(), done.failed_gpu_seconds());
  EXPECT_NEAR(rows[0].usage().cost(), done.cost(), 1e-9);
  EXPECT_TRUE(Rows("bob").empty());
}

TEST_F(UsageStoreTest, CancelledAttemptCountsButIsNotFailedAndTotalsOutliveTheJob) {
  const int64_t job = Submit("bob", "default");
  Start(job, 1, {{"cpu", 2}});
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(store_->CancelJobAndWait(job, "bob", "changed my mind").ok());
  End(job, 1, AttemptOutcome::kStopped);
  const v1::Usage u = JobUsage(job);
  EXPECT_EQ(u.gpu_seconds(), 60);
  EXPECT_EQ(u.failed_gpu_seconds(), 0) << "cancelled is not failed";
  EXPECT_DOUBLE_EQ(u.cost(), 2 * 30 * (1.2 / 4) / 3600) << "CPU ranks priced per rank of the instance";
  EXPECT_EQ(u.failed_cost(), 0);
  EXPECT_TRUE(u.has_failed_cost()) << "a priced sum says its failed part, 0 here";

  ASSERT_TRUE(store_->WriteAndWait(DeleteFinishedJobTxn(job)).ok());
  EXPECT_EQ(JobUsage(job).gpu_seconds(), 0) << "the job's own records are gone";
  const std::vector<v1::UsageRow> rows = Rows();
  ASSERT_EQ(rows.size(), 1u) << "the totals are not";
  EXPECT_EQ(rows[0].user(), "bob");
  EXPECT_EQ(rows[0].jobs(), 1);
  EXPECT_EQ(rows[0].usage().gpu_seconds(), 60);
  EXPECT_DOUBLE_EQ(rows[0].usage().cost(), u.cost());
}

TEST_F(UsageStoreTest, UnpricedAndMixedAttemptsLeaveCostUnsetAndSumsPricedAttemptsOnly) {
  // No pricing at all: GPU time, no cost anywhere.
  const int64_t plain = Submit("carol", "default");
  Start(plain, 1, {{"g1", 4}});
  clock_.Advance(absl::Seconds(10));
  End(plain, 1, AttemptOutcome::kSucceeded, {});
  EXPECT_EQ(JobUsage(plain, {}).gpu_seconds(), 40);
  EXPECT_FALSE(JobUsage(plain, {}).has_cost());
  EXPECT_FALSE(Attempts(plain, {})[0].has_cost());

  // A gang across a priced and an unpriced instance type: the attempt is unpriced.
  const int64_t mixed = Submit("carol", "default");
  Start(mixed, 1, {{"g1", 8}, {"odd", 8}});
  clock_.Advance(absl::Seconds(100));
  EXPECT_FALSE(Attempts(mixed)[0].has_cost()) << "live, too";
  End(mixed, 1, AttemptOutcome::kRetryable);
  std::vector<v1::Attempt> attempts = Attempts(mixed);
  EXPECT_EQ(attempts[0].gpu_seconds(), 1600);
  EXPECT_FALSE(attempts[0].has_cost());
  EXPECT_FALSE(JobUsage(mixed).has_cost()) << "no priced attempt yet";
  // Its next attempt on priced workers only: the job's cost is that attempt's.
  Start(mixed, 2, {{"g1", 8}});
  clock_.Advance(absl::Seconds(360));
  End(mixed, 2, AttemptOutcome::kSucceeded);
  const v1::Usage u = JobUsage(mixed);
  EXPECT_EQ(u.gpu_seconds(), 1600 + 2880);
  EXPECT_EQ(u.failed_gpu_seconds(), 1600);
  ASSERT_TRUE(u.has_cost());
  EXPECT_DOUBLE_EQ(u.cost(), 8.0) << "8 GPUs x 0.1 h x 10";
  EXPECT_EQ(u.failed_cost(), 0) << "the failed attempt was not priced";

  const std::vector<v1::UsageRow> rows = Rows("carol");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].jobs(), 2);
  EXPECT_EQ(rows[0].usage().gpu_seconds(), 40 + 1600 + 2880);
  EXPECT_DOUBLE_EQ(rows[0].usage().cost(), 8.0);
}

TEST_F(UsageStoreTest, AnEndedAttemptKeepsThePriceItEndedWith) {
  const int64_t job = Submit("dave", "default");
  Start(job, 1, {{"g1", 8}});
  clock_.Advance(absl::Seconds(3600));
  End(job, 1, AttemptOutcome::kSucceeded);
  const PriceTable doubled = {{"p5.48xlarge", 160.0}};
  EXPECT_DOUBLE_EQ(Attempts(job, doubled)[0].cost(), 80.0);
  EXPECT_DOUBLE_EQ(JobUsage(job, doubled).cost(), 80.0);
  EXPECT_DOUBLE_EQ(Rows("", doubled)[0].usage().cost(), 80.0);
  // An active attempt is priced by the reader's table.
  const int64_t next = Submit("dave", "default");
  Start(next, 1, {{"g2", 8}});
  clock_.Advance(absl::Seconds(360));
  EXPECT_DOUBLE_EQ(JobUsage(next, doubled).cost(), 16.0);
  EXPECT_DOUBLE_EQ(Rows("", doubled)[0].usage().cost(), 96.0);
  EXPECT_EQ(Rows("", doubled)[0].jobs(), 2) << "an active first attempt counts its job";
}

TEST_F(UsageStoreTest, PricingArithmetic) {
  v1::Inventory gpu;
  gpu.set_instance_type("p5.48xlarge");
  for (int i = 0; i < 8; ++i) gpu.add_gpus()->set_index(i);
  EXPECT_DOUBLE_EQ(*SlotHourPrice(gpu, {{"p5.48xlarge", 98.32}}), 12.29);
  EXPECT_FALSE(SlotHourPrice(gpu, {{"p4d.24xlarge", 32.77}}).has_value());
  v1::Inventory empty;
  empty.set_instance_type("p5.48xlarge");
  EXPECT_FALSE(SlotHourPrice(empty, {{"p5.48xlarge", 98.32}}).has_value()) << "no slots";

  AttemptMeter meter;
  meter.AddTask(8, 12.29);
  meter.AddTask(4, 2.0);
  const AttemptUsage u = meter.Measure(1800, true);
  EXPECT_EQ(u.gpu_seconds, 12 * 1800);
  EXPECT_DOUBLE_EQ(*u.cost, (8 * 12.29 + 4 * 2.0) / 2);
  EXPECT_TRUE(u.failed);
  EXPECT_FALSE(AttemptMeter().Measure(10, false).cost.has_value());

  EXPECT_TRUE(IsFailedUsage(2, "retryable"));
  EXPECT_TRUE(IsFailedUsage(3, "preempted"));
  EXPECT_FALSE(IsFailedUsage(3, ""));  // cancelled or resized
  EXPECT_FALSE(IsFailedUsage(1, ""));
}

// A database of schema 9: its ended attempts get their GPU time from their tasks, and the
// totals their sums, unpriced.
TEST_F(UsageStoreTest, MigrationToSchemaTenBackfillsEndedAttempts) {
  const int64_t job = Submit("erin", "default");
  Start(job, 1, {{"g1", 2}, {"g2", 2}});
  clock_.Advance(absl::Seconds(50));
  End(job, 1, AttemptOutcome::kNodeFault);
  Start(job, 2, {{"g1", 2}});
  clock_.Advance(absl::Seconds(10));
  End(job, 2, AttemptOutcome::kSucceeded);
  store_.reset();
  {
    absl::StatusOr<std::unique_ptr<sqlite::Connection>> conn =
        sqlite::Connection::Open(Path(), false, false);
    ASSERT_TRUE(conn.ok()) << conn.status();
    ASSERT_TRUE((*conn)->Exec("DROP TABLE user_identities; DROP TABLE job_evals; DROP TABLE usage_totals;"
                              "ALTER TABLE checkpoints DROP COLUMN eval_loss;"
                              "ALTER TABLE attempts DROP COLUMN gpu_seconds; ALTER TABLE attempts DROP COLUMN cost;"
                              "DROP TABLE deleted_job_dirs; DROP INDEX worker_credentials_by_join_token;"
                              "ALTER TABLE worker_credentials DROP COLUMN join_token_sha256;"
                              "ALTER TABLE jobs DROP COLUMN submitted_spec; ALTER TABLE jobs DROP COLUMN derived_from;"
                              "PRAGMA user_version = 9;")
                    .ok());
  }
  store_ = Open();
  ASSERT_NE(store_, nullptr);
  const std::vector<v1::Attempt> attempts = Attempts(job);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[1].gpu_seconds(), 200);
  EXPECT_EQ(attempts[0].gpu_seconds(), 20);
  EXPECT_FALSE(attempts[0].has_cost());
  const std::vector<v1::UsageRow> rows = Rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].jobs(), 1);
  EXPECT_EQ(rows[0].usage().gpu_seconds(), 220);
  EXPECT_EQ(rows[0].usage().failed_gpu_seconds(), 200);
  EXPECT_FALSE(rows[0].usage().has_cost());
  EXPECT_GE(CurrentSchemaVersion(), 10);
}

}  // namespace
}  // namespace llamafleet
