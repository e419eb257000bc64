// The job store's writer queue (storage/writer.h, JobStore::WriteEach): writes that
// belong together share one transaction, each all or nothing; writes a client waits for
// are not held up by a flood of background writes, and background writes are not starved
// by a stream of client writes.

#include <pthread.h>

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"
#include "storage/sqlite.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

SubmitJobInput Input(const std::string& name) {
  return SubmitJobInput{testing::SpecBuilder(name).WithDefaults(), "alice", absl::StrCat("key-", name)};
}

TxnFunction Start(int64_t id, const std::string& worker) {
  AttemptRecord a;
  a.job_id = id;
  a.attempt = 1;
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.tasks.push_back(TaskRecord{absl::StrCat(id, "-1-0"), 0, worker, 8, v1::TASK_STARTING});
  return StartAttemptTxn(std::move(a));
}

class WriterQueueTest : public testing::StoreTest {
 protected:
  std::unique_ptr<JobStore> Open(int max_batch = 1024, int max_background = 256) {
    JobStoreOptions o = Options();
    o.clock = Clock::Real();
    o.max_batch = max_batch;
    o.max_background = max_background;
    return StoreTest::Open(o);
  }

  // Holds the writer inside a transaction until the returned promise is set.
  std::shared_ptr<std::promise<void>> BlockWriter(JobStore& store) {
    auto release = std::make_shared<std::promise<void>>();
    auto entered = std::make_shared<std::promise<void>>();
    std::shared_future<void> go = release->get_future().share();
    store.Write(
        [entered, go](Txn&) {
          entered->set_value();
          go.wait();
          return absl::OkStatus();
        },
        [](absl::Status) {});
    entered->get_future().wait();
    return release;
  }

};

TEST_F(WriterQueueTest, WriteEachIsOneTransactionAndAFailingWriteUndoesOnlyItself) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<SubmitJobResult>> jobs =
      store->SubmitJobsAndWait({Input("a"), Input("b"), Input("c")});
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::vector<int64_t> ids;
  for (const SubmitJobResult& r : *jobs) ids.push_back(std::stoll(r.job.id()));
  std::mutex mu;
  std::vector<std::string> events;
  store->Subscribe([&](const v1::JobEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(absl::StrCat(e.job_id(), ":", e.type()));
  });

  const int64_t transactions = store->transactions_committed();
  std::vector<std::promise<absl::Status>> done(3);
  std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> writes;
  writes.emplace_back(Start(ids[0], "w1"), [&](absl::Status s) { done[0].set_value(s); });
  // The second starts its attempt, then fails: its changes and events must not stay.
  writes.emplace_back(
      [start = Start(ids[1], "w2")](Txn& txn) -> absl::Status {
        if (absl::Status s = start(txn); !s.ok()) return s;
        return absl::InternalError("the second gang cannot start");
      },
      [&](absl::Status s) { done[1].set_value(s); });
  writes.emplace_back(Start(ids[2], "w3"), [&](absl::Status s) { done[2].set_value(s); });
  store->WriteEach(std::move(writes));
  EXPECT_TRUE(done[0].get_future().get().ok());
  EXPECT_EQ(done[1].get_future().get().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(done[2].get_future().get().ok());
  EXPECT_EQ(store->transactions_committed(), transactions + 1) << "one transaction for all";

  EXPECT_EQ(store->GetJob(ids[0])->state(), v1::SCHEDULED);
  EXPECT_EQ(store->GetJob(ids[1])->state(), v1::QUEUED) << "rolled back to its savepoint";
  EXPECT_EQ(store->GetJob(ids[2])->state(), v1::SCHEDULED);
  absl::StatusOr<std::vector<AttemptRecord>> active = LoadActiveAttempts(*store);
  ASSERT_TRUE(active.ok()) << active.status();
  ASSERT_EQ(active->size(), 2u);
  EXPECT_EQ((*active)[0].job_id, ids[0]);
  EXPECT_EQ((*active)[1].job_id, ids[2]);
  // The view of queued jobs followed the commit: only the failed one is still queued.
  absl::StatusOr<QueuedJobsSnapshot> queued = store->SnapshotQueuedJobs();
  ASSERT_TRUE(queued.ok());
  ASSERT_EQ(queued->size(), 1u);
  EXPECT_EQ(queued->begin()->job.id(), JobIdString(ids[1]));
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& e : events) {
    EXPECT_NE(e.rfind(JobIdString(ids[1]) + ":", 0), 0u) << "an event of the undone write: " << e;
  }
  EXPECT_FALSE(events.empty());
}

