#include <algorithm>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "clients/cli/log_record.h"
#include "clients/cli/output.h"
#include "clients/cli/progress.h"
#include "clients/cli/usage_output.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "worker/trainer_events.h"

namespace llamafleet::cli {
namespace {

google::protobuf::Timestamp At(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  return t;
}

// Field violations as the coordinator sends them: {field, description} pairs.
std::vector<v1::FieldViolation> Violations(
    const std::vector<std::pair<std::string, std::string>>& fields) {
  std::vector<v1::FieldViolation> out;
  for (const auto& [field, description] : fields) {
    v1::FieldViolation& v = out.emplace_back();
    v.set_field(field);
    v.set_description(description);
  }
  return out;
}

TEST(SpecErrorsForFileTest, SingleDocumentDropsTheRequestPrefix) {
  EXPECT_EQ(SpecErrorsForFile(Violations({{"spec.training.lr", "must be > 0 (got -1)"},
                                          {"spec.resources.nodes", "must be >= 1 (got 0)"}})),
            "training.lr must be > 0 (got -1); resources.nodes must be >= 1 (got 0)");
}

TEST(SpecErrorsForFileTest, BatchNamesTheDocumentCountingFromOne) {
  EXPECT_EQ(SpecErrorsForFile(Violations({{"jobs[1].spec.training.lr", "must be > 0"},
                                          {"jobs[0].idempotency_key", "must be printable ASCII"}})),
            "document 2: training.lr must be > 0; document 1: idempotency_key must be "
            "printable ASCII");
  EXPECT_EQ(SpecErrorsForFile(Violations({{"jobs[1].spec.training.lr", "must be > 0"}}),
                              {"a.yaml", "b.yaml document 2"}),
            "b.yaml document 2: training.lr must be > 0");
}

TEST(SpecErrorsForFileTest, PlacesFieldsOnTheLinesOfTheirFile) {
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(
      "name: a\nmodel: {path: /m}\ndata: {train_path: /d}\n---\nname: b\nmodel: {path: /m}\n"
      "data: {train_path: /d}\ntraining:\n  lr: -1\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::vector<JobSource> sources = {{"j.yaml", (*parsed)[0].positions},
                                          {"j.yaml", (*parsed)[1].positions}};
  // A field left to its default points at its written parent; one with neither keeps
  // the document's name.
  EXPECT_EQ(SpecErrorsForFile(Violations({{"jobs[1].spec.training.lr", "must be > 0"},
                                          {"jobs[0].spec.resources.nodes", "must be >= 1"},
                                          {"jobs[1].idempotency_key", "bad"}}),
                              {}, sources),
            "j.yaml:9: training.lr must be > 0; document 1: resources.nodes must be >= 1; "
            "document 2: idempotency_key bad");
  EXPECT_EQ(SpecErrorsForFile(Violations({{"spec.data.train_path", "must be absolute"}}), {},
                              {sources[0]}),
            "j.yaml:3: data.train_path must be absolute");
}

TEST(SpecErrorsForFileTest, LeavesOtherFieldsAsNamed) {
  EXPECT_EQ(SpecErrorsForFile(Violations({{"jobs[x].spec.name", "bad"}})), "jobs[x].spec.name bad");
  EXPECT_EQ(SpecErrorsForFile(Violations({{"idempotency_key", "bad"}})), "idempotency_key bad");
}

TEST(FormatAgeTest, UsesTheLargestReadableUnit) {
  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  EXPECT_EQ(FormatAge(At(1'000'000 - 5), now), "5s");
  EXPECT_EQ(FormatAge(At(1'000'000 - 600), now), "10m");
  EXPECT_EQ(FormatAge(At(1'000'000 - 3 * 3600), now), "3h");
  EXPECT_EQ(FormatAge(At(1'000'000 - 3 * 86400), now), "3d");
  EXPECT_EQ(FormatAge(At(1'000'000 + 30), now), "0s");  // clock skew: never negative
  EXPECT_EQ(FormatAge(google::protobuf::Timestamp(), now), "-");
}

TEST(FormatTableTest, AlignsColumnsAndTrimsTrailingSpace) {
  EXPECT_EQ(FormatTable({{"ID", "NAME"}, {"10", "a"}, {"7", ""}}), "ID   NAME\n10   a\n7\n");
}

TEST(EventLineTest, ShowsSeqTimeTransitionAndReason) {
  v1::JobEvent e;
  e.set_seq(3);
  *e.mutable_time() = At(1'796'000'000);
  e.set_from_state(v1::QUEUED);
  e.set_to_state(v1::CANCELLED);
  e.set_reason("cancelled by alice:\nbecause");
  EXPECT_EQ(EventLine(e), "3 2026-11-30T00:53:20Z QUEUED -> CANCELLED cancelled by alice: because");
  e.set_from_state(v1::JOB_STATE_UNSPECIFIED);
  e.set_reason("");
  EXPECT_EQ(EventLine(e), "3 2026-11-30T00:53:20Z - -> CANCELLED");
  e.set_from_state(v1::RUNNING);
  e.set_to_state(v1::RUNNING);
  e.set_reason("rendezvous done");
  EXPECT_EQ(EventLine(e), "3 2026-11-30T00:53:20Z RUNNING rendezvous done") << "no transition";
}

TEST(JobsTableTest, ShortensLongReasonsUnlessWide) {
  v1::Job job;
  job.set_id("1");
  job.mutable_spec()->set_name("n");
  job.set_state(v1::QUEUED);
  job.set_status_reason(std::string(100, 'r'));
  const std::string narrow = JobsTable({job}, /*wide=*/false, absl::Now());
  const std::string wide = JobsTable({job}, /*wide=*/true, absl::Now());
  EXPECT_NE(narrow.find("..."), std::string::npos);
  EXPECT_NE(wide.find(std::string(100, 'r')), std::string::npos);
  EXPECT_EQ(narrow.rfind("ID   NAME   OWNER", 0), 0u) << narrow;
}

TEST(JobsTableTest, WideShowsEachSweptParameterAsAColumn) {
  std::vector<v1::Job> points(2);
  for (int i = 0; i < 2; ++i) {
    points[i].set_id(std::to_string(i + 1));
    points[i].mutable_spec()->set_name("lr-" + std::to_string(i));
    v1::SweepPoint* p = points[i].mutable_spec()->mutable_sweep()->mutable_point();
    p->set_sweep("lr");
    p->set_index(i);
    p->set_points(2);
    p->add_values(i == 0 ? "training.lr=1e-4" : "training.lr=3e-4");
    p->add_values("training.seed=7");
  }
  const std::string wide = JobsTable(points, /*wide=*/true, absl::Now());
  EXPECT_EQ(wide.rfind("ID   NAME   TRAINING.LR   TRAINING.SEED   OWNER", 0), 0u) << wide;
  EXPECT_TRUE(absl::StrContains(wide, "2    lr-1   3e-4          7")) << wide;
  EXPECT_FALSE(absl::StrContains(JobsTable(points, /*wide=*/false, absl::Now()), "TRAINING.LR"));
}

// The tiny preset's parameters with a vocabulary of `v`: 2 layers of hidden 64 (norms,
// attention 4 x 64 x 64, MLP 3 x 64 x 176), an untied embedding and head, the final norm.
int64_t TinyParameters(int64_t v) {
  return 2 * v * 64 + 2 * (128 + 4 * 64 * 64 + 3 * 64 * 176) + 64;
}

TEST(FinetuningLineTest, ATinyPresetsCountSaysWhichVocabularyItAssumes) {
  v1::Job job;
  job.mutable_spec()->mutable_model()->set_preset("tiny");
  job.mutable_memory_estimate()->set_parameters(TinyParameters(32000));
  job.mutable_memory_estimate()->set_trainable_parameters(TinyParameters(32000));
  EXPECT_EQ(FinetuningLine(job),
            "full: 4.2M trainable of 4.2M parameters (100%), counted with the preset's "
            "32,000-piece vocabulary (the trainer uses the tokenizer's, which the coordinator did "
            "not read)");
  // Counted with the tokenizer's vocabulary (the coordinator read it).
  job.mutable_memory_estimate()->set_parameters(TinyParameters(3261));
  job.mutable_memory_estimate()->set_trainable_parameters(TinyParameters(3261));
  EXPECT_EQ(FinetuningLine(job),
            "full: 518080 trainable of 518080 parameters (100%), counted with the tokenizer's "
            "3,261-piece vocabulary");
  // Token ids: the trainer keeps the preset's vocabulary.
  job.mutable_spec()->mutable_data()->set_format(v1::TOKENS);
  EXPECT_FALSE(absl::StrContains(FinetuningLine(job), "vocabulary"));
  job.mutable_spec()->mutable_data()->clear_format();
  job.mutable_spec()->mutable_model()->set_preset("llama2-7b");
  EXPECT_FALSE(absl::StrContains(FinetuningLine(job), "vocabulary"));
}

TEST(IndentTest, IndentsNonEmptyLinesOnly) {
  EXPECT_EQ(Indent("a:\n  b\n\nc\n", 2), "  a:\n    b\n\n  c\n");
}

TEST(FormatBytesTest, BinaryUnitsWithOneDecimal) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 30), "5.0 GiB");
  EXPECT_EQ(FormatBytes(-1), "-");
}

