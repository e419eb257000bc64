// The samples of a job's evaluations in the store (storage/sample_store.h): what is kept
// (the current attempt of a running job; indexes in range; a later attempt replaces), the
// bounds (steps, bytes, texts, scores), deletion with the job, and the migration that adds
// the table to a schema-14 database. A few seconds.
#include "storage/sample_store.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"
#include "storage/schema.h"
#include "storage/sqlite.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

class SampleStoreTest : public testing::StoreTest {
 protected:
  static v1::Sample Make(int64_t step, int index, const std::string& text, int attempt = 1) {
    v1::Sample s;
    s.set_attempt(attempt);
    s.set_step(step);
    s.set_index(index);
    s.set_prompt("Q");
    s.set_text(text);
    s.set_stop_reason("eos");
    return s;
  }

  static std::vector<int64_t> Steps(JobStore& store, int64_t job) {
    absl::StatusOr<v1::ListSamplesResponse> r = ListSamples(store, job, 0, false);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::vector<int64_t>(r->steps().begin(), r->steps().end())
                  : std::vector<int64_t>{};
  }

  // Rows of job_samples for `job`, read with SQL (a deleted job has none left behind).
  int64_t Rows(int64_t job) {
    absl::StatusOr<std::unique_ptr<sqlite::Connection>> conn =
        sqlite::Connection::Open(Path(), false, false);
    EXPECT_TRUE(conn.ok()) << conn.status();
    return *(*conn)->QueryInt(
        absl::StrCat("SELECT COUNT(*) FROM job_samples WHERE job_id = ", job));
  }
};

TEST_F(SampleStoreTest, KeepsTheCurrentAttemptsSamplesInRangeAndALaterAttemptReplaces) {
  std::unique_ptr<JobStore> store = Open();
  const int64_t job = RunningJob(store.get(), "samples");
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(10, 1, "b"))).ok());
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(10, 0, "a"))).ok());
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(10, 2, "old attempt", 2))).ok());
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(10, kMaxSamplesPerStep, "x"))).ok());
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(10, -1, "x"))).ok());
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(-5, 0, "x"))).ok());
  absl::StatusOr<v1::ListSamplesResponse> r = ListSamples(*store, job, 10, false);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->samples_size(), 2) << "another attempt's and out-of-range ones are ignored";
  EXPECT_EQ(r->samples(0).text(), "a");
  EXPECT_EQ(r->samples(1).text(), "b");
  EXPECT_EQ(r->samples(0).time().seconds(), absl::ToUnixSeconds(clock_.Now()));
  // The same step and index again (a resumed run evaluates it again): the newer stays.
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(10, 0, "again"))).ok());
  EXPECT_EQ(ListSamples(*store, job, 10, false)->samples(0).text(), "again");
  EXPECT_EQ(ListSamples(*store, job, 10, false)->samples_size(), 2);
  // A finished job takes no more.
  ASSERT_TRUE(store->CancelJobAndWait(job, "alice", "test").ok());
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(20, 0, "late"))).ok());
  EXPECT_EQ(Steps(*store, job), (std::vector<int64_t>{10}));
}

TEST_F(SampleStoreTest, TextsAndScoresAreCutOnACharacterEdge) {
  std::string big;
  for (size_t i = 0; i < kMaxSampleTextBytes; ++i) big += "\xc3\xa9";  // two bytes each
  v1::Sample s = Make(1, 0, big);
  s.set_prompt(big);
  s.set_reference(big);
  s.set_stop_reason(std::string(100, 'r'));
  for (int i = 0; i < 20; ++i)
    (*s.mutable_scores())[absl::StrCat("score-", i, std::string(40, 'n'))] = i;
  (*s.mutable_scores())["nan"] = std::numeric_limits<double>::quiet_NaN();
  const v1::Sample b = BoundedSample(s);
  EXPECT_EQ(b.text().size(), kMaxSampleTextBytes);
  EXPECT_EQ(b.text().substr(0, 2), "\xc3\xa9");
  EXPECT_EQ(b.prompt().size(), kMaxSampleTextBytes);
  EXPECT_EQ(b.reference().size(), kMaxSampleTextBytes);
  EXPECT_EQ(b.stop_reason().size(), 16u);
  EXPECT_EQ(b.scores_size(), kMaxSampleScores);
  for (const auto& [name, value] : b.scores()) EXPECT_LE(name.size(), 32u);
  EXPECT_EQ(b.scores().count("nan"), 0u);
  v1::Sample odd = Make(1, 0, std::string(kMaxSampleTextBytes - 1, 'a') + "\xc3\xa9");
  EXPECT_EQ(BoundedSample(odd).text().size(), kMaxSampleTextBytes - 1) << "never half a character";
}

