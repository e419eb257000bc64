// ClusterManager and the training reports of rank 0 (cluster_manager_fixture.h): evaluations
// and their history, early stopping's reason, start-up phases and tokenizing progress, each
// bounded and taken only from the assigned worker.
#include "storage/metrics_store.h"
#include "tests/server/cluster_manager_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cluster;  // NOLINT: the fixture's names

// Rank 0's evaluations: the latest one and the best eval loss stay on latest_metrics
// while training points come and go, each is an "eval" event, and only the assigned
// worker's finite figures count.
TEST_F(ClusterManagerTest, EvaluationsKeepTheLatestAndTheBestEvalLoss) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  std::shared_ptr<FakeLink> intruder = Hello("w9");
  const int64_t id = Submit();
  const std::string t0 = absl::StrCat(id, "-1-0"), t1 = absl::StrCat(id, "-1-1");
  ASSERT_TRUE(Eventually([&] { return !w0->Assignments().empty() && !w1->Assignments().empty(); }));
  Report("w0", t0, v1::TASK_RUNNING);
  Report("w1", t1, v1::TASK_RUNNING);
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::RUNNING; }));
  auto metrics = [&](int64_t step, double loss) {
    v1::WorkerMessage m;
    m.mutable_metrics()->set_task_id(t0);
    m.mutable_metrics()->set_step(step);
    m.mutable_metrics()->set_loss(loss);
    Send("w0", m);
  };
  auto eval = [&](const std::string& worker, int64_t step, double loss) {
    v1::WorkerMessage m;
    m.mutable_eval()->set_task_id(t0);
    m.mutable_eval()->set_step(step);
    m.mutable_eval()->set_loss(loss);
    m.mutable_eval()->set_perplexity(std::exp(loss));
    Send(worker, m);
  };
  metrics(10, 3.5);
  eval("w0", 10, 2.5);
  metrics(20, 3.0);
  ASSERT_TRUE(Eventually([&] { return Job(id).latest_metrics().step() == 20; }));
  v1::JobMetricsPoint latest = Job(id).latest_metrics();
  EXPECT_DOUBLE_EQ(latest.loss(), 3.0);
  EXPECT_DOUBLE_EQ(latest.eval_loss(), 2.5) << "a training point keeps the evaluation";
  EXPECT_EQ(latest.eval_step(), 10);
  EXPECT_DOUBLE_EQ(latest.best_eval_loss(), 2.5);
  eval("w0", 20, 2.75);              // worse: the latest changes, the best stays
  eval("w9", 20, 0.1);               // not its task
  eval("w0", 20, std::nan(""));      // not a number
  metrics(30, 2.9);
  ASSERT_TRUE(Eventually([&] { return Job(id).latest_metrics().step() == 30; }));
  latest = Job(id).latest_metrics();
  EXPECT_DOUBLE_EQ(latest.eval_loss(), 2.75);
  EXPECT_EQ(latest.eval_step(), 20);
  EXPECT_DOUBLE_EQ(latest.best_eval_loss(), 2.5);
  absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(id, 0, 100);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> evals;
  for (const v1::JobEvent& e : *events) {
    if (e.type() == "eval") evals.push_back(e.reason());
  }
  EXPECT_EQ(evals, (std::vector<std::string>{"eval loss 2.5000 (perplexity 12.18) after step 10",
                                             "eval loss 2.7500 (perplexity 15.64) after step 20"}));
  // Every accepted evaluation is in the job's history, oldest first.
  absl::StatusOr<std::vector<v1::EvalPoint>> history = EvalHistory(*store_, id, 100);
  ASSERT_TRUE(history.ok()) << history.status();
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ((*history)[0].step(), 10);
  EXPECT_DOUBLE_EQ((*history)[0].loss(), 2.5);
  EXPECT_EQ((*history)[1].step(), 20);
  EXPECT_DOUBLE_EQ((*history)[1].loss(), 2.75);
  EXPECT_EQ((*history)[1].attempt(), 1);
  EXPECT_EQ(EvalHistory(*store_, id, 1)->size(), 1u);
  EXPECT_EQ(EvalHistory(*store_, id, 1)->at(0).step(), 20) << "the newest are kept";

  // Early stopping: rank 0's reason is the job's once every rank exited 0.
  v1::WorkerMessage stop;
  stop.mutable_early_stop()->set_task_id(t0);
  stop.mutable_early_stop()->set_step(30);
  stop.mutable_early_stop()->set_reason("stopped early at step 30: eval loss did not improve by 0.01 for 3 evaluations");
  Send("w0", stop);
  Report("w0", t0, v1::TASK_SUCCEEDED);
  Report("w1", t1, v1::TASK_SUCCEEDED);
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::SUCCEEDED; }));
  EXPECT_EQ(Job(id).status_reason(), "stopped early at step 30: eval loss did not improve by 0.01 for 3 evaluations");
  events = store_->GetEvents(id, 0, 100);
  ASSERT_TRUE(events.ok());
  bool noted = false;
  for (const v1::JobEvent& e : *events) noted = noted || e.type() == "stopped_early";
  EXPECT_TRUE(noted);
}
// Named eval sets (data.eval): each evaluation is in the history under its set and is an
// event naming it; only the first set moves latest_metrics' eval loss and the best; a set
// the job does not name is ignored.
TEST_F(ClusterManagerTest, EachEvalSetHasItsHistoryAndTheFirstDecidesTheBest) {
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  const int64_t id =
      Submit("", "{nodes: 2, gpus_per_node: 1}",
             "{train: [{path: /d/a.jsonl}, {path: /d/b.jsonl, weight: 2}], "
             "eval: [{name: chat, path: /d/c.jsonl}, {name: code, path: /d/k.jsonl}]}");
  const std::string t0 = absl::StrCat(id, "-1-0"), t1 = absl::StrCat(id, "-1-1");
  ASSERT_TRUE(Eventually([&] { return !w0->Assignments().empty() && !w1->Assignments().empty(); }));
  Report("w0", t0, v1::TASK_RUNNING);
  Report("w1", t1, v1::TASK_RUNNING);
  ASSERT_TRUE(Eventually([&] { return Job(id).state() == v1::RUNNING; }));
  auto eval = [&](int64_t step, double loss, const std::string& set) {
    v1::WorkerMessage m;
    m.mutable_eval()->set_task_id(t0);
    m.mutable_eval()->set_step(step);
    m.mutable_eval()->set_loss(loss);
    m.mutable_eval()->set_perplexity(std::exp(loss));
    m.mutable_eval()->set_set(set);
    Send("w0", m);
  };
  eval(10, 2.5, "chat");
  eval(10, 1.5, "code");
  eval(10, 0.5, "other");  // not one of the job's sets
  eval(10, 0.25, "");      // the job has no data.eval_path
  eval(20, 2.0, "chat");
  eval(20, 1.75, "code");
  ASSERT_TRUE(Eventually([&] { return EvalHistory(*store_, id, 100)->size() == 4; }));
  const v1::JobMetricsPoint latest = Job(id).latest_metrics();
  EXPECT_DOUBLE_EQ(latest.eval_loss(), 2.0);
  EXPECT_EQ(latest.eval_step(), 20);
  EXPECT_DOUBLE_EQ(latest.best_eval_loss(), 2.0) << "code's lower losses are not the best";
  std::vector<std::pair<std::string, double>> history;
  const absl::StatusOr<std::vector<v1::EvalPoint>> points = EvalHistory(*store_, id, 100);
  ASSERT_TRUE(points.ok()) << points.status();
  for (const v1::EvalPoint& e : *points) history.push_back({e.set(), e.loss()});
  EXPECT_EQ(history, (std::vector<std::pair<std::string, double>>{
                         {"chat", 2.5}, {"code", 1.5}, {"chat", 2.0}, {"code", 1.75}}));
  std::vector<std::string> events;
  const absl::StatusOr<std::vector<v1::JobEvent>> all = store_->GetEvents(id, 0, 100);
  ASSERT_TRUE(all.ok()) << all.status();
  for (const v1::JobEvent& e : *all) {
    if (e.type() == "eval") events.push_back(e.reason());
  }
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1], "eval loss 1.5000 (perplexity 4.482) on set code after step 10");
}