// Commit order, recorded by background writes' callbacks and event listeners (both run on
// the writer thread, in commit order).
struct Order {
  std::mutex mu;
  std::vector<std::string> done;
  void Add(std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    done.push_back(std::move(what));
  }
  // How many entries starting with `prefix` completed before `what`.
  int Before(const std::string& what, const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (const std::string& d : done) {
      if (d == what) return n;
      if (d.rfind(prefix, 0) == 0) ++n;
    }
    return -1;
  }
};

TEST_F(WriterQueueTest, ASubmissionDoesNotWaitBehindAFloodOfBackgroundWrites) {
  std::unique_ptr<JobStore> store = Open(/*max_batch=*/64, /*max_background=*/8);
  ASSERT_NE(store, nullptr);
  Order order;
  std::shared_ptr<std::promise<void>> release = BlockWriter(*store);
  for (int i = 0; i < 200; ++i) {
    store->Write([](Txn&) { return absl::OkStatus(); },
                 [&order, i](absl::Status) { order.Add(absl::StrCat("bg", i)); });
  }
  // A submission's "submitted" event is published on the writer, in commit order, so
  // that is what places the submission among the background writes.
  const int64_t listener = store->Subscribe([&order](const v1::JobEvent& e) {
    if (e.type() == "submitted") order.Add("submit");
  });
  std::promise<void> submitted;
  store->SubmitJobs({Input("urgent")}, [&](absl::StatusOr<std::vector<SubmitJobResult>> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    submitted.set_value();
  });
  release->set_value();
  submitted.get_future().wait();
  store->Unsubscribe(listener);
  store.reset();  // commits the rest
  // FIFO would have committed all 200 first; it shares the first transaction with 8.
  EXPECT_LE(order.Before("submit", "bg"), 8);
  EXPECT_EQ(order.Before("bg199", "bg"), 199) << "every background write committed, in order";
}

