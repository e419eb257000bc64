// An attempt's start-up phases in the store: recorded by the attempt's own transactions
// (placed, trainers_started) and by RecordStartupPhaseTxn (the trainer's), each once, read
// back with the attempt, and added to databases of schema 6 by the migration.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"
#include "storage/schema.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;

class AttemptPhasesTest : public testing::StoreTest {
 protected:
  int64_t Submit(JobStore* store) { return SubmitSpec(store, testing::SpecBuilder("phased").Build()); }
  absl::Status Start(JobStore* store, int64_t job, int attempt) {
    AttemptRecord a;
    a.job_id = job;
    a.attempt = attempt;
    a.master_addr = "10.0.0.1";
    a.master_port = 29500;
    a.tasks.push_back(TaskRecord{absl::StrCat(job, "-", attempt, "-0"), 0, "w1", 2, v1::TASK_STARTING});
    return store->WriteAndWait(StartAttemptTxn(std::move(a)));
  }
  static v1::AttemptPhase Phase(const std::string& name, double seconds, const std::string& detail) {
    v1::AttemptPhase p;
    p.set_name(name);
    p.set_seconds(seconds);
    p.set_detail(detail);
    return p;
  }
  std::vector<v1::JobEvent> Events(JobStore* store, int64_t job) {
    absl::StatusOr<std::vector<v1::JobEvent>> events = store->GetEvents(job, 0, 100);
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? *events : std::vector<v1::JobEvent>{};
  }
};

TEST_F(AttemptPhasesTest, EachPhaseIsRecordedOnceWithItsTimeAndReadBackInOrder) {
  std::unique_ptr<JobStore> store = Open();
  const int64_t job = Submit(store.get());
  const absl::Time submitted = clock_.Now();
  clock_.Advance(absl::Seconds(5));  // queued for 5 s
  ASSERT_TRUE(Start(store.get(), job, 1).ok());
  clock_.Advance(absl::Milliseconds(400));
  ASSERT_TRUE(store->WriteAndWait(AttemptRunningTxn(job, 1)).ok());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->WriteAndWait(RecordStartupPhaseTxn(job, 1, Phase("data_ready", 0.9, "tokenized"),
                                                        "attempt 1 start-up: data_ready in 0.90 s")).ok());
  const size_t events_before = Events(store.get(), job).size();
  // A repeat (a worker reporting twice): the first report stands, no second event.
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(store->WriteAndWait(RecordStartupPhaseTxn(job, 1, Phase("data_ready", 7, "repeat"), "again")).ok());
  EXPECT_EQ(Events(store.get(), job).size(), events_before);
  // A phase of another attempt than the job's current one changes nothing.
  ASSERT_TRUE(store->WriteAndWait(RecordStartupPhaseTxn(job, 2, Phase("rendezvous", 1, ""), "stale")).ok());
  v1::AttemptPhase first_step = Phase("first_step", 0.2, "");
  *first_step.mutable_time() = TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(submitted + absl::Seconds(7)));
  ASSERT_TRUE(store->WriteAndWait(RecordStartupPhaseTxn(job, 1, first_step, "first")).ok());

  absl::StatusOr<std::vector<v1::Attempt>> list = ListAttempts(*store, job);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  const v1::Attempt& a = (*list)[0];
  ASSERT_EQ(a.phases_size(), 4) << a.DebugString();
  EXPECT_EQ(a.phases(0).name(), "placed");
  EXPECT_DOUBLE_EQ(a.phases(0).seconds(), 5.0) << "time queued";
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(a.phases(0).time()), absl::ToUnixMicros(submitted + absl::Seconds(5)));
  EXPECT_EQ(a.phases(1).name(), "trainers_started");
  EXPECT_DOUBLE_EQ(a.phases(1).seconds(), 0.4) << "since placed";
  EXPECT_EQ(a.phases(2).name(), "data_ready");
  EXPECT_DOUBLE_EQ(a.phases(2).seconds(), 0.9);
  EXPECT_EQ(a.phases(2).detail(), "tokenized");
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(a.phases(2).time()),
            absl::ToUnixMicros(submitted + absl::Milliseconds(6400)));
  EXPECT_EQ(a.phases(3).name(), "first_step");
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds(a.phases(3).time()), absl::ToUnixMicros(submitted + absl::Seconds(7)))
      << "a phase's own time when it comes with one";

  const std::vector<v1::JobEvent> events = Events(store.get(), job);
  int startup = 0;
  for (const v1::JobEvent& e : events) {
    if (e.type() != "startup") continue;
    ++startup;
    EXPECT_EQ(e.from_state(), v1::RUNNING);
    EXPECT_EQ(e.to_state(), v1::RUNNING) << "a phase leaves the state as it is";
  }
  EXPECT_EQ(startup, 2) << "data_ready and first_step, once each";
  absl::StatusOr<v1::Job> after = store->GetJob(job);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->status_reason(), "training") << "nor the status reason";

  // A note about the attempt (tokenizing progress) is an event that keeps state and reason.
  ASSERT_TRUE(store->WriteAndWait(RecordAttemptNoteTxn(job, 1, "tokenizing", "attempt 1: tokenizing t 100%")).ok());
  EXPECT_EQ(Events(store.get(), job).back().type(), "tokenizing");
  EXPECT_EQ(store->GetJob(job)->status_reason(), "training");
  ASSERT_TRUE(store->WriteAndWait(RecordAttemptNoteTxn(job, 2, "tokenizing", "not current")).ok());
  EXPECT_EQ(Events(store.get(), job).back().reason(), "attempt 1: tokenizing t 100%");

  // The second attempt has phases of its own; deleting the job takes all of them.
  AttemptEnd end{job, 1, AttemptOutcome::kRetryable, "rank 0 exited with code 3", ""};
  ASSERT_TRUE(store->WriteAndWait(EndAttemptTxn(end)).ok());
  absl::StatusOr<v1::Job> requeued = store->GetJob(job);
  ASSERT_TRUE(requeued.ok());
  ASSERT_EQ(requeued->state(), v1::QUEUED) << requeued->status_reason();
  clock_.Advance(absl::Seconds(3));
  ASSERT_TRUE(Start(store.get(), job, 2).ok());
  list = ListAttempts(*store, job);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  ASSERT_EQ((*list)[0].phases_size(), 1);
  EXPECT_EQ((*list)[0].phases(0).name(), "placed");
  EXPECT_DOUBLE_EQ((*list)[0].phases(0).seconds(), 3.0) << "queued since the requeue, not the submission";
  EXPECT_EQ((*list)[1].phases_size(), 4);
  ASSERT_TRUE(store->WriteAndWait(DeleteJobTxn(job)).ok());
  int64_t rows = -1;
  ASSERT_TRUE(store->Read([&](sqlite::Connection& conn) -> absl::Status {
    absl::StatusOr<int64_t> n = conn.QueryInt("SELECT COUNT(*) FROM attempt_phases");
    if (!n.ok()) return n.status();
    rows = *n;
    return absl::OkStatus();
  }).ok());
  EXPECT_EQ(rows, 0) << "the phases went with their job";
}