TEST(FormatCountTest, SeparatesThousands) {
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(1234), "1,234");
  EXPECT_EQ(FormatCount(1234567), "1,234,567");
  EXPECT_EQ(FormatCount(-1234), "-1,234");
  EXPECT_EQ(FormatCount(INT64_MIN), "-9,223,372,036,854,775,808");
}

TEST(FormatEtaTest, TwoUnitsAtMost) {
  EXPECT_EQ(FormatEta(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatEta(absl::Seconds(65)), "1m05s");
  EXPECT_EQ(FormatEta(absl::Hours(2) + absl::Minutes(3) + absl::Seconds(59)), "2h03m");
  EXPECT_EQ(FormatEta(absl::Hours(76)), "3d04h");
  EXPECT_EQ(FormatEta(absl::Milliseconds(300)), "1s");
  EXPECT_EQ(FormatEta(absl::ZeroDuration()), "0s");
  EXPECT_EQ(FormatEta(absl::Seconds(-5)), "0s");
}

v1::Job QueuedJob() {
  v1::Job job;
  job.set_id("7");
  job.mutable_spec()->set_name("big");
  job.mutable_spec()->set_queue("research");
  job.set_state(v1::QUEUED);
  job.set_status_reason("submitted");
  job.mutable_pending()->set_code("LARGER_THAN_CLUSTER");
  job.mutable_pending()->set_message("needs 3 nodes with 1 free GPUs; 2 match");
  job.mutable_pending()->set_queue_position(2);
  return job;
}

TEST(JobsTableTest, QueuedJobsShowTheSchedulersExplanation) {
  v1::Job queued = QueuedJob();
  *queued.mutable_pending()->mutable_estimated_start() = At(1'796'000'000);
  v1::Job running = queued;
  running.set_state(v1::RUNNING);
  running.set_status_reason("running on w1, w2");  // a stale pending must not show
  const std::string narrow = JobsTable({queued, running}, /*wide=*/false, absl::Now());
  EXPECT_TRUE(absl::StrContains(narrow, "QUEUED    -     needs 3 nodes with 1 free GPUs; 2 match"))
      << narrow;
  EXPECT_TRUE(absl::StrContains(narrow, "running on w1, w2")) << narrow;
  EXPECT_FALSE(absl::StrContains(narrow, "submitted")) << narrow;
  const std::string wide = JobsTable({queued}, /*wide=*/true, absl::Now());
  EXPECT_TRUE(absl::StrContains(wide, "POSITION   EST-START")) << wide;
  EXPECT_TRUE(absl::StrContains(wide, "2          2026-11-30T00:53:20Z   needs 3 nodes")) << wide;
}

TEST(WorkersTableTest, GpuAndCpuWorkers) {
  v1::WorkerInfo gpu;
  gpu.set_name("p5-a");
  gpu.set_state(v1::WORKER_READY);
  for (int i = 0; i < 8; ++i)
    gpu.mutable_inventory()->add_gpus()->set_model("NVIDIA H100 80GB HBM3");
  gpu.mutable_inventory()->set_efa_devices(32);
  gpu.mutable_inventory()->set_instance_type("p5.48xlarge");
  gpu.mutable_inventory()->set_host("ip-10-0-0-1");
  (*gpu.mutable_inventory()->mutable_labels())["zone"] = "a";
  (*gpu.mutable_inventory()->mutable_labels())["pool"] = "train";
  gpu.set_gpus_allocated(8);
  gpu.add_running_task_ids("3-1-0");
  gpu.add_running_task_ids("4-2-1");
  *gpu.mutable_last_heartbeat() = At(1'000'000 - 2);
  gpu.add_gpus()->set_gpu_util(50);
  gpu.add_gpus()->set_gpu_util(100);
  v1::WorkerInfo cpu;
  cpu.set_name("cpu-1");
  cpu.set_state(v1::WORKER_LOST);
  cpu.mutable_inventory()->set_cpu_ranks(2);

  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  EXPECT_EQ(WorkersTable({gpu, cpu}, /*wide=*/false, now),
            "NAME    STATE   SLOTS   GPU-MODEL               EFA   INSTANCE      LAST-HEARTBEAT"
            "   TASKS\n"
            "p5-a    READY   8/8     NVIDIA H100 80GB HBM3   32    p5.48xlarge   2s ago"
            "           3-1-0,4-2-1\n"
            "cpu-1   LOST    0/2     cpu                     0     -             -"
            "                -\n");
  const std::string wide = WorkersTable({gpu}, /*wide=*/true, now);
  EXPECT_TRUE(absl::StrContains(wide, "ip-10-0-0-1")) << wide;
  EXPECT_TRUE(absl::StrContains(wide, "75%")) << wide;
  EXPECT_TRUE(absl::StrContains(wide, "pool=train,zone=a")) << wide;
}

TEST(WorkersTableTest, StateSaysWhatTheGpusShow) {
  v1::WorkerInfo w;
  w.set_name("p5-a");
  w.set_state(v1::WORKER_READY);
  w.add_gpus()->set_clock_throttle_reasons(0x5);  // idle at the power cap: normal
  v1::GpuSample* hot = w.add_gpus();
  hot->set_index(3);
  hot->set_clock_throttle_reasons(0xc0);
  v1::GpuSample* gone = w.add_gpus();
  gone->set_index(5);
  gone->set_gone(true);
  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  EXPECT_TRUE(absl::StrContains(WorkersTable({w}, false, now), "READY (GPU 3 throttled: hw_thermal,power_brake; GPU 5 gone)"))
      << WorkersTable({w}, false, now);
  // Drained: the drain's reason, not the samples.
  w.set_state(v1::WORKER_DRAINING);
  w.mutable_drain()->set_source("gpu-health");
  w.mutable_drain()->set_reason("GPU 5: gone (the worker no longer finds it)");
  *w.mutable_drain()->mutable_since() = At(1'000'000 - 60);
  const std::string table = WorkersTable({w}, false, now);
  EXPECT_TRUE(absl::StrContains(table, "DRAINING (gpu-health 60s: GPU 5: gone")) << table;
  EXPECT_FALSE(absl::StrContains(table, "throttled")) << table;
}

TEST(WorkersTableTest, ANewlineInAGpuModelCannotForgeARow) {
  v1::WorkerInfo w;
  w.set_name("gpu-1");
  w.set_state(v1::WORKER_READY);
  w.mutable_inventory()->add_gpus()->set_model("A100\nfake-worker   READY   8/8\tx\x1b[2J");
  const std::string table = WorkersTable({w}, /*wide=*/false, absl::FromUnixSeconds(0));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2) << table;
  EXPECT_TRUE(absl::StrContains(table, "A100\\nfake-worker   READY   8/8\\tx\\x1b[2J")) << table;
}

TEST(FormatTableTest, EveryCellIsEscapedBeforeItIsMeasured) {
  EXPECT_EQ(FormatTable({{"A", "B"}, {"x\ny", "1"}, {"\xc2\x9b", "2"}}),
            "A        B\n"
            "x\\ny     1\n"
            "\\u009b   2\n");
}

v1::Checkpoint MakeCheckpoint(int64_t step, int attempt, double loss) {
  v1::Checkpoint c;
  c.set_job_id("3");
  c.set_step(step);
  c.set_attempt(attempt);
  c.set_loss(loss);
  c.set_bytes(3 << 20);
  c.set_path("/ckpt/step-" + std::to_string(step));
  *c.mutable_time() = At(1'796'000'000);
  return c;
}

TEST(CheckpointsTableTest, OneRowPerCheckpointInOrder) {
  v1::Checkpoint evaluated = MakeCheckpoint(20, 2, 1.5);
  evaluated.set_eval_loss(1.75);
  EXPECT_EQ(CheckpointsTable({evaluated, MakeCheckpoint(10, 1, 2.25)}),
            "STEP   ATTEMPT   LOSS     EVAL-LOSS   SIZE      TIME                   PATH\n"
            "20     2         1.5000   1.7500      3.0 MiB   2026-11-30T00:53:20Z   /ckpt/step-20\n"
            "10     1         2.2500   -           3.0 MiB   2026-11-30T00:53:20Z   /ckpt/step-10\n");
}

// -o wide shows where training is: steps, the train loss and the eval loss side by side
// (overfitting shows as the two drifting apart).
TEST(JobsTableTest, WideShowsTrainAndEvalLoss) {
  v1::Job job;
  job.set_id("7");
  job.set_state(v1::RUNNING);
  v1::JobMetricsPoint* m = job.mutable_latest_metrics();
  m->set_step(40);
  m->set_total_steps(100);
  m->set_loss(2.18);
  m->set_eval_loss(5.7);
  const std::string wide = JobsTable({job}, /*wide=*/true, absl::Now());
  EXPECT_NE(wide.find("EVAL-LOSS"), std::string::npos) << wide;
  EXPECT_NE(wide.find("40/100"), std::string::npos) << wide;
  EXPECT_NE(wide.find("2.1800"), std::string::npos) << wide;
  EXPECT_NE(wide.find("5.7000"), std::string::npos) << wide;
}

// Each attempt's gang size and the resize that started it; NODES falls back to
// the task count for records from before schema 6.
TEST(AttemptsTableTest, ShowsGangSizeAndResize) {
  v1::Attempt grown;
  grown.set_attempt(2);
  grown.set_state(v1::ATTEMPT_ACTIVE);
  grown.set_nodes(3);
  grown.set_resize_reason("resized 2 \u2192 3 nodes: capacity returned (w3)");
  *grown.mutable_start_time() = At(1'796'000'000);
  for (const char* w : {"w1", "w2", "w3"}) grown.add_tasks()->set_worker(w);
  v1::Attempt first;
  first.set_attempt(1);
  first.set_state(v1::ATTEMPT_STOPPED);
  *first.mutable_start_time() = At(1'796'000'000 - 60);
  *first.mutable_end_time() = At(1'796'000'000 - 1);
  first.set_reason("resizing 2 \u2192 3 nodes: capacity returned (w3); stopping after checkpoint step 8");
  for (const char* w : {"w1", "w2"}) first.add_tasks()->set_worker(w);
  const std::string out = AttemptsTable({grown, first});
  EXPECT_TRUE(absl::StrContains(out, "ATTEMPT   STATE     NODES   WORKERS    STARTED")) << out;
  EXPECT_TRUE(absl::StrContains(out, "2         ACTIVE    3       w1,w2,w3   2026-11-30T00:53:20Z   -  ")) << out;
  EXPECT_TRUE(absl::StrContains(out, "resized 2 \u2192 3 nodes: capacity returned (w3)")) << out;
  EXPECT_TRUE(absl::StrContains(out, "1         STOPPED   2       w1,w2      2026-11-30T00:52:20Z   2026-11-30T00:53:19Z")) << out;
  v1::Job job;
  job.set_id("3");
  job.set_state(v1::RUNNING);
  const std::string described = DescribeJob(job, {}, {}, absl::FromUnixSeconds(1'796'000'000), {grown, first});
  EXPECT_TRUE(absl::StrContains(described, "Attempts:\n  ATTEMPT   STATE")) << described;
}

TEST(AttemptsTableTest, StartupColumnAndPhaseTables) {
  v1::Attempt a;
  a.set_attempt(2);
  a.set_state(v1::ATTEMPT_ACTIVE);
  *a.mutable_start_time() = At(1'796'000'000);
  auto phase = [&](const char* name, int64_t ms_after_placed, double seconds, const char* detail) {
    v1::AttemptPhase* p = a.add_phases();
    p->set_name(name);
    *p->mutable_time() = google::protobuf::util::TimeUtil::MillisecondsToTimestamp(int64_t{1'796'000'000'000} +
                                                                                  ms_after_placed);
    p->set_seconds(seconds);
    p->set_detail(detail);
  };
  v1::Attempt never = a;  // a record older than phases
  phase("placed", 0, 12.5, "");
  phase("trainers_started", 400, 0.4, "");
  phase("data_ready", 1500, 1.1, "token cache hit");
  v1::Attempt starting = a;
  phase("rendezvous", 1520, 0.02, "2 ranks");
  phase("weights_loaded", 1700, 0.18, "resumed from step 40");
  phase("first_step", 2230, 0.53, "");
  std::string out = AttemptsTable({a, starting, never});
  EXPECT_TRUE(absl::StrContains(out, "STARTED                ENDED   STARTUP         CLASS")) << out;
  EXPECT_TRUE(absl::StrContains(out, "2026-11-30T00:53:20Z   -       2.23 s          -")) << out;
  EXPECT_TRUE(absl::StrContains(out, "2026-11-30T00:53:20Z   -       at data_ready   -")) << out;
  EXPECT_TRUE(absl::StrContains(out, "2026-11-30T00:53:20Z   -       -               -")) << out;
  out = AttemptPhasesTable(a);
  EXPECT_EQ(out,
            "PHASE              AT        TOOK      DETAIL\n"
            "placed             +0.00 s   12.50 s   time in the queue\n"
            "trainers_started   +0.40 s   0.40 s    every rank running\n"
            "data_ready         +1.50 s   1.10 s    token cache hit\n"
            "rendezvous         +1.52 s   0.02 s    2 ranks\n"
            "weights_loaded     +1.70 s   0.18 s    resumed from step 40\n"
            "first_step         +2.23 s   0.53 s    -\n");
  out = AttemptsSection({a, never});
  EXPECT_TRUE(absl::StrContains(out, "Start-up of attempt 2 (AT: since placed; TOOK: the phase itself):\n  PHASE "))
      << out;
  EXPECT_EQ(out.find("Start-up of attempt 2"), out.rfind("Start-up of attempt 2")) << "none for the old record";
}

TEST(DescribeJobTest, ARunOfTokenizingEventsShowsItsLast) {
  auto event = [](int64_t seq, const char* type, const char* reason) {
    v1::JobEvent e;
    e.set_seq(seq);
    e.set_type(type);
    e.set_from_state(v1::SCHEDULED);
    e.set_to_state(v1::SCHEDULED);
    e.set_reason(reason);
    return e;
  };
  v1::Job job;
  job.set_id("7");
  job.set_state(v1::RUNNING);
  const std::string out = DescribeJob(
      job,
      {event(2, "scheduled", "attempt 1 placed"), event(3, "tokenizing", "attempt 1: tokenizing t.jsonl 10%"),
       event(4, "tokenizing", "attempt 1: tokenizing t.jsonl 40%"),
       event(5, "tokenizing", "attempt 1: tokenizing t.jsonl 100%"), event(6, "startup", "data_ready"),
       event(7, "tokenizing", "attempt 1: tokenizing e.jsonl 100%")},
      {}, absl::FromUnixSeconds(1'796'000'000));
  EXPECT_FALSE(absl::StrContains(out, "10%")) << out;
  EXPECT_FALSE(absl::StrContains(out, "40%")) << out;
  EXPECT_TRUE(absl::StrContains(out, "t.jsonl 100%")) << out;
  EXPECT_TRUE(absl::StrContains(out, "e.jsonl 100%")) << out;
}

TEST(DescribeJobTest, PendingSectionForAQueuedJob) {
  v1::Job job = QueuedJob();
  job.mutable_spec()->mutable_run_policy()->set_max_restarts(3);
  const absl::Time now = absl::FromUnixSeconds(1'796'000'000);
  *job.mutable_pending()->mutable_estimated_start() = At(1'796'000'000 + 300);
  const std::string out = DescribeJob(job, {}, {}, now);
  EXPECT_TRUE(absl::StrContains(out, "Restarts:          0 of 3\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Workers:           -\n")) << out;
  EXPECT_TRUE(absl::StrContains(out,
                                "Pending:\n"
                                "  Code:              LARGER_THAN_CLUSTER\n"
                                "  Message:           needs 3 nodes with 1 free GPUs; 2 match\n"
                                "  Queue position:    2 in queue research\n"
                                "  Estimated start:   2026-11-30T00:58:20Z (in 5m00s)\n"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "Checkpoints:\n  <none>\n")) << out;
  EXPECT_FALSE(absl::StrContains(out, "Latest metrics")) << out;

  job.mutable_pending()->clear_estimated_start();
  EXPECT_TRUE(absl::StrContains(DescribeJob(job, {}, {}, now), "Estimated start:   unknown\n"));
  // Once it runs, an old explanation is history, not news.
  job.set_state(v1::RUNNING);
  EXPECT_FALSE(absl::StrContains(DescribeJob(job, {}, {}, now), "Pending:"));
}

TEST(DescribeJobTest, RunningJobShowsWorkersMetricsAndCheckpoints) {
  v1::Job job;
  job.set_id("3");
  job.set_state(v1::RUNNING);
  job.set_restarts(1);
  job.add_workers("w1");
  job.add_workers("w2");
  v1::JobMetricsPoint* m = job.mutable_latest_metrics();
  m->set_step(120);
  m->set_total_steps(200);
  m->set_loss(2.3141);
  m->set_lr(3e-4);
  m->set_tokens_per_second(1234.4);
  m->set_mfu(0.412);
  m->set_attempt(2);
  *m->mutable_time() = At(1'796'000'000 - 5);
  const std::string out =
      DescribeJob(job, {}, {MakeCheckpoint(100, 2, 2.4)}, absl::FromUnixSeconds(1'796'000'000));
  EXPECT_TRUE(absl::StrContains(out, "Restarts:          1\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Workers:           w1, w2\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Latest metrics:\n  Step:            120/200\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "  Loss:            2.3141\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "  Tokens/s:        1,234\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "  MFU:             41.2%\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "  Reported:        2026-11-30T00:53:15Z (5s ago)\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Checkpoints:\n  STEP   ATTEMPT")) << out;
  EXPECT_TRUE(absl::StrContains(out, "  100    2         2.4000   -           3.0 MiB")) << out;
  EXPECT_FALSE(absl::StrContains(out, "Pending:")) << out;

  // An evaluated job that stopped early: the eval loss beside the training loss, the
  // reason as the job's status.
  m->set_eval_loss(2.5);
  m->set_eval_step(110);
  m->set_best_eval_loss(2.25);
  job.set_state(v1::SUCCEEDED);
  job.set_status_reason("stopped early at step 120: eval loss did not improve by 0.01 for 3 evaluations");
  const std::string stopped = DescribeJob(job, {}, {}, absl::FromUnixSeconds(1'796'000'000));
  EXPECT_TRUE(absl::StrContains(stopped, "  Eval loss:       2.5000 after step 110 (best 2.2500)\n")) << stopped;
  EXPECT_TRUE(absl::StrContains(stopped, "stopped early at step 120: eval loss did not improve by 0.01 for 3 evaluations"))
      << stopped;
}

TEST(DescribeJobTest, AReasonOfSeveralLinesKeepsThemAsWrittenUpToABound) {
  // A data file's bad lines as the trainer lists them (worker/trainer/bad_lines.h).
  const std::string reason =
      "task 2-1-1 on worker-2 failed: rank 1 exited with code 1: INVALID_ARGUMENT: /d/bad.jsonl: 3 "
      "bad lines:\n"
      "  /d/bad.jsonl:4: missing field \"completion\"\n"
      "  /d/bad.jsonl:5: not a JSON object\n"
      "  /d/bad.jsonl:9: field \"prompt\" must be a string";
  v1::Job job;
  job.set_id("2");
  job.set_state(v1::FAILED);
  job.set_status_reason(reason);
  v1::Attempt attempt;
  attempt.set_attempt(1);
  attempt.set_state(v1::ATTEMPT_FAILED);
  attempt.set_reason(reason);
  v1::JobEvent failed;
  failed.set_seq(9);
  failed.set_type("failed");
  failed.set_reason(reason);
  const std::string out =
      DescribeJob(job, {failed}, {}, absl::FromUnixSeconds(1'796'000'000), {attempt});
  const std::string indent(19, ' ');  // under the fields' values
  EXPECT_TRUE(absl::StrContains(
      out,
      absl::StrCat("Reason:            task 2-1-1 on worker-2 failed: rank 1 exited with code 1: "
                   "INVALID_ARGUMENT: /d/bad.jsonl: 3 bad lines:\n",
                   indent, "  /d/bad.jsonl:4: missing field \"completion\"\n", indent,
                   "  /d/bad.jsonl:5: not a JSON object\n", indent,
                   "  /d/bad.jsonl:9: field \"prompt\" must be a string\n")))
      << out;
  // Table cells stay one line: the first, and how many follow.
  EXPECT_TRUE(absl::StrContains(out, "/d/bad.jsonl: 3 bad lines: (+3 lines)\n")) << out;
  EXPECT_FALSE(absl::StrContains(out, "bad lines:   /d/bad.jsonl:4")) << "folded:\n" << out;

  // A longer reason is cut after 25 lines, saying how many are left out.
  std::string many = "first";
  for (int i = 1; i < 40; ++i) absl::StrAppend(&many, "\n  line ", i);
  job.set_status_reason(many);
  const std::string cut = DescribeJob(job, {}, {}, absl::FromUnixSeconds(1'796'000'000));
  EXPECT_TRUE(
      absl::StrContains(cut, absl::StrCat(indent, "  line 24\n", indent,
                                          "... 15 more lines (-o json has the whole reason)\n")))
      << cut;
  EXPECT_FALSE(absl::StrContains(cut, "line 25")) << cut;
}

TEST(DescribeJobTest, TensorParallelJobShowsTheDegreeAndTheDataParallelWorld) {
  v1::Job job;
  job.set_id("4");
  job.set_state(v1::QUEUED);
  job.mutable_spec()->mutable_resources()->set_nodes(4);
  job.mutable_spec()->mutable_resources()->set_gpus_per_node(8);
  const absl::Time now = absl::FromUnixSeconds(1'796'000'000);
  EXPECT_EQ(ParallelismLine(job.spec()), "");
  EXPECT_FALSE(absl::StrContains(DescribeJob(job, {}, {}, now), "Parallelism:")) << "data parallel only";
  job.mutable_spec()->mutable_parallelism()->set_tensor_parallel(1);
  EXPECT_EQ(ParallelismLine(job.spec()), "");
  job.mutable_spec()->mutable_parallelism()->set_tensor_parallel(8);
  EXPECT_EQ(ParallelismLine(job.spec()), "tensor parallel 8 x data parallel 4 (32 ranks)");
  const std::string out = DescribeJob(job, {}, {}, now);
  EXPECT_TRUE(absl::StrContains(out, "Finetuning:        full\nParallelism:       tensor parallel 8 x data parallel 4 "
                                     "(32 ranks)\nMemory estimate:"))
      << out;
}

v1::JobMetricsPoint Point(int attempt, int64_t step, int64_t total, int64_t seconds) {
  v1::JobMetricsPoint p;
  p.set_attempt(attempt);
  p.set_step(step);
  p.set_total_steps(total);
  *p.mutable_time() = At(seconds);
  return p;
}

TEST(EtaEstimatorTest, StepRateOfTheCurrentAttempt) {
  EtaEstimator eta;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(eta.Remaining(t0).has_value());
  eta.Observe(Point(1, 10, 110, 1000));
  EXPECT_FALSE(eta.Remaining(t0).has_value()) << "one point has no rate";
  eta.Observe(Point(1, 10, 110, 1000));  // the same point polled twice
  EXPECT_FALSE(eta.Remaining(t0).has_value());
  eta.Observe(Point(1, 20, 110, 1010));  // 1 step/s, 90 steps left
  EXPECT_EQ(eta.Remaining(absl::FromUnixSeconds(1010)), absl::Seconds(90));
  // Counts down between points, never below zero.
  EXPECT_EQ(eta.Remaining(absl::FromUnixSeconds(1040)), absl::Seconds(60));
  EXPECT_EQ(eta.Remaining(absl::FromUnixSeconds(9999)), absl::ZeroDuration());

  // A restart begins a new estimate; late points of the old attempt are ignored.
  eta.Observe(Point(2, 15, 110, 2000));
  EXPECT_FALSE(eta.Remaining(absl::FromUnixSeconds(2000)).has_value());
  eta.Observe(Point(1, 30, 110, 1020));
  EXPECT_FALSE(eta.Remaining(absl::FromUnixSeconds(2000)).has_value());
  eta.Observe(Point(2, 25, 110, 2005));  // 2 steps/s, 85 left
  EXPECT_EQ(eta.Remaining(absl::FromUnixSeconds(2005)), absl::Seconds(42.5));

  // Without a total there is nothing to count down to.
  EtaEstimator open_ended;
  open_ended.Observe(Point(1, 1, 0, 1000));
  open_ended.Observe(Point(1, 5, 0, 1004));
  EXPECT_FALSE(open_ended.Remaining(absl::FromUnixSeconds(1004)).has_value());
}

TEST(ProgressLineTest, BarStepsLossThroughputAndEta) {
  v1::Job job;
  job.set_id("3");
  job.set_state(v1::RUNNING);
  v1::JobMetricsPoint* m = job.mutable_latest_metrics();
  m->set_step(120);
  m->set_total_steps(200);
  m->set_loss(2.314);
  m->set_tokens_per_second(1234);
  EXPECT_EQ(ProgressLine(job, absl::Seconds(65), 200),
            "job 3 RUNNING [############........] 120/200 loss 2.3140 1,234 tok/s ETA 1m05s");
  EXPECT_EQ(ProgressLine(job, std::nullopt, 200),
            "job 3 RUNNING [############........] 120/200 loss 2.3140 1,234 tok/s");
  EXPECT_EQ(ProgressLine(job, absl::Seconds(65), 20), "job 3 RUNNING [#####");
  // A finished job has no ETA.
  job.set_state(v1::SUCCEEDED);
  m->set_step(200);
  EXPECT_EQ(ProgressLine(job, absl::Seconds(1), 200),
            "job 3 SUCCEEDED [####################] 200/200 loss 2.3140 1,234 tok/s");
  // Without a total: no bar.
  m->set_total_steps(0);
  EXPECT_EQ(ProgressLine(job, std::nullopt, 200),
            "job 3 SUCCEEDED step 200 loss 2.3140 1,234 tok/s");
}

v1::Usage Used(double gpu_seconds, double failed, std::optional<double> cost, double failed_cost = 0) {
  v1::Usage u;
  u.set_gpu_seconds(gpu_seconds);
  u.set_failed_gpu_seconds(failed);
  if (cost.has_value()) {
    u.set_cost(*cost);
    u.set_failed_cost(failed_cost);
  }
  return u;
}

TEST(UsageOutputTest, GpuTimeInSecondsWhileSmallThenHours) {
  EXPECT_EQ(FormatGpuTime(0), "0.0 GPU-s");
  EXPECT_EQ(FormatGpuTime(2.5), "2.5 GPU-s");
  EXPECT_EQ(FormatGpuTime(45), "45 GPU-s");
  EXPECT_EQ(FormatGpuTime(359), "359 GPU-s");
  EXPECT_EQ(FormatGpuTime(720), "0.20 GPU-h");
  EXPECT_EQ(FormatGpuTime(4428), "1.23 GPU-h");
  EXPECT_EQ(FormatGpuHours(0), "0.00");
  EXPECT_EQ(FormatGpuHours(5), "<0.01");
  EXPECT_EQ(FormatGpuHours(36000), "10.00");
  EXPECT_EQ(FormatCost(std::nullopt), "-");
  EXPECT_EQ(FormatCost(12.345), "12.35");
  EXPECT_EQ(FormatCost(0), "0.00");
  EXPECT_EQ(FormatCost(0.0042), "0.0042");
}

TEST(UsageOutputTest, DescribeLineNamesTheFailedPartAndTheCostWhenPriced) {
  EXPECT_EQ(UsageLine(v1::Usage()), "-") << "never held GPUs";
  EXPECT_EQ(UsageLine(Used(4428, 720, 12.34, 2)), "1.23 GPU-h (failed attempts 0.20 GPU-h), cost 12.34 (failed attempts 2.00)");
  EXPECT_EQ(UsageLine(Used(4428, 0, 12.34)), "1.23 GPU-h, cost 12.34");
  EXPECT_EQ(UsageLine(Used(60, 30, std::nullopt)), "60 GPU-s (failed attempts 30 GPU-s)") << "unpriced: no cost";

  v1::Job job;
  job.set_id("3");
  job.set_state(v1::SUCCEEDED);
  *job.mutable_usage() = Used(4428, 720, 12.34, 2);
  v1::Attempt failed;
  failed.set_attempt(1);
  failed.set_state(v1::ATTEMPT_FAILED);
  failed.set_gpu_seconds(720);
  failed.set_cost(2);
  v1::Attempt unpriced = failed;
  unpriced.set_attempt(2);
  unpriced.set_gpu_seconds(30);
  unpriced.clear_cost();
  const std::string out = DescribeJob(job, {}, {}, absl::FromUnixSeconds(1'796'000'000), {unpriced, failed});
  EXPECT_TRUE(absl::StrContains(out, "GPU time:          1.23 GPU-h (failed attempts 0.20 GPU-h), cost 12.34")) << out;
  EXPECT_TRUE(absl::StrContains(out, "RESIZE   GPU-TIME     COST   REASON")) << out;
  EXPECT_TRUE(absl::StrContains(out, "-        30 GPU-s     -      -")) << out;
  EXPECT_TRUE(absl::StrContains(out, "-        0.20 GPU-h   2.00   -")) << out;
}

TEST(UsageOutputTest, TimeOnCpuWorkersIsCpuTime) {
  v1::WorkerInfo cpu;
  cpu.set_name("c1");
  cpu.mutable_inventory()->set_cpu_ranks(2);
  v1::WorkerInfo gpu;
  gpu.set_name("g1");
  gpu.mutable_inventory()->add_gpus();
  v1::Attempt on_cpu;
  on_cpu.add_tasks()->set_worker("c1");
  v1::Attempt on_gpu = on_cpu;
  on_gpu.add_tasks()->set_worker("g1");
  v1::Attempt gone = on_cpu;
  gone.add_tasks()->set_worker("left-the-cluster");
  EXPECT_EQ(AttemptsDevice({on_cpu}, {cpu, gpu}), Device::kCpu);
  EXPECT_EQ(AttemptsDevice({on_cpu, on_gpu}, {cpu, gpu}), Device::kGpu);
  EXPECT_EQ(AttemptsDevice({gone}, {cpu, gpu}), Device::kGpu) << "unknown: the usual unit";
  EXPECT_EQ(AttemptsDevice({}, {cpu}), Device::kGpu);
  // Totals over many jobs (get usage): CPU only on a cluster of CPU workers alone.
  EXPECT_EQ(ClusterDevice({cpu}), Device::kCpu);
  EXPECT_EQ(ClusterDevice({cpu, gpu}), Device::kGpu);
  EXPECT_EQ(ClusterDevice({}), Device::kGpu);
  EXPECT_EQ(FormatGpuTime(2.5, Device::kCpu), "2.5 CPU-s");
  EXPECT_EQ(FormatGpuTime(4428, Device::kCpu), "1.23 CPU-h");
  EXPECT_EQ(UsageLine(Used(60, 30, std::nullopt), Device::kCpu), "60 CPU-s (failed attempts 30 CPU-s)");
  v1::Job job;
  job.set_id("3");
  *job.mutable_usage() = Used(60, 0, std::nullopt);
  job.mutable_memory_estimate()->set_total_bytes(int64_t{3} << 30);
  job.mutable_memory_estimate()->set_world_size(2);
  on_cpu.set_gpu_seconds(60);
  const std::string out = DescribeJob(job, {}, {}, absl::FromUnixSeconds(1'796'000'000), {on_cpu}, Device::kCpu);
  EXPECT_TRUE(absl::StrContains(out, "CPU time:          60 CPU-s\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "RESIZE   CPU-TIME   COST")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Memory estimate:   3.0 GiB per rank on 2 ranks")) << out;
  EXPECT_FALSE(absl::StrContains(out, "GPU")) << out;
  // get jobs -o wide on a cluster of CPU workers.
  const std::string wide = JobsTable({job}, /*wide=*/true, absl::Now(), Device::kCpu);
  EXPECT_TRUE(absl::StrContains(wide, "EVAL-LOSS   CPU-H   COST")) << wide;
  EXPECT_FALSE(absl::StrContains(wide, "GPU-H")) << wide;
}

TEST(UsageOutputTest, WideJobsTableAndUsageTable) {
  v1::Job job = QueuedJob();
  job.set_state(v1::RUNNING);
  *job.mutable_usage() = Used(7200, 0, 20);
  v1::Job unpriced = job;
  *unpriced.mutable_usage() = Used(108, 0, std::nullopt);
  const std::string wide = JobsTable({job, unpriced}, /*wide=*/true, absl::Now());
  EXPECT_TRUE(absl::StrContains(wide, "EVAL-LOSS   GPU-H   COST    CREATED")) << wide;
  EXPECT_TRUE(absl::StrContains(wide, "-           2.00    20.00   ")) << wide;
  EXPECT_TRUE(absl::StrContains(wide, "-           0.03    -       ")) << wide;
  EXPECT_FALSE(absl::StrContains(JobsTable({job}, /*wide=*/false, absl::Now()), "GPU-H"));

  v1::UsageRow alice;
  alice.set_user("alice");
  alice.set_queue("research");
  alice.set_jobs(12);
  *alice.mutable_usage() = Used(36000, 3600, 100, 10);
  v1::UsageRow bob;
  bob.set_user("bob");
  bob.set_queue("default");
  bob.set_jobs(1);
  *bob.mutable_usage() = Used(5, 0, std::nullopt);
  EXPECT_EQ(UsageTable({alice, bob}),
            "USER    QUEUE      JOBS   GPU-H   FAILED-GPU-H   COST\n"
            "alice   research   12     10.00   1.00           100.00\n"
            "bob     default    1      <0.01   0.00           -\n");
  EXPECT_EQ(UsageTable({bob}, Device::kCpu),
            "USER   QUEUE     JOBS   CPU-H   FAILED-CPU-H   COST\n"
            "bob    default   1      <0.01   0.00           -\n");
  EXPECT_EQ(PricingLine({{"p5.48xlarge", 98.32}, {"c7i.8xlarge", 1.428}}),
            "Prices per instance-hour: c7i.8xlarge 1.43, p5.48xlarge 98.32");
  EXPECT_EQ(PricingLine({}), "");
}

TEST(ProgressLineTest, WaitingJobSaysWhy) {
  EXPECT_EQ(ProgressLine(QueuedJob(), std::nullopt, 200),
            "job 7 QUEUED: needs 3 nodes with 1 free GPUs; 2 match");
  v1::Job job;
  job.set_id("8");
  job.set_state(v1::SCHEDULED);
  EXPECT_EQ(ProgressLine(job, std::nullopt, 200), "job 8 SCHEDULED");
}

TEST(BarTest, ClampsToTheRange) {
  EXPECT_EQ(Bar(0, 10, 10), "..........");
  EXPECT_EQ(Bar(5, 10, 10), "#####.....");
  EXPECT_EQ(Bar(15, 10, 10), "##########");
  EXPECT_EQ(Bar(-1, 10, 4), "....");
  EXPECT_EQ(Bar(3, 0, 4), "....");
}

TEST(MetricsLineTest, PlainLineForPipes) {
  v1::JobMetricsPoint m = Point(1, 120, 200, 0);
  m.set_loss(2.314);
  m.set_lr(0.0003);
  m.set_tokens_per_second(1234.6);
  m.set_mfu(0.25);
  EXPECT_EQ(MetricsLine(m, absl::Seconds(65)),
            "step 120/200 loss 2.3140 lr 0.0003 1,235 tok/s mfu 25.0% ETA 1m05s");
  m.set_mfu(0);
  m.set_total_steps(0);
  EXPECT_EQ(MetricsLine(m, std::nullopt), "step 120 loss 2.3140 lr 0.0003 1,235 tok/s");
}

TEST(DescribeLogRecordTest, TheTrainersRecordsReadAsOneLineOfTextEach) {
  // Lines as the trainer writes them (worker/trainer_events.h), not hand-made JSON.
  trainer_events::Metrics m;
  m.step = 20, m.loss = 2.31, m.lr = 3e-4, m.grad_norm = 0.5, m.tokens_per_s = 1234.4, m.peak_mem_bytes = 3 << 20;
  EXPECT_EQ(DescribeLogRecord(trainer_events::ToLine(m)),
            "» step 20 · loss 2.3100 · lr 0.0003 · grad norm 0.5 · 1,234 tok/s · peak 3.0 MiB");
  EXPECT_EQ(DescribeLogRecord(trainer_events::ToLine(trainer_events::Eval{60, 4.25, 70.1, 5120})),
            "» eval after step 60 · loss 4.2500 · perplexity 70.1 · 5,120 tokens");
  EXPECT_EQ(DescribeLogRecord(trainer_events::ToLine(trainer_events::Phase{"data_ready", 0.5, 0.6, "tokenized"})),
            "» data ready 0.50 s · tokenized");
  EXPECT_EQ(DescribeLogRecord(trainer_events::ToLine(trainer_events::Tokenizing{"/d/train.jsonl", 50, 200})),
            "» tokenizing /d/train.jsonl · 25%");
  EXPECT_EQ(DescribeLogRecord(trainer_events::ToLine(trainer_events::Finished{60, 1.5, "/d/export"})),
            "» finished after 60 steps · loss 1.5000 · exported to /d/export");
  trainer_events::Exit exit;
  exit.code = absl::StatusCode::kInvalidArgument;
  exit.message = "d.jsonl:3: not a JSON object";
  EXPECT_EQ(DescribeLogRecord(trainer_events::ToLine(exit)), "» exit INVALID_ARGUMENT · d.jsonl:3: not a JSON object");
  // Anything else is shown as it is.
  EXPECT_EQ(DescribeLogRecord("[info] step 5/60 loss 6.2"), std::nullopt);
  EXPECT_EQ(DescribeLogRecord("{\"user\": \"json\"}"), std::nullopt);
  EXPECT_EQ(DescribeLogRecord("{\"type\": \"metrics\", \"step\""), std::nullopt);  // cut off
  EXPECT_EQ(DescribeLogRecord("{\"type\": \"event\", \"event\": \"new_one\", \"x\": 1}"), "» new_one · {\"x\":1}");
}

TEST(LogTextLineTest, AStepReadsOnceWhereTheTrainerAlsoWritesItAsText) {
  // A logged step and an early stop as rank 0 writes them: a record and a text line each.
  trainer_events::Metrics m;
  m.step = 5, m.loss = 4.68, m.lr = 1e-3, m.tokens_per_s = 11843;
  const std::string reason =
      "stopped early at step 45: eval loss did not improve by 0.005 for 3 evaluations";
  const std::vector<std::string> written = {
      trainer_events::ToLine(m),
      "08:22:41 llamafleet-train [I] step 5/60 loss 4.68 lr 0.001 grad_norm 1.9 tokens/s 11843",
      trainer_events::ToLine(trainer_events::Eval{5, 4.61, 100.6, 252}),
      trainer_events::ToLine(trainer_events::StoppedEarly{45, 30, 4.41, reason}),
      "08:22:45 llamafleet-train [I] " + reason,
      "{\"type\": \"metrics\", \"step\"",  // cut off: not a record, shown as it is
  };
  std::vector<std::string> shown;
  for (const std::string& line : written) {
    if (std::optional<std::string> text = LogTextLine(line)) shown.push_back(*text);
  }
  EXPECT_EQ(shown,
            (std::vector<std::string>{
                written[1], "» eval after step 5 · loss 4.6100 · perplexity 100.6 · 252 tokens",
                written[4], written[5]}));
}

TEST(EscapeControlsTest, ControlCharactersBecomeVisibleEscapes) {
  EXPECT_EQ(EscapeControls("plain text, tabs\tand\nlines"), "plain text, tabs\tand\nlines");
  EXPECT_EQ(EscapeControls("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
  EXPECT_EQ(EscapeControls("a\rb\x7f"), "a\\rb\\x7f");
  EXPECT_EQ(EscapeControls("\xc2\x9b" "2J"), "\\u009b2J");            // C1 CSI in UTF-8
  EXPECT_EQ(EscapeControls("caf\xc3\xa9 \xc2\xa0"), "caf\xc3\xa9 \xc2\xa0");  // other UTF-8 stays
  EXPECT_EQ(EscapeControls("end\xc2"), "end\xc2");
}

TEST(EscapingStreambufTest, EscapesAcrossWritesAndKeepsOrderWithTheTarget) {
  std::ostringstream target;
  EscapingStreambuf buf(target.rdbuf());
  std::ostream out(&buf);
  out << "job \x1b[31mred" << '\r' << "x\xc2";
  target << "|raw\x1b[K|";  // the CLI's own sequence, straight to the target
  out << "\x9b" << "ok\n";
  out.flush();
  EXPECT_EQ(target.str(), "job \\x1b[31mred\\rx|raw\x1b[K|\\u009bok\n");
}

}  // namespace
}  // namespace llamafleet::cli
