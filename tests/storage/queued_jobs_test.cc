// The in-memory view of QUEUED jobs (storage/queued_jobs.h) against SQLite, the truth:
// after every kind of commit that moves a job into or out of QUEUED, the view equals what
// a query for state = QUEUED returns, field by field; it is rebuilt when the store opens;
// a write that is rolled back leaves it alone; a snapshot never changes under its reader.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

using ::google::protobuf::util::MessageDifferencer;

SubmitJobInput Input(const std::string& name, int max_restarts = 2) {
  return SubmitJobInput{testing::SpecBuilder(name)
                            .MaxRestarts(max_restarts)
                            .RestartBackoffSeconds(30)
                            .Label("team", "nlp")
                            .WithDefaults(),
                        "alice", absl::StrCat("key-", name)};
}

class QueuedJobsTest : public testing::StoreTest {
 protected:
  std::vector<int64_t> Submit(JobStore& store, std::vector<SubmitJobInput> inputs) {
    absl::StatusOr<std::vector<SubmitJobResult>> r = store.SubmitJobsAndWait(std::move(inputs));
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<int64_t> ids;
    if (r.ok()) {
      for (const SubmitJobResult& j : *r) ids.push_back(std::stoll(j.job.id()));
    }
    return ids;
  }

  absl::Status Start(JobStore& store, int64_t id, int attempt, const std::string& worker) {
    AttemptRecord a;
    a.job_id = id;
    a.attempt = attempt;
    a.master_addr = "10.0.0.1";
    a.master_port = 29500;
    a.tasks.push_back(TaskRecord{absl::StrCat("t", id, "-", attempt), 0, worker, 8,
                                 v1::TASK_STARTING});
    return store.WriteAndWait(StartAttemptTxn(std::move(a)));
  }

  // The view, and the ids in it, after checking it against SQLite field by field.
  std::vector<int64_t> ExpectViewMatchesDatabase(JobStore& store) {
    absl::StatusOr<QueuedJobsSnapshot> view = store.SnapshotQueuedJobs();
    absl::StatusOr<std::vector<SchedulableJob>> db = LoadJobsInStates(store, {v1::QUEUED});
    EXPECT_TRUE(view.ok()) << view.status();
    EXPECT_TRUE(db.ok()) << db.status();
    std::vector<int64_t> ids;
    if (!view.ok() || !db.ok()) return ids;
    EXPECT_EQ(view->size(), db->size());
    EXPECT_EQ(store.queued_jobs_size(), db->size());
    auto got = view->begin();
    for (const SchedulableJob& want : *db) {
      if (got == view->end()) break;
      EXPECT_TRUE(MessageDifferencer::Equals(got->job, want.job))
          << "view:\n" << got->job.DebugString() << "database:\n" << want.job.DebugString();
      EXPECT_EQ(got->queued_since, want.queued_since) << want.job.id();
      EXPECT_EQ(got->eligible, want.eligible) << want.job.id();
      EXPECT_EQ(got->last_preempted, want.last_preempted) << want.job.id();
      EXPECT_EQ(got->first_start, want.first_start) << want.job.id();
      EXPECT_EQ(got->excluded_workers, want.excluded_workers) << want.job.id();
      ids.push_back(std::stoll(want.job.id()));
      ++got;
    }
    return ids;
  }

};

