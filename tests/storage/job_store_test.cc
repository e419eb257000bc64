// JobStore's jobs: submission, idempotency keys, the active-job limit under group commit,
// listing, cancellation, state transitions and attempts. The database file itself (schema,
// migrations, full disks, crashes, modes) is job_store_file_test's.
#include "storage/job_store.h"

#include <future>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "storage/cluster_store.h"
#include "storage/job_writes.h"
#include "tests/storage/job_store_fixture.h"

namespace llamafleet {
namespace {

TEST_F(JobStoreTest, SubmittedJobIsQueuedWithEventAndSurvivesReopen) {
  int64_t id;
  {
    auto store = Open();
    absl::StatusOr<std::vector<SubmitJobResult>> r = store->SubmitJobsAndWait({Input("a")});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 1u);
    EXPECT_TRUE((*r)[0].created);
    const v1::Job& job = (*r)[0].job;
    EXPECT_EQ(job.state(), v1::QUEUED);
    EXPECT_EQ(job.owner(), "alice");
    EXPECT_EQ(job.last_event_seq(), 1);
    EXPECT_EQ(job.create_time().seconds(), absl::ToUnixSeconds(clock_.Now()));
    id = std::stoll(job.id());
  }
  auto store = Open();
  absl::StatusOr<v1::Job> job = store->GetJob(id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().name(), "a");
  EXPECT_EQ(job->state(), v1::QUEUED);
  EXPECT_EQ(job->status_reason(), "waiting to be scheduled");
  absl::StatusOr<std::vector<v1::JobEvent>> events = store->GetEvents(id, 0, 100);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].type(), "submitted");
  EXPECT_EQ((*events)[0].to_state(), v1::QUEUED);
  EXPECT_EQ((*events)[0].reason(), "submitted by alice");
  EXPECT_EQ(store->GetJob(id + 100).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobStoreTest, IdempotencyKeyReturnsTheExistingJobPerOwner) {
  auto store = Open();
  int64_t first = SubmitOne(store.get(), Input("a", "alice", "k1"));
  absl::StatusOr<std::vector<SubmitJobResult>> again =
      store->SubmitJobsAndWait({Input("different-name", "alice", "k1")});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE((*again)[0].created);
  EXPECT_EQ((*again)[0].job.id(), absl::StrCat(first));
  EXPECT_EQ((*again)[0].job.spec().name(), "a");
  // Another owner's key space is separate.
  int64_t bob = SubmitOne(store.get(), Input("a", "bob", "k1"));
  EXPECT_NE(bob, first);
  // The same key twice in one batch: one job.
  absl::StatusOr<std::vector<SubmitJobResult>> batch =
      store->SubmitJobsAndWait({Input("x", "alice", "k2"), Input("x", "alice", "k2")});
  ASSERT_TRUE(batch.ok());
  EXPECT_TRUE((*batch)[0].created);
  EXPECT_FALSE((*batch)[1].created);
  EXPECT_EQ((*batch)[0].job.id(), (*batch)[1].job.id());
  absl::StatusOr<ListJobsResult> all = store->ListJobs({});
  EXPECT_EQ(all->jobs.size(), 3u);
}

TEST_F(JobStoreTest, ConcurrentWritersAreGroupCommitted) {
  for (bool group : {true, false}) {
    JobStoreOptions o = Options();
    o.path = dir_.path() + (group ? "/group.db" : "/single.db");
    o.group_commit = group;
    auto store = Open(o);
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 20; ++i) {
          if (store->SubmitJobsAndWait({Input(absl::StrCat("t", t, "-", i))}).ok()) ++ok;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(ok.load(), 320);
    EXPECT_EQ(store->writes_committed(), 320);
    if (group) {
      EXPECT_LT(store->transactions_committed(), 320) << "no batching happened";
    } else {
      EXPECT_EQ(store->transactions_committed(), 320);
    }
  }
}

