#include "storage/job_store.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "google/protobuf/util/time_util.h"
#include "storage/cluster_store.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::TempDir;

v1::JobSpec Spec(const std::string& name, const std::string& queue = "default",
                 std::map<std::string, std::string> labels = {}) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_queue(queue);
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_model()->set_tokenizer("/t/tokenizer.model");
  spec.mutable_data()->set_train_path("/d/train.jsonl");
  for (auto& [k, v] : labels) (*spec.mutable_labels())[k] = v;
  ApplyDefaults(&spec);
  return spec;
}

SubmitJobInput Input(const std::string& name, const std::string& owner = "alice",
                     const std::string& key = "") {
  return SubmitJobInput{Spec(name), owner, key};
}

class JobStoreTest : public ::testing::Test {
 protected:
  JobStoreOptions Options() {
    JobStoreOptions o;
    o.path = dir_.path() + "/coordinator.db";
    o.clock = &clock_;
    return o;
  }
  std::unique_ptr<JobStore> Open(JobStoreOptions o) {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(o);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  std::unique_ptr<JobStore> Open() { return Open(Options()); }
  // In a forked child: the store at `o`, or exit code 3.
  static std::unique_ptr<JobStore> OpenOrExit(const JobStoreOptions& o) {
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(o);
    if (!store.ok()) _exit(3);
    return std::move(*store);
  }
  int64_t SubmitOne(JobStore* store, SubmitJobInput in) {
    absl::StatusOr<std::vector<SubmitJobResult>> r = store->SubmitJobsAndWait({std::move(in)});
    EXPECT_TRUE(r.ok()) << r.status();
    return std::stoll((*r)[0].job.id());
  }

  TempDir dir_;
  FakeClock clock_;
};

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

TEST_F(JobStoreTest, FreshDatabaseHasCurrentSchemaAndNewerIsRefused) {
  { auto store = Open(); }
  {
    auto conn = sqlite::Connection::Open(Options().path, false, false);
    ASSERT_TRUE(conn.ok());
    EXPECT_EQ(*(*conn)->QueryInt("PRAGMA user_version"), CurrentSchemaVersion());
    EXPECT_EQ(*(*conn)->QueryInt("PRAGMA foreign_keys"), 1);
    ASSERT_TRUE((*conn)->Exec(absl::StrCat("PRAGMA user_version=", CurrentSchemaVersion() + 1)).ok());
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(Options());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("newer than this llamafleet build supports"),
            std::string::npos)
      << store.status();
}

TEST_F(JobStoreTest, MigratesFromEmptyVersionZeroFile) {
  {
    auto conn = sqlite::Connection::Open(Options().path, true, false);
    ASSERT_TRUE(conn.ok());
    EXPECT_EQ(*(*conn)->QueryInt("PRAGMA user_version"), 0);
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_GT(SubmitOne(store.get(), Input("a")), 0);
}

TEST_F(JobStoreTest, UnopenableOrForeignFilesGiveClearErrors) {
  JobStoreOptions o = Options();
  o.path = dir_.path() + "/missing-dir/coordinator.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(o.path), std::string::npos) << store.status();

  o.path = dir_.path() + "/not-a-db";
  std::ofstream(o.path) << std::string(8192, 'x');
  store = JobStore::Open(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("not a database"), std::string::npos) << store.status();
  EXPECT_NE(store.status().message().find(o.path), std::string::npos) << store.status();
}

TEST_F(JobStoreTest, FullDatabaseRejectsWritesWithoutCorruptionAndRecovers) {
  auto store = Open();
  std::vector<int64_t> acked;
  for (int i = 0; i < 10; ++i) acked.push_back(SubmitOne(store.get(), Input(absl::StrCat("j", i))));
  absl::StatusOr<int64_t> pages = [&] {
    auto conn = sqlite::Connection::Open(Options().path, false, false);
    return (*conn)->QueryInt("PRAGMA page_count");
  }();
  ASSERT_TRUE(pages.ok());
  ASSERT_TRUE(store->SetMaxPageCount(*pages).ok());

  // A batch large enough to need new pages fails whole: all or nothing.
  std::vector<SubmitJobInput> big;
  for (int i = 0; i < 200; ++i) big.push_back(Input(absl::StrCat("big", i)));
  absl::StatusOr<std::vector<SubmitJobResult>> r = store->SubmitJobsAndWait(big);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  absl::StatusOr<ListJobsResult> list = store->ListJobs({});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs.size(), acked.size());

  // Reads go on; space comes back; writes succeed again, same store.
  for (int64_t id : acked) EXPECT_TRUE(store->GetJob(id).ok());
  ASSERT_TRUE(store->SetMaxPageCount(0).ok());
  r = store->SubmitJobsAndWait(big);
  ASSERT_TRUE(r.ok()) << r.status();
  store.reset();
  auto conn = sqlite::Connection::Open(Options().path, false, false);
  absl::StatusOr<sqlite::Statement> check = (*conn)->Prepare("PRAGMA integrity_check");
  ASSERT_TRUE(check.ok());
  ASSERT_TRUE(*check->Step());
  EXPECT_EQ(check->ColumnText(0), "ok");
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
    SubmitJobInput in{Spec(absl::StrCat("j", i), i % 2 ? "odd" : "even",
                           {{"team", i % 3 == 0 ? "nlp" : "vision"}}),
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
  std::promise<absl::StatusOr<v1::Job>> p1;
  store->TransitionJob(id, {v1::RUNNING}, v1::SUCCEEDED, "finished", "done",
                       [&](absl::StatusOr<v1::Job> r) { p1.set_value(std::move(r)); });
  EXPECT_EQ(p1.get_future().get().status().code(), absl::StatusCode::kFailedPrecondition);
  std::promise<absl::StatusOr<v1::Job>> p2;
  store->TransitionJob(id, {v1::QUEUED}, v1::SCHEDULED, "scheduled", "placed",
                       [&](absl::StatusOr<v1::Job> r) { p2.set_value(std::move(r)); });
  absl::StatusOr<v1::Job> job = p2.get_future().get();
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), v1::SCHEDULED);
  EXPECT_EQ(job->last_event_seq(), 2);
}