TEST_F(SampleStoreTest, KeepsTheNewestStepsWithinTheStepAndByteBoundsAndGoesWithTheJob) {
  std::unique_ptr<JobStore> store = Open();
  const int64_t job = RunningJob(store.get(), "samples");
  // One transaction for all (each sample is trimmed after as in the coordinator's writes).
  ASSERT_TRUE(store
                  ->WriteAndWait([&](Txn& txn) -> absl::Status {
                    for (int64_t step = 1; step <= kMaxSampleSteps + 5; ++step) {
                      LF_RETURN_IF_ERROR(RecordSampleTxn(job, Make(step, 0, "t"))(txn));
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  std::vector<int64_t> steps = Steps(*store, job);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kMaxSampleSteps));
  EXPECT_EQ(steps.front(), 6);
  EXPECT_EQ(steps.back(), kMaxSampleSteps + 5);
  absl::StatusOr<v1::ListSamplesResponse> latest = ListSamples(*store, job, 0, true);
  ASSERT_EQ(latest->samples_size(), 1);
  EXPECT_EQ(latest->samples(0).step(), kMaxSampleSteps + 5);

  // Big samples: the byte bound drops old steps, the newest always stays.
  const int64_t big_job = RunningJob(store.get(), "samples");
  const std::string big(kMaxSampleTextBytes, 'x');
  const int per_step = 8;  // 8 x 3 x 16 KiB = 384 KiB a step
  ASSERT_TRUE(store
                  ->WriteAndWait([&](Txn& txn) -> absl::Status {
                    for (int64_t step = 1; step <= 24; ++step) {
                      for (int i = 0; i < per_step; ++i) {
                        v1::Sample s = Make(step, i, big);
                        s.set_prompt(big);
                        s.set_reference(big);
                        LF_RETURN_IF_ERROR(RecordSampleTxn(big_job, s)(txn));
                      }
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  steps = Steps(*store, big_job);
  const int64_t step_bytes = int64_t{per_step} * 3 * kMaxSampleTextBytes;
  EXPECT_EQ(static_cast<int64_t>(steps.size()), kMaxSampleBytesPerJob / step_bytes);
  EXPECT_EQ(steps.back(), 24);

  // Deleted with the job (the other job's stay).
  ASSERT_TRUE(store->CancelJobAndWait(job, "alice", "test").ok());
  ASSERT_TRUE(store->WriteAndWait(DeleteJobTxn(job)).ok());
  EXPECT_EQ(Rows(job), 0);
  EXPECT_GT(Rows(big_job), 0);
}

// A schema-14 database (before job_samples): migrated, its jobs kept, samples stored.
TEST_F(SampleStoreTest, MigrationFromSchemaFourteenAddsTheTable) {
  std::unique_ptr<JobStore> store = Open();
  const int64_t job = RunningJob(store.get(), "samples");
  store.reset();
  {
    absl::StatusOr<std::unique_ptr<sqlite::Connection>> conn =
        sqlite::Connection::Open(Path(), false, false);
    ASSERT_TRUE(conn.ok()) << conn.status();
    ASSERT_TRUE((*conn)->Exec("DROP TABLE job_samples; PRAGMA user_version = 14;").ok());
  }
  store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->WriteAndWait(RecordSampleTxn(job, Make(5, 0, "after the upgrade"))).ok());
  EXPECT_EQ(ListSamples(*store, job, 0, true)->samples(0).text(), "after the upgrade");
  EXPECT_GE(CurrentSchemaVersion(), 15);
}

}  // namespace
}  // namespace llamafleet