// A worker's start-up phases and tokenizing progress: only known phase names with sane
// times become the attempt's phases and events, each once; progress becomes at most one
// event per attempt every few seconds, plus each dataset's 100%. The task names its owner.
// Another rank built the token cache entry (its 100% came first) and rank 0 mapped it: the
// attempt's data_ready says the data was tokenized, not "token cache hit" after "100%".
TEST_F(ClusterManagerTest, ACacheHitAfterAnotherRanksTokenizingSaysTokenized) {
  RunningGang g;
  StartRunningGang(&g);
  v1::WorkerMessage progress;
  progress.mutable_tokenizing()->set_task_id(g.t0);
  progress.mutable_tokenizing()->set_path("/d/train.jsonl");
  progress.mutable_tokenizing()->set_done_bytes(1000);
  progress.mutable_tokenizing()->set_total_bytes(1000);
  Send("w0", std::move(progress));
  v1::WorkerMessage m;
  m.mutable_phase()->set_task_id(g.t0);
  m.mutable_phase()->set_phase("data_ready");
  m.mutable_phase()->set_seconds(0.02);
  m.mutable_phase()->set_since_start(0.02);
  m.mutable_phase()->set_detail("token cache hit");
  Send("w0", std::move(m));
  std::vector<std::string> reasons;
  ASSERT_TRUE(Eventually([&] {
    reasons.clear();
    const absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(g.id, 0, 1000);
    for (const v1::JobEvent& e : *events) {
      if (e.type() == "tokenizing" || e.type() == "startup") reasons.push_back(e.reason());
    }
    return reasons.size() >= 2;
  }));
  EXPECT_EQ(reasons, (std::vector<std::string>{
                         "attempt 1: tokenizing train.jsonl 100% (1.0 of 1.0 kB)",
                         "attempt 1 start-up: data_ready in 0.02 s (0.02 s since the trainer started), "
                         "tokenized by another rank"}));
}