// A child process submits as fast as it can and reports every acknowledged job id on a
// pipe; the parent kills it with SIGKILL mid-load and checks that every acknowledged job
// is in the database.
TEST_F(JobStoreTest, SigkillMidLoadLosesNoAcknowledgedJob) {
  int ack_pipe[2];
  ASSERT_EQ(pipe(ack_pipe), 0);
  const std::string path = Options().path;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ack_pipe[0]);
    JobStoreOptions o;
    o.path = path;
    std::unique_ptr<JobStore> store = OpenOrExit(o);
    std::mutex write_mu;
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0;; ++i) {
          auto r = store->SubmitJobsAndWait(
              {Input(absl::StrCat("c", t, "-", i), "alice", absl::StrCat("key-", t, "-", i))});
          if (!r.ok()) _exit(4);
          std::string line = absl::StrCat((*r)[0].job.id(), " key-", t, "-", i, "\n");
          std::lock_guard<std::mutex> lock(write_mu);
          if (write(ack_pipe[1], line.data(), line.size()) < 0) _exit(5);
        }
      });
    }
    for (auto& t : threads) t.join();
    _exit(0);
  }
  close(ack_pipe[1]);
  FILE* acks = fdopen(ack_pipe[0], "r");
  std::vector<std::pair<int64_t, std::string>> acknowledged;
  char line[256];
  while (acknowledged.size() < 1500 && fgets(line, sizeof(line), acks) != nullptr) {
    char key[128];
    long long id;
    if (sscanf(line, "%lld %127s", &id, key) == 2) acknowledged.emplace_back(id, key);
  }
  kill(child, SIGKILL);
  // Acks written before the kill but not yet read count too.
  while (fgets(line, sizeof(line), acks) != nullptr) {
    char key[128];
    long long id;
    if (sscanf(line, "%lld %127s", &id, key) == 2) acknowledged.emplace_back(id, key);
  }
  fclose(acks);
  int status;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited on its own with " << WEXITSTATUS(status);
  ASSERT_GE(acknowledged.size(), 1500u);

  auto store = Open();
  for (const auto& [id, key] : acknowledged) {
    absl::StatusOr<v1::Job> job = store->GetJob(id);
    ASSERT_TRUE(job.ok()) << "acknowledged job " << id << " lost: " << job.status();
    EXPECT_EQ(job->idempotency_key(), key);
  }
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

}  // namespace
}  // namespace llamafleet