std::string ThreadName() {
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

// Every callback, a submission's too, runs on the writer thread after its commit, in
// commit order: a submission's answer comes after the events of its commit and before
// the next commit's callbacks.
TEST_F(WriterQueueTest, CallbacksRunOnTheWriterInCommitOrder) {
  std::unique_ptr<JobStore> store = Open(/*max_batch=*/64, /*max_background=*/8);
  ASSERT_NE(store, nullptr);
  Order order;
  const int64_t listener = store->Subscribe([&order](const v1::JobEvent& e) {
    if (e.type() == "submitted") order.Add("event");
  });
  std::promise<std::string> alone;
  store->SubmitJobs({Input("alone")}, [&](absl::StatusOr<std::vector<SubmitJobResult>> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    alone.set_value(ThreadName());
  });
  EXPECT_EQ(alone.get_future().get(), "lf-db-writer");

  std::shared_ptr<std::promise<void>> release = BlockWriter(*store);
  std::promise<std::string> busy;
  store->SubmitJobs({Input("busy")}, [&](absl::StatusOr<std::vector<SubmitJobResult>> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    order.Add("submit");
    busy.set_value(ThreadName());
  });
  for (int i = 0; i < 50; ++i) {
    store->Write([](Txn&) { return absl::OkStatus(); },
                 [&order, i](absl::Status) { order.Add(absl::StrCat("bg", i)); });
  }
  release->set_value();
  EXPECT_EQ(busy.get_future().get(), "lf-db-writer");
  store->Unsubscribe(listener);
  store.reset();  // commits the rest
  EXPECT_EQ(order.Before("submit", "event"), 2) << "after its own commit's event";
  EXPECT_EQ(order.Before("bg49", "bg"), 49) << "every background write answered, in order";
  EXPECT_LE(order.Before("submit", "bg"), 8) << "in the first transaction after the block";
}

TEST_F(WriterQueueTest, BatchListenersGetEachCommitsEventsOnceInOrder) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  std::mutex mu;
  std::vector<std::vector<std::string>> commits;  // per batch-listener call: event job ids
  std::vector<std::string> singles;
  const int64_t batches = store->SubscribeBatches([&](const std::vector<const v1::JobEvent*>& events) {
    std::vector<std::string> ids;
    for (const v1::JobEvent* e : events) ids.push_back(e->job_id() + ":" + e->type());
    std::lock_guard<std::mutex> lock(mu);
    commits.push_back(std::move(ids));
  });
  const int64_t single = store->Subscribe([&](const v1::JobEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    singles.push_back(e.job_id() + ":" + e.type());
  });
  // Three jobs in one commit, then a write without events (no call), then one more job.
  std::promise<void> first;
  store->SubmitJobs({Input("a"), Input("b"), Input("c")},
                    [&](absl::StatusOr<std::vector<SubmitJobResult>> r) {
                      EXPECT_TRUE(r.ok()) << r.status();
                      first.set_value();
                    });
  first.get_future().wait();
  std::promise<void> quiet;
  store->Write([](Txn&) { return absl::OkStatus(); }, [&](absl::Status) { quiet.set_value(); });
  quiet.get_future().wait();
  store->Unsubscribe(batches);
  std::promise<void> second;
  store->SubmitJobs({Input("d")}, [&](absl::StatusOr<std::vector<SubmitJobResult>>) { second.set_value(); });
  second.get_future().wait();
  store->Unsubscribe(single);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(commits.size(), 1u) << "one call for the commit; none for the write without events, "
                                   "none after Unsubscribe";
  EXPECT_EQ(commits[0], (std::vector<std::string>{"1:submitted", "2:submitted", "3:submitted"}));
  EXPECT_EQ(singles, (std::vector<std::string>{"1:submitted", "2:submitted", "3:submitted", "4:submitted"}));
}

TEST_F(WriterQueueTest, ASubmissionDoesNotWaitBehindOneHugeWriteEach) {
  // One WriteEach of 100 functions counts as 100 background writes, not one: with at
  // most 8 per transaction it is split, in order, and a submission that arrives behind it
  // shares the first transaction instead of waiting for all 100 (a pass that starts a
  // thousand gangs must not hold every submission for one long transaction).
  std::unique_ptr<JobStore> store = Open(/*max_batch=*/64, /*max_background=*/8);
  ASSERT_NE(store, nullptr);
  Order order;
  std::shared_ptr<std::promise<void>> release = BlockWriter(*store);
  const int64_t transactions = store->transactions_committed();
  std::promise<void> last;
  std::vector<std::pair<TxnFunction, std::function<void(absl::Status)>>> writes;
  for (int i = 0; i < 100; ++i) {
    writes.emplace_back([](Txn&) { return absl::OkStatus(); }, [&order, &last, i](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      order.Add(absl::StrCat("each", i));
      if (i == 99) last.set_value();
    });
  }
  store->WriteEach(std::move(writes));
  const int64_t listener = store->Subscribe([&order](const v1::JobEvent& e) {
    if (e.type() == "submitted") order.Add("submit");
  });
  store->SubmitJobs({Input("urgent")}, [](absl::StatusOr<std::vector<SubmitJobResult>> r) {
    EXPECT_TRUE(r.ok()) << r.status();
  });
  release->set_value();
  last.get_future().wait();
  store->Unsubscribe(listener);
  EXPECT_LE(order.Before("submit", "each"), 8);
  EXPECT_EQ(order.Before("each99", "each"), 99) << "every function committed, in order";
  // The blocker's transaction, then 13 of at most 8 functions (the first with the
  // submission).
  EXPECT_EQ(store->transactions_committed(), transactions + 1 + 13);
}

