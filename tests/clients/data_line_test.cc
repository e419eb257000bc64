// The CLI's data line (`describe`'s Data: and `submit --dry-run`'s "# data:"): each
// mixture source's share of the rows and the eval sets by name.
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "clients/cli/evaluation_line.h"
#include "clients/cli/output.h"

namespace llamafleet::cli {
namespace {

TEST(DataLineTest, AMixtureShowsEachSourcesShareAndTheEvalSets) {
  v1::Job job;
  job.set_id("7");
  job.set_state(v1::QUEUED);
  v1::DataSpec* data = job.mutable_spec()->mutable_data();
  data->set_train_path("/d/one.jsonl");
  data->set_eval_path("/d/e.jsonl");
  EXPECT_EQ(DataLine(job.spec()), "") << "the shorthands say it all in the spec";
  data->clear_train_path();
  data->clear_eval_path();
  v1::DataSource* chat = data->add_train();
  chat->set_path("/d/chat.jsonl");
  chat->set_weight(3);
  data->add_train()->set_path("/d/code.jsonl");  // weight unset: 1
  v1::EvalSet* e = data->add_eval();
  e->set_name("chat");
  e->set_path("/d/chat-eval.jsonl");
  e = data->add_eval();
  e->set_name("code");
  e->set_path("/d/code-eval.jsonl");
  EXPECT_EQ(DataLine(job.spec()),
            "2 sources: /d/chat.jsonl 75%, /d/code.jsonl 25%; eval sets chat, code (the first "
            "decides early "
            "stopping and export: best)");
  const std::string out = DescribeJob(job, {}, {}, absl::FromUnixSeconds(1'796'000'000));
  EXPECT_TRUE(absl::StrContains(out, "Data:              2 sources: /d/chat.jsonl 75%")) << out;
}

TEST(DataLineTest, DescribeShowsEachEvalSetsLatestLoss) {
  v1::Job job;
  job.set_id("8");
  job.set_state(v1::RUNNING);
  v1::DataSpec* data = job.mutable_spec()->mutable_data();
  data->add_train()->set_path("/d/a.jsonl");
  for (const char* name : {"chat", "code"}) {
    v1::EvalSet* e = data->add_eval();
    e->set_name(name);
    e->set_path("/d/e.jsonl");
  }
  v1::JobMetricsPoint* m = job.mutable_latest_metrics();
  m->set_step(20);
  m->set_eval_loss(2.0);
  m->set_eval_step(20);
  m->set_best_eval_loss(2.0);
  std::vector<v1::EvalPoint> evals(3);
  evals[0].set_set("chat");
  evals[0].set_step(20);
  evals[0].set_loss(2.0);
  evals[1].set_set("code");
  evals[1].set_step(10);
  evals[1].set_loss(1.5);
  evals[2].set_set("code");
  evals[2].set_step(20);
  evals[2].set_loss(1.25);
  const std::string out =
      DescribeJob(job, {}, {}, absl::FromUnixSeconds(1'796'000'000), {}, Device::kGpu, evals);
  EXPECT_TRUE(absl::StrContains(out, "Eval loss (chat):")) << out;
  const size_t code = out.find("Eval loss (code):");
  ASSERT_NE(code, std::string::npos) << out;
  const std::string line = out.substr(code, out.find('\n', code) - code);
  EXPECT_TRUE(absl::StrContains(line, "1.25") && absl::StrContains(line, "after step 20")) << line;
}

TEST(DataLineTest, AnEvaluationJobShowsWhatItScoresAndItsEvalLossesOnly) {
  v1::Job job;
  job.set_id("9");
  job.set_state(v1::SUCCEEDED);
  v1::JobSpec* spec = job.mutable_spec();
  spec->set_kind("evaluate");
  spec->mutable_model()->set_path("/fsx/out/base");
  spec->mutable_peft()->set_method("lora");
  spec->mutable_peft()->set_adapter_path("/fsx/out/adapter");
  for (const char* name : {"chat", "code"}) {
    v1::EvalSet* e = spec->mutable_data()->add_eval();
    e->set_name(name);
    e->set_path("/d/e.jsonl");
  }
  EXPECT_EQ(EvaluationLine(*spec),
            "scores /fsx/out/base with the adapter /fsx/out/adapter on eval sets chat, code (no "
            "training: no checkpoint, no export)");
  EXPECT_EQ(DataLine(*spec), "eval sets chat, code (the first decides early stopping and export: best)");
  // No step was trained: no step, loss or learning rate, only what the evaluation gave.
  v1::JobMetricsPoint* m = job.mutable_latest_metrics();
  m->set_eval_loss(2.5);
  m->set_eval_step(0);
  m->set_best_eval_loss(2.5);
  const std::string out = DescribeJob(job, {}, {}, absl::FromUnixSeconds(1'796'000'000));
  EXPECT_TRUE(absl::StrContains(out, "Evaluation:        scores /fsx/out/base with the adapter")) << out;
  EXPECT_TRUE(absl::StrContains(out, "2.5000 after step 0")) << out;
  EXPECT_FALSE(absl::StrContains(out, "Learning rate:")) << out;
  EXPECT_FALSE(absl::StrContains(out, "Finetuning:")) << out;
  spec->clear_kind();
  EXPECT_EQ(EvaluationLine(*spec), "") << "a training job";
}

}  // namespace
}  // namespace llamafleet::cli