namespace llamafleet {
namespace {

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

TEST_F(JobStoreTest, DatabaseFilesAreModeSixHundred) {
  auto store = Open();
  SubmitOne(store.get(), Input("a"));
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st;
    ASSERT_EQ(stat((Options().path + suffix).c_str(), &st), 0) << suffix;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << suffix;
  }
}

// A database of schema 3 (ids reusable: no AUTOINCREMENT) migrates: every job keeps its
// row, labels and events (the rebuild cascades nothing), its checkpoint.dir is recorded,
// and the next id follows the largest.
TEST_F(JobStoreTest, MigrationFromSchemaThreeKeepsEveryRowAndStopsIdReuse) {
  const std::string path = Options().path;
  {
    auto store = Open();
    v1::JobSpec spec = Spec("with-dir", "default", {{"team", "nlp"}});
    spec.mutable_checkpoint()->set_dir("/fsx/ck");
    SubmitOne(store.get(), SubmitJobInput{spec, "alice", ""});
    SubmitOne(store.get(), Input("two"));
  }
  // Turn it back into schema 3: jobs without AUTOINCREMENT and without checkpoint_dir.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  auto exec = [&](const std::string& sql) {
    char* error = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (error ? error : "");
    sqlite3_free(error);
  };
  std::string create, indexes;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT type, sql FROM sqlite_master WHERE tbl_name = 'jobs' AND sql IS NOT NULL",
                     -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    const std::string type = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    const std::string sql = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
    if (type == "table") create = sql;
    if (type == "index" && sql.find("checkpoint_dir") == std::string::npos &&
        sql.find("export_dir") == std::string::npos && sql.find("jobs_by_owner_state") == std::string::npos) {
      indexes += sql + ";";
    }
  }
  sqlite3_finalize(st);
  ASSERT_NE(create.find(" AUTOINCREMENT"), std::string::npos);
  create.erase(create.find(" AUTOINCREMENT"), std::string(" AUTOINCREMENT").size());
  create.replace(0, create.find('('), "CREATE TABLE jobs_v3 ");  // the name may be quoted
  exec("PRAGMA foreign_keys=OFF");
  // Schema 3 had neither the checkpoint_dir column nor the later worker_credentials table
  // nor the attempts' nodes and resize_reason columns (schema 6) nor their phases (schema 7)
  // nor the jobs' export_dir (schema 8) nor evaluations and usage (schema 10) nor users'
  // dynamic uids (schema 11) nor deleted jobs' dirs (schema 12).
  exec("BEGIN; DROP TABLE user_identities; DROP INDEX jobs_by_checkpoint_dir; DROP INDEX jobs_by_owner_state; DROP INDEX jobs_by_export_dir;"
       "ALTER TABLE jobs DROP COLUMN export_dir;"
       "DROP TABLE job_evals; DROP TABLE usage_totals; ALTER TABLE checkpoints DROP COLUMN eval_loss;"
       "ALTER TABLE attempts DROP COLUMN gpu_seconds; ALTER TABLE attempts DROP COLUMN cost;"
       "ALTER TABLE jobs DROP COLUMN checkpoint_dir; DROP TABLE worker_credentials;"
       "ALTER TABLE attempts DROP COLUMN nodes; ALTER TABLE attempts DROP COLUMN resize_reason;"
       "DROP TABLE attempt_phases; DROP TABLE deleted_job_dirs;");
  // The columns are gone from `create` too: drop them from the text.
  for (const std::string kColumn : {"export_dir TEXT", "checkpoint_dir TEXT"}) {
    const size_t column = create.find(kColumn);
    ASSERT_NE(column, std::string::npos) << create;
    const size_t comma = create.rfind(',', column);
    create.erase(comma, column + kColumn.size() - comma);
  }
  exec(create + "; INSERT INTO jobs_v3 SELECT * FROM jobs; DROP TABLE jobs;"
                "ALTER TABLE jobs_v3 RENAME TO jobs;" + indexes +
       "DELETE FROM sqlite_sequence WHERE name = 'jobs'; PRAGMA user_version = 3; COMMIT;");
  // Job 2 deleted under schema 3; the migration cannot know of it. Job 1 is the largest.
  exec("PRAGMA foreign_keys=ON; DELETE FROM jobs WHERE id = 2;");
  sqlite3_close(db);

  auto store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<v1::Job> job = store->GetJob(1);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().labels().at("team"), "nlp");
  absl::StatusOr<std::vector<v1::JobEvent>> events = store->GetEvents(1, 0, 10);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 1u) << "events survived the rebuild";
  absl::StatusOr<std::vector<CheckpointDirOwner>> owners = CheckpointDirOwners(*store, "/fsx/ck/step-1");
  ASSERT_TRUE(owners.ok());
  ASSERT_EQ(owners->size(), 1u);
  EXPECT_EQ(owners->at(0).job_id, 1);
  const int64_t next = SubmitOne(store.get(), Input("three"));
  EXPECT_EQ(next, 2) << "the first id after the largest at migration";
  ASSERT_TRUE(store->WriteAndWait(DeleteJobTxn(next)).ok());
  EXPECT_EQ(SubmitOne(store.get(), Input("four")), next + 1);
}

}  // namespace
}  // namespace llamafleet