TEST_F(ClusterManagerTest, StartupPhasesAndTokenizingProgressFromAWorkerAreBounded) {
  RunningGang g;
  StartRunningGang(&g);
  ASSERT_FALSE(g.w0->Assignments().empty());
  EXPECT_EQ(g.w0->Assignments()[0].owner(), "alice") << "each owner gets a token cache of their own";
  auto phase = [&](const std::string& worker, const std::string& name, double seconds, const std::string& detail) {
    v1::WorkerMessage m;
    m.mutable_phase()->set_task_id(g.t0);
    m.mutable_phase()->set_phase(name);
    m.mutable_phase()->set_seconds(seconds);
    m.mutable_phase()->set_since_start(seconds);
    m.mutable_phase()->set_detail(detail);
    Send(worker, std::move(m));
  };
  clock_.Advance(absl::Seconds(2));  // the report comes later than the phase was done
  phase("w0", "made_up", 1, "");
  phase("w0", "rendezvous", -1, "");
  phase("w0", "rendezvous", std::nan(""), "");
  phase("w0", "placed", 1, "");  // the coordinator's own phase, not a worker's to report
  phase("w9", "first_step", 1, "");
  phase("w0", "data_ready", 0.5, "token cache \x1b[2Jhit");
  phase("w0", "data_ready", 9, "again");
  auto progress = [&](const std::string& path, int64_t done, int64_t total) {
    v1::WorkerMessage m;
    m.mutable_tokenizing()->set_task_id(g.t0);
    m.mutable_tokenizing()->set_path(path);
    m.mutable_tokenizing()->set_done_bytes(done);
    m.mutable_tokenizing()->set_total_bytes(total);
    Send("w0", std::move(m));
  };
  for (int i = 1; i <= 20; ++i) progress("/d/train.jsonl", i * 100'000'000, 3'000'000'000);  // one burst
  progress("/d/train.jsonl", 3'100'000'000, 3'000'000'000);                                  // nonsense
  progress("/d/train.jsonl", 3'000'000'000, 3'000'000'000);
  progress("/d/train.jsonl", 3'000'000'000, 3'000'000'000);  // the same 100% again
  clock_.Advance(absl::Seconds(4));
  progress("/d/eval.jsonl", 1'000'000, 2'000'000);

  auto events_of = [&](const std::string& type) {
    std::vector<std::string> out;
    const absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(g.id, 0, 1000);
    for (const v1::JobEvent& e : *events) {
      if (e.type() == type) out.push_back(e.reason());
    }
    return out;
  };
  ASSERT_TRUE(Eventually([&] { return events_of("tokenizing").size() >= 3; }));
  absl::SleepFor(absl::Milliseconds(100));  // let the writer commit anything wrongly queued
  EXPECT_EQ(events_of("tokenizing"),
            (std::vector<std::string>{"attempt 1: tokenizing train.jsonl 3% (0.1 of 3.0 GB)",
                                      "attempt 1: tokenizing train.jsonl 100% (3.0 of 3.0 GB)",
                                      "attempt 1: tokenizing eval.jsonl 50% (1.0 of 2.0 MB)"}));
  const std::vector<std::string> startup = events_of("startup");
  ASSERT_EQ(startup.size(), 1u) << absl::StrJoin(startup, "\n");
  EXPECT_EQ(startup[0], "attempt 1 start-up: data_ready in 0.50 s (0.50 s since the trainer started), "
                        "token cache ?[2Jhit");
  absl::StatusOr<std::vector<v1::Attempt>> attempts = ListAttempts(*store_, g.id);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  std::vector<std::string> names;
  for (const v1::AttemptPhase& p : (*attempts)[0].phases()) names.push_back(p.name());
  EXPECT_EQ(names, (std::vector<std::string>{"placed", "trainers_started", "data_ready"}));
  EXPECT_EQ((*attempts)[0].phases(2).detail(), "token cache ?[2Jhit");
  EXPECT_DOUBLE_EQ((*attempts)[0].phases(2).seconds(), 0.5);
  using google::protobuf::util::TimeUtil;
  EXPECT_EQ(TimeUtil::TimestampToMicroseconds((*attempts)[0].phases(2).time()) -
                TimeUtil::TimestampToMicroseconds((*attempts)[0].phases(1).time()),
            500'000)
      << "done 0.5 s after the trainers started, by the trainer's clock";
}

}  // namespace
}  // namespace llamafleet
