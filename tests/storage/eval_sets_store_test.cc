// Evaluations on named eval sets in the store (storage/metrics_store.h): each is a row of
// the job's history under its set and an event naming it; only the primary set's moves
// latest_metrics' eval loss and the best. Milliseconds.
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"
#include "storage/metrics_store.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/store_fixture.h"

namespace llamafleet {
namespace {

class EvalSetsStoreTest : public testing::StoreTest {};

TEST_F(EvalSetsStoreTest, EachSetHasItsHistoryAndOnlyThePrimaryMovesTheBest) {
  std::unique_ptr<JobStore> store = Open();
  const int64_t job = RunningJob(store.get(), "sets");
  ASSERT_NE(job, 0);
  auto eval = [&](int64_t step, double loss, const std::string& set, bool primary) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(
        store->WriteAndWait(RecordEvalTxn(job, 1, step, loss, std::exp(loss), set, primary)).ok());
  };
  eval(10, 2.5, "chat", true);
  eval(10, 1.5, "code", false);
  eval(20, 2.75, "chat", true);
  eval(20, 1.25, "code", false);
  absl::StatusOr<v1::Job> got = store->GetJob(job);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_DOUBLE_EQ(got->latest_metrics().eval_loss(), 2.75);
  EXPECT_EQ(got->latest_metrics().eval_step(), 20);
  EXPECT_DOUBLE_EQ(got->latest_metrics().best_eval_loss(), 2.5)
      << "code's lower losses are not the best";
  absl::StatusOr<std::vector<v1::EvalPoint>> history = EvalHistory(*store, job, 100);
  ASSERT_TRUE(history.ok()) << history.status();
  std::vector<std::pair<std::string, double>> points;
  for (const v1::EvalPoint& e : *history) points.push_back({e.set(), e.loss()});
  EXPECT_EQ(points, (std::vector<std::pair<std::string, double>>{
                        {"chat", 2.5}, {"code", 1.5}, {"chat", 2.75}, {"code", 1.25}}));
  std::vector<std::string> events;
  const absl::StatusOr<std::vector<v1::JobEvent>> all = store->GetEvents(job, 0, 100);
  ASSERT_TRUE(all.ok()) << all.status();
  for (const v1::JobEvent& e : *all) {
    if (e.type() == "eval") events.push_back(e.reason());
  }
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1], "eval loss 1.5000 (perplexity 4.482) on set code after step 10");
  // data.eval_path's set: no name, as before.
  eval(30, 2.0, "", true);
  EXPECT_EQ(EvalHistory(*store, job, 1)->at(0).set(), "");
  EXPECT_DOUBLE_EQ(store->GetJob(job)->latest_metrics().best_eval_loss(), 2.0);
}

}  // namespace
}  // namespace llamafleet