// limits.max_active_jobs_per_user is enforced by counting the owner's active jobs inside
// the write transaction: concurrent group-committed submissions, writes that fail inside
// the same transaction, other owners, a batch that would cross the limit, and a job that
// ends must all leave the count exact.
TEST_F(JobStoreTest, ActiveJobLimitHoldsUnderConcurrentGroupCommits) {
  auto store = Open();
  constexpr int kLimit = 40;
  auto limited = [&](const std::string& name, const std::string& owner, const std::string& dir = "") {
    SubmitJobInput in = Input(name, owner);
    in.max_active_jobs = kLimit;
    if (!dir.empty()) in.spec.mutable_checkpoint()->set_dir(dir);
    return in;
  };
  // A job owning /ckpt/taken: later submissions naming it fail inside their transaction.
  ASSERT_TRUE(store->SubmitJobsAndWait({limited("owner-of-dir", "carol", "/ckpt/taken")}).ok());
  std::atomic<int> accepted{0}, refused{0}, conflicts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        // Every third submission of a thread fails (checkpoint dir taken) in the same
        // group commits as the others; it must not count.
        const bool conflict = i % 3 == 2;
        absl::StatusOr<std::vector<SubmitJobResult>> r = store->SubmitJobsAndWait(
            {limited(absl::StrCat("t", t, "-", i), "alice", conflict ? "/ckpt/taken" : "")});
        if (r.ok()) {
          ++accepted;
        } else if (r.status().code() == absl::StatusCode::kResourceExhausted) {
          ++refused;
        } else if (r.status().code() == absl::StatusCode::kFailedPrecondition) {
          ++conflicts;
        } else {
          ADD_FAILURE() << r.status();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(accepted.load(), kLimit);
  EXPECT_EQ(accepted.load() + refused.load() + conflicts.load(), 80);
  EXPECT_GT(store->transactions_committed(), 0);
  // Others are not affected; a batch that would cross the limit is refused whole.
  EXPECT_TRUE(store->SubmitJobsAndWait({limited("b", "bob")}).ok());
  std::vector<SubmitJobInput> batch;
  for (int i = 0; i < kLimit; ++i) batch.push_back(limited(absl::StrCat("bb", i), "bob"));
  EXPECT_EQ(store->SubmitJobsAndWait(std::move(batch)).status().code(),
            absl::StatusCode::kResourceExhausted);
  // A job that ends frees exactly one slot.
  ListJobsQuery list;
  list.owner = "alice";
  list.states = {v1::QUEUED};
  list.page_size = 1;
  absl::StatusOr<ListJobsResult> page = store->ListJobs(list);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  ASSERT_TRUE(store->CancelJobAndWait(std::stoll(page->jobs[0].id()), "alice", "").ok());
  EXPECT_TRUE(store->SubmitJobsAndWait({limited("again", "alice")}).ok());
  EXPECT_EQ(store->SubmitJobsAndWait({limited("one-too-many", "alice")}).status().code(),
            absl::StatusCode::kResourceExhausted);
  // The counts survive a restart (rebuilt from the rows).
  store.reset();
  store = Open();
  EXPECT_EQ(store->SubmitJobsAndWait({limited("after-restart", "alice")}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// The limit's count is one range of the jobs_by_owner_state index (no table rows read),
// cheap at a 1,000-job sweep: the test prints the time per count at 1,000 active jobs.
TEST_F(JobStoreTest, ActiveJobCountIsAnIndexRangeAndCheapAtAThousandJobs) {
  auto store = Open();
  constexpr int kJobs = 1000;
  std::vector<SubmitJobInput> sweep;
  for (int i = 0; i < kJobs; ++i) sweep.push_back(Input(absl::StrCat("sweep-", i)));
  ASSERT_TRUE(store->SubmitJobsAndWait(std::move(sweep)).ok());
  ASSERT_TRUE(store->SubmitJobsAndWait({Input("other", "bob")}).ok());
  std::string plan;
  ASSERT_TRUE(store->Read([&](sqlite::Connection& conn) -> absl::Status {
    absl::StatusOr<sqlite::Statement> s = conn.Prepare(
        "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM jobs WHERE owner = 'alice' AND state IN "
        "(1, 2, 3, 7, 8)");
    if (!s.ok()) return s.status();
    while (true) {
      absl::StatusOr<bool> row = s->Step();
      if (!row.ok()) return row.status();
      if (!*row) return absl::OkStatus();
      absl::StrAppend(&plan, s->ColumnText(3), "; ");
    }
  }).ok());
  EXPECT_NE(plan.find("COVERING INDEX jobs_by_owner_state"), std::string::npos) << plan;

  constexpr int kCounts = 200;
  int64_t counted = -1;
  absl::Duration took;
  ASSERT_TRUE(store->WriteAndWait([&](Txn& txn) -> absl::Status {
    const absl::Time start = absl::Now();
    for (int i = 0; i < kCounts; ++i) {
      absl::StatusOr<int64_t> n = CountActiveJobs(txn, "alice");
      if (!n.ok()) return n.status();
      counted = *n;
    }
    took = absl::Now() - start;
    return absl::OkStatus();
  }).ok());
  EXPECT_EQ(counted, kJobs);
  const double us = absl::ToDoubleMicroseconds(took) / kCounts;
  std::printf("active-job count at %d active jobs of one owner: %.1f us\n", kJobs, us);
  EXPECT_LT(us, 5000) << "a count should take well under a millisecond";
}

TEST_F(JobStoreTest, ListFiltersAndPagesNewestFirst) {
  auto store = Open();
  std::vector<SubmitJobInput> inputs;
  for (int i = 0; i < 25; ++i) {
    SubmitJobInput in{SpecBuilder(absl::StrCat("j", i))
                          .Queue(i % 2 ? "odd" : "even")
                          .Label("team", i % 3 == 0 ? "nlp" : "vision")
                          .WithDefaults(),
                      i < 5 ? "bob" : "alice", ""};
    inputs.push_back(std::move(in));
  }
  ASSERT_TRUE(store->SubmitJobsAndWait(std::move(inputs)).ok());
  ASSERT_TRUE(store->CancelJobAndWait(3, "alice", "").ok());

  std::vector<int64_t> seen;
  ListJobsQuery q;
  q.page_size = 7;
  do {
    absl::StatusOr<ListJobsResult> page = store->ListJobs(q);
    ASSERT_TRUE(page.ok());
    EXPECT_LE(page->jobs.size(), 7u);
    for (auto& j : page->jobs) seen.push_back(std::stoll(j.id()));
    q.before_id = page->next_before_id;
  } while (q.before_id != 0);
  ASSERT_EQ(seen.size(), 25u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 25 - static_cast<int64_t>(i));

  auto count = [&](ListJobsQuery query) {
    query.page_size = 100;
    return store->ListJobs(query)->jobs.size();
  };
  ListJobsQuery by_queue;
  by_queue.queue = "odd";
  EXPECT_EQ(count(by_queue), 12u);
  ListJobsQuery by_owner;
  by_owner.owner = "bob";
  EXPECT_EQ(count(by_owner), 5u);
  ListJobsQuery by_label;
  by_label.labels = {{"team", "nlp"}};
  EXPECT_EQ(count(by_label), 9u);
  ListJobsQuery by_state;
  by_state.states = {v1::CANCELLED};
  EXPECT_EQ(count(by_state), 1u);
  ListJobsQuery combined;
  combined.queue = "even";
  combined.labels = {{"team", "nlp"}};
  combined.owner = "alice";
  EXPECT_EQ(count(combined), 4u);  // j6, j12, j18, j24 (j0 is bob's)
}

TEST_F(JobStoreTest, CancelIsIdempotentAndRecordsEvents) {
  auto store = Open();
  int64_t id = SubmitOne(store.get(), Input("a"));
  std::vector<v1::JobEvent> seen;
  std::mutex mu;
  int64_t handle = store->Subscribe([&](const v1::JobEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(e);
  });
  clock_.Advance(absl::Seconds(5));
  absl::StatusOr<CancelJobResult> r = store->CancelJobAndWait(id, "alice", "wrong data");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->changed);
  EXPECT_EQ(r->job.state(), v1::CANCELLED);
  EXPECT_EQ(r->job.status_reason(), "cancelled by alice: wrong data");
  r = store->CancelJobAndWait(id, "alice", "");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->changed);
  EXPECT_EQ(r->message, absl::StrCat("job ", id, " is already CANCELLED; nothing changed"));
  EXPECT_EQ(store->CancelJobAndWait(999, "alice", "").status().code(),
            absl::StatusCode::kNotFound);
  store->Unsubscribe(handle);
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].seq(), 2);
    EXPECT_EQ(seen[0].from_state(), v1::QUEUED);
    EXPECT_EQ(seen[0].to_state(), v1::CANCELLED);
  }
  absl::StatusOr<std::vector<v1::JobEvent>> events = store->GetEvents(id, 1, 10);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].time().seconds(), absl::ToUnixSeconds(clock_.Now()));
}