// A database of schema 6 (before phases) migrates: its attempts keep their rows (with no
// phases) and new phases are recorded.
TEST_F(AttemptPhasesTest, MigrationFromSchemaSixKeepsAttemptsAndAddsPhases) {
  int64_t job = 0;
  {
    std::unique_ptr<JobStore> store = Open();
    job = Submit(store.get());
    ASSERT_TRUE(Start(store.get(), job, 1).ok());
  }
  {
    absl::StatusOr<std::unique_ptr<sqlite::Connection>> conn = sqlite::Connection::Open(Path(), false, false);
    ASSERT_TRUE(conn.ok()) << conn.status();
    // Schema 6: no phases, nor the jobs' export_dir (schema 8), nor evaluations and usage (10),
    // nor users' dynamic uids (11), nor join tokens of worker credentials and deleted jobs'
    // dirs (12).
    ASSERT_TRUE((*conn)->Exec("DROP TABLE attempt_phases; DROP INDEX jobs_by_export_dir; DROP TABLE user_identities;"
                              "ALTER TABLE jobs DROP COLUMN export_dir;"
                              "DROP TABLE job_evals; DROP TABLE usage_totals; ALTER TABLE checkpoints DROP COLUMN eval_loss;"
                              "ALTER TABLE attempts DROP COLUMN gpu_seconds; ALTER TABLE attempts DROP COLUMN cost;"
                              "DROP TABLE deleted_job_dirs; DROP INDEX worker_credentials_by_join_token;"
                              "ALTER TABLE worker_credentials DROP COLUMN join_token_sha256;"
                              "ALTER TABLE jobs DROP COLUMN submitted_spec; ALTER TABLE jobs DROP COLUMN derived_from;"
                              "PRAGMA user_version = 6;")
                    .ok());
  }
  std::unique_ptr<JobStore> store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<v1::Attempt>> list = ListAttempts(*store, job);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].phases_size(), 0) << "recorded before phases existed";
  EXPECT_EQ((*list)[0].tasks_size(), 1);
  ASSERT_TRUE(store->WriteAndWait(AttemptRunningTxn(job, 1)).ok());
  list = ListAttempts(*store, job);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)[0].phases_size(), 1);
  EXPECT_EQ((*list)[0].phases(0).name(), "trainers_started");
  EXPECT_GE(CurrentSchemaVersion(), 10);
}

}  // namespace
}  // namespace llamafleet