TEST_F(QueuedJobsTest, FollowsEveryTransitionIntoAndOutOfQueued) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(ExpectViewMatchesDatabase(*store).empty());

  const std::vector<int64_t> ids = Submit(*store, {Input("a"), Input("b"), Input("c"), Input("d", 0)});
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), ids);
  // A re-submission with the same key creates nothing and changes nothing.
  clock_.Advance(absl::Seconds(1));
  Submit(*store, {Input("a")});
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), ids);

  // Scheduled: leaves the view.
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(Start(*store, ids[0], 1, "w1").ok());
  ASSERT_TRUE(Start(*store, ids[2], 1, "w2").ok());
  ASSERT_TRUE(Start(*store, ids[3], 1, "w3").ok());
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), (std::vector<int64_t>{ids[1]}));

  // A node fault requeues with a backoff and the worker excluded: back, with new fields.
  clock_.Advance(absl::Seconds(60));
  ASSERT_TRUE(store->WriteAndWait(EndAttemptTxn(
      AttemptEnd{ids[0], 1, AttemptOutcome::kNodeFault, "worker w1 lost", "w1"})).ok());
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), (std::vector<int64_t>{ids[0], ids[1]}));
  {
    absl::StatusOr<QueuedJobsSnapshot> view = store->SnapshotQueuedJobs();
    ASSERT_TRUE(view.ok());
    const SchedulableJob& requeued = *view->begin();
    EXPECT_EQ(requeued.excluded_workers, (std::set<std::string>{"w1"}));
    EXPECT_EQ(requeued.eligible, clock_.Now() + absl::Seconds(30));
    EXPECT_EQ(requeued.job.restarts(), 1);
  }

  // Preempted: back with last_preempted set.
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->WriteAndWait(BeginPreemptionTxn(ids[2], "needed by a bigger job")).ok());
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), (std::vector<int64_t>{ids[0], ids[1]}));
  ASSERT_TRUE(store->WriteAndWait(EndAttemptTxn(
      AttemptEnd{ids[2], 1, AttemptOutcome::kPreempted, "checkpointed", ""})).ok());
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), (std::vector<int64_t>{ids[0], ids[1], ids[2]}));

  // Failed without restarts left, cancelled, failed from the queue: gone.
  ASSERT_TRUE(store->WriteAndWait(EndAttemptTxn(
      AttemptEnd{ids[3], 1, AttemptOutcome::kRetryable, "exit 1", ""})).ok());
  ASSERT_TRUE(store->CancelJobAndWait(ids[1], "alice", "").ok());
  ASSERT_TRUE(store->WriteAndWait(FailQueuedJobTxn(ids[2], "deadline")).ok());
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), (std::vector<int64_t>{ids[0]}));
}

TEST_F(QueuedJobsTest, RebuiltFromTheDatabaseWhenTheStoreOpens) {
  std::vector<int64_t> ids;
  {
    std::unique_ptr<JobStore> store = Open();
    ASSERT_NE(store, nullptr);
    ids = Submit(*store, {Input("a"), Input("b"), Input("c")});
    ASSERT_TRUE(Start(*store, ids[1], 1, "w1").ok());
    clock_.Advance(absl::Seconds(10));
    ASSERT_TRUE(store->WriteAndWait(EndAttemptTxn(
        AttemptEnd{ids[1], 1, AttemptOutcome::kNodeFault, "lost", "w1"})).ok());
    ASSERT_TRUE(store->CancelJobAndWait(ids[2], "alice", "").ok());
  }
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), (std::vector<int64_t>{ids[0], ids[1]}));
}

TEST_F(QueuedJobsTest, RolledBackWritesAndOldSnapshotsAreUntouched) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  const std::vector<int64_t> ids = Submit(*store, {Input("a"), Input("b")});
  absl::StatusOr<QueuedJobsSnapshot> before = store->SnapshotQueuedJobs();
  ASSERT_TRUE(before.ok());

  // A write that moves a job and then fails is undone, and so is its effect on the view.
  absl::Status failed = store->WriteAndWait([&](Txn& txn) -> absl::Status {
    absl::StatusOr<std::optional<v1::Job>> job = txn.LoadJob(ids[0]);
    if (!job.ok()) return job.status();
    if (absl::Status s = txn.Transition(&**job, "cancelled", v1::CANCELLED, "test"); !s.ok()) {
      return s;
    }
    return absl::InternalError("changed my mind");
  });
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), ids);

  ASSERT_TRUE(store->CancelJobAndWait(ids[0], "alice", "").ok());
  EXPECT_EQ(ExpectViewMatchesDatabase(*store), (std::vector<int64_t>{ids[1]}));
  // The snapshot taken before still holds both jobs, intact.
  ASSERT_EQ(before->size(), 2u);
  EXPECT_EQ(before->begin()->job.spec().name(), "a");
  EXPECT_EQ(before->begin()->job.state(), v1::QUEUED);
}

}  // namespace
}  // namespace llamafleet