TEST_F(JobStoreTest, TransitionChecksTheSourceState) {
  auto store = Open();
  int64_t id = SubmitOne(store.get(), Input("a"));
  auto result = std::make_shared<CancelJobResult>();
  EXPECT_EQ(store->WriteAndWait(TransitionJobTxn(id, {v1::RUNNING}, v1::SUCCEEDED, "finished", "done", result))
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store->WriteAndWait(TransitionJobTxn(id, {v1::QUEUED}, v1::SCHEDULED, "scheduled", "placed", result))
                  .ok());
  EXPECT_EQ(result->job.state(), v1::SCHEDULED);
  EXPECT_EQ(result->job.last_event_seq(), 2);
}

TEST_F(JobStoreTest, ListAttemptsShowsEachStartWithItsOutcomeAndTasksNewestFirst) {
  using google::protobuf::util::TimeUtil;
  std::unique_ptr<JobStore> store = Open();
  const int64_t id = SubmitOne(store.get(), Input("restarted"));
  auto start = [&](int attempt, std::string resume_from) {
    AttemptRecord a;
    a.job_id = id;
    a.attempt = attempt;
    a.master_addr = "10.0.0.1";
    a.master_port = 29500;
    a.resume_from = std::move(resume_from);
    for (int node = 0; node < 2; ++node) {
      a.tasks.push_back(TaskRecord{absl::StrCat("t", attempt, "-", node), node,
                                   absl::StrCat("w", attempt + node), 8, v1::TASK_STARTING});
    }
    return store->WriteAndWait(StartAttemptTxn(std::move(a)));
  };
  auto task_state = [&](const std::string& task_id, v1::TaskState state, std::string message) {
    v1::TaskStatus status;
    status.set_task_id(task_id);
    status.set_state(state);
    status.set_message(std::move(message));
    return store->WriteAndWait(SetTaskStateTxn(task_id, status));
  };

  absl::StatusOr<std::vector<v1::Attempt>> list = ListAttempts(*store, id);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->empty()) << "never scheduled";

  const absl::Time t0 = clock_.Now();
  ASSERT_TRUE(start(1, "").ok());
  list = ListAttempts(*store, id);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].state(), v1::ATTEMPT_ACTIVE);
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds((*list)[0].start_time()), absl::ToUnixMicros(t0));
  EXPECT_FALSE((*list)[0].has_end_time()) << "unset while active";

  // Attempt 1: node 1's rank fails, node 0 is stopped with the gang; retried.
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(task_state("t1-1", v1::TASK_FAILED, "rank 1 exited with code 3").ok());
  ASSERT_TRUE(task_state("t1-0", v1::TASK_KILLED, "").ok());
  AttemptEnd end{id, 1, AttemptOutcome::kRetryable, "rank 1 exited with code 3", ""};
  ASSERT_TRUE(store->WriteAndWait(EndAttemptTxn(end)).ok());
  // Attempt 2 resumes and succeeds.
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(start(2, "/ckpt/step-10").ok());
  ASSERT_TRUE(task_state("t2-0", v1::TASK_SUCCEEDED, "").ok());
  ASSERT_TRUE(task_state("t2-1", v1::TASK_SUCCEEDED, "").ok());
  clock_.Advance(absl::Seconds(60));
  end = AttemptEnd{id, 2, AttemptOutcome::kSucceeded, "every rank finished", ""};
  ASSERT_TRUE(store->WriteAndWait(EndAttemptTxn(end)).ok());

  list = ListAttempts(*store, id);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  const v1::Attempt& second = (*list)[0];
  const v1::Attempt& first = (*list)[1];
  EXPECT_EQ(second.job_id(), absl::StrCat(id));
  EXPECT_EQ(second.attempt(), 2);
  EXPECT_EQ(second.state(), v1::ATTEMPT_SUCCEEDED);
  EXPECT_EQ(second.failure_class(), "");
  EXPECT_EQ(second.reason(), "every rank finished");
  EXPECT_EQ(second.resume_from(), "/ckpt/step-10");
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(second.start_time()),
            absl::ToUnixMicros(t0 + absl::Seconds(40)));
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(second.end_time()),
            absl::ToUnixMicros(t0 + absl::Seconds(100)));
  ASSERT_EQ(second.tasks_size(), 2);
  EXPECT_EQ(second.tasks(1).task_id(), "t2-1");
  EXPECT_EQ(second.tasks(1).node_rank(), 1);
  EXPECT_EQ(second.tasks(1).worker(), "w3");
  EXPECT_EQ(second.tasks(1).ranks(), 8);
  EXPECT_EQ(second.tasks(1).state(), v1::TASK_SUCCEEDED);

  EXPECT_EQ(first.attempt(), 1);
  EXPECT_EQ(first.state(), v1::ATTEMPT_FAILED);
  EXPECT_EQ(first.failure_class(), "retryable");
  EXPECT_EQ(first.reason(), "rank 1 exited with code 3");
  EXPECT_EQ(first.resume_from(), "");
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(first.end_time()),
            absl::ToUnixMicros(t0 + absl::Seconds(30)));
  ASSERT_EQ(first.tasks_size(), 2);
  EXPECT_EQ(first.tasks(0).worker(), "w1");
  EXPECT_EQ(first.tasks(0).state(), v1::TASK_KILLED);
  EXPECT_EQ(first.tasks(1).worker(), "w2");
  EXPECT_EQ(first.tasks(1).state(), v1::TASK_FAILED);
  EXPECT_EQ(first.tasks(1).message(), "rank 1 exited with code 3");

  // Another job's history is its own; an unknown job has none.
  const int64_t other = SubmitOne(store.get(), Input("other"));
  list = ListAttempts(*store, other);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
  list = ListAttempts(*store, 999);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}


TEST_F(JobStoreTest, JobIdsAreNeverReusedAfterADeletion) {
  auto store = Open();
  SubmitOne(store.get(), Input("a"));
  const int64_t newest = SubmitOne(store.get(), Input("b"));
  ASSERT_TRUE(store->WriteAndWait(DeleteJobTxn(newest)).ok());
  EXPECT_EQ(store->GetJob(newest).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(SubmitOne(store.get(), Input("c")), newest + 1);
  store.reset();
  store = Open();
  ASSERT_TRUE(store->WriteAndWait(DeleteJobTxn(newest + 1)).ok());
  store.reset();
  store = Open();  // the high-water mark is durable, not only in memory
  EXPECT_EQ(SubmitOne(store.get(), Input("d")), newest + 2);
}

}  // namespace
}  // namespace llamafleet