TEST_F(WriterQueueTest, BackgroundWritesAreNotStarvedByAStreamOfSubmissions) {
  std::unique_ptr<JobStore> store = Open(/*max_batch=*/64, /*max_background=*/8);
  ASSERT_NE(store, nullptr);
  Order order;
  std::shared_ptr<std::promise<void>> release = BlockWriter(*store);
  // Submissions are placed by their "submitted" events (published on the writer in commit
  // order, before the commit's callbacks).
  int submitted = 0;
  // Not unsubscribed: the store is reset below, before `order` and `submitted` go.
  store->Subscribe([&order, &submitted](const v1::JobEvent& e) {
    if (e.type() == "submitted") order.Add(absl::StrCat("submit", submitted++));
  });
  for (int i = 0; i < 300; ++i) {
    store->SubmitJobs({Input(absl::StrCat("job-", i))},
                      [](absl::StatusOr<std::vector<SubmitJobResult>> r) {
                        EXPECT_TRUE(r.ok()) << r.status();
                      });
  }
  std::promise<void> background;
  store->Write([](Txn&) { return absl::OkStatus(); }, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    order.Add("bg");
    background.set_value();
  });
  release->set_value();
  background.get_future().wait();
  store.reset();  // commits the rest
  // 300 submissions arrived before it, more than a transaction holds: it still went into
  // the first transaction after the blocker (FIFO, or submissions first, would have
  // committed all 300 before it).
  EXPECT_LT(order.Before("bg", "submit"), 64);
  EXPECT_EQ(order.Before("submit299", "submit"), 299);
}

// Submissions batched into one transaction that fails as a whole (the database fills up:
// SQLite rolls the whole transaction back) are retried one by one: each caller learns its
// own write's fate, the ones that fit are stored, and the writer counts and logs the
// retried transaction.
TEST_F(WriterQueueTest, ATransactionThatFailsWholeIsRetriedWriteByWrite) {
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->SubmitJobsAndWait({Input("first")}).ok());
  absl::StatusOr<int64_t> pages = [&]() -> absl::StatusOr<int64_t> {
    auto conn = sqlite::Connection::Open(Path(), false, false);
    if (!conn.ok()) return conn.status();
    return (*conn)->QueryInt("PRAGMA page_count");
  }();
  ASSERT_TRUE(pages.ok()) << pages.status();
  // Room for a few more jobs, not for all of them at once.
  ASSERT_TRUE(store->SetMaxPageCount(*pages + 3).ok());
  EXPECT_EQ(store->writer_stats().batches_retried_alone, 0);

  constexpr int kJobs = 60;
  std::shared_ptr<std::promise<void>> release = BlockWriter(*store);
  std::vector<std::promise<absl::Status>> done(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    v1::JobSpec spec = Input(absl::StrCat("j", i)).spec;
    // ~2 KB each: 60 of them need far more than 3 pages.
    (*spec.mutable_labels())["padding"] = std::string(2000, 'x');
    SubmitJobInput input{std::move(spec), "alice", absl::StrCat("key-j", i)};
    store->SubmitJobs({std::move(input)}, [&done, i](absl::StatusOr<std::vector<SubmitJobResult>> r) {
      done[i].set_value(r.status());
    });
  }
  const int64_t transactions = store->writer_stats().transactions;
  release->set_value();
  int ok = 0, full = 0;
  for (int i = 0; i < kJobs; ++i) {
    const absl::Status s = done[i].get_future().get();
    if (s.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      ++full;
    }
  }
  EXPECT_GT(ok, 0) << "the jobs that fit are stored";
  EXPECT_GT(full, 0) << "the ones that do not fit are refused";
  const JobStore::WriterStats stats = store->writer_stats();
  EXPECT_EQ(stats.batches_retried_alone, 1);
  EXPECT_GE(stats.transactions - transactions, ok) << "a transaction per stored job";
  absl::StatusOr<ListJobsResult> list = store->ListJobs({});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(static_cast<int>(list->jobs.size()), 1 + ok);
}

}  // namespace
}  // namespace llamafleet
