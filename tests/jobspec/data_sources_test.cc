// data.train / data.eval: a mixture's sources and named eval sets as the spec lists them,
// their shorthands, defaults, validation naming each element, and template resolution in
// their paths (jobspec/data_sources.h, validation, dependencies).
#include "jobspec/data_sources.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "jobspec/dependencies.h"
#include "jobspec/jobspec.h"

namespace llamafleet {
namespace {

v1::JobSpec Parse(const std::string& data, const std::string& rest = "") {
  absl::StatusOr<std::vector<ParsedJob>> jobs =
      ParseJobDocuments("name: mix\nmodel: {path: /m}\ndata: " + data + "\n" + rest);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  if (!jobs.ok() || jobs->empty()) return {};
  v1::JobSpec spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  return spec;
}

TEST(DataSourcesTest, ListsGetDefaultsAndTheirFieldNames) {
  const v1::JobSpec spec = Parse(
      "{format: prompt_completion, train: [{path: /a.jsonl, weight: 3}, {path: /b.jsonl, format: "
      "tokens}],"
      " eval: [{name: chat, path: /ea.jsonl}, {name: code-v2, path: /eb.jsonl, format: text}]}");
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  const std::vector<TrainSource> train = TrainSourcesOf(spec);
  ASSERT_EQ(train.size(), 2u);
  EXPECT_EQ(train[0].field, "data.train[0].path");
  EXPECT_EQ(train[0].path, "/a.jsonl");
  EXPECT_EQ(train[0].format, v1::PROMPT_COMPLETION);  // data.format
  EXPECT_DOUBLE_EQ(train[0].weight, 3);
  EXPECT_EQ(train[1].format, v1::TOKENS);
  EXPECT_DOUBLE_EQ(train[1].weight, 1);  // the default, written by ApplyDefaults
  EXPECT_TRUE(spec.data().train(1).has_weight());
  const std::vector<EvalSource> eval = EvalSetsOf(spec);
  ASSERT_EQ(eval.size(), 2u);
  EXPECT_EQ(eval[0].name, "chat");
  EXPECT_EQ(eval[0].field, "data.eval[0].path");
  EXPECT_EQ(eval[0].format, v1::PROMPT_COMPLETION);
  EXPECT_EQ(eval[1].name, "code-v2");
  EXPECT_EQ(eval[1].format, v1::TEXT);
  EXPECT_TRUE(HasEvalData(spec));
}

TEST(DataSourcesTest, ShorthandsAreOneSourceOfWeightOneAndTheSetNamedEval) {
  const v1::JobSpec spec = Parse("{train_path: /t.jsonl, eval_path: /e.jsonl, format: tokens}");
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  const std::vector<TrainSource> train = TrainSourcesOf(spec);
  ASSERT_EQ(train.size(), 1u);
  EXPECT_EQ(train[0].field, "data.train_path");
  EXPECT_EQ(train[0].path, "/t.jsonl");
  EXPECT_EQ(train[0].format, v1::TOKENS);
  EXPECT_DOUBLE_EQ(train[0].weight, 1);
  const std::vector<EvalSource> eval = EvalSetsOf(spec);
  ASSERT_EQ(eval.size(), 1u);
  EXPECT_EQ(eval[0].name, kDefaultEvalSetName);
  EXPECT_EQ(eval[0].field, "data.eval_path");
  EXPECT_FALSE(DataNeedsTokenizer(spec));
  // The shorthand spec is stored as written: no list appears.
  EXPECT_EQ(spec.data().train_size(), 0);
  EXPECT_EQ(spec.data().eval_size(), 0);
  EXPECT_FALSE(HasEvalData(Parse("{train_path: /t.jsonl}")));
}

TEST(DataSourcesTest, TokenizerIsNeededWhenAnyFileIsNotTokens) {
  EXPECT_TRUE(
      DataNeedsTokenizer(Parse("{format: tokens, train: [{path: /a}, {path: /b, format: text}]}")));
  EXPECT_TRUE(DataNeedsTokenizer(
      Parse("{format: tokens, train: [{path: /a}], eval: [{name: e, path: /e, format: text}]}")));
  EXPECT_FALSE(DataNeedsTokenizer(
      Parse("{format: tokens, train: [{path: /a}], eval: [{name: e, path: /e}]}")));
  // A preset without a tokenizer: fine for tokens everywhere, refused otherwise.
  v1::JobSpec spec = Parse("{format: tokens, train: [{path: /a}, {path: /b, format: text}]}");
  spec.mutable_model()->clear_path();
  spec.mutable_model()->set_preset("tiny");
  EXPECT_NE(ValidateJobSpec(spec).message().find("model.tokenizer is required with model.preset"),
            std::string::npos)
      << ValidateJobSpec(spec);
  spec.mutable_data()->mutable_train(1)->set_format(v1::TOKENS);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

struct BadData {
  const char* data;
  const char* rest;
  const char* expected;
};

class DataValidationTest : public ::testing::TestWithParam<BadData> {};

TEST_P(DataValidationTest, NamesTheElement) {
  const v1::JobSpec spec = Parse(GetParam().data, GetParam().rest);
  const absl::Status status = ValidateJobSpec(spec);
  ASSERT_FALSE(status.ok()) << GetParam().data;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(GetParam().expected), std::string::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(
    Table, DataValidationTest,
    ::testing::Values(
        BadData{"{train_path: /t, train: [{path: /a}]}", "",
                "data.train set only one of data.train_path and data.train"},
        BadData{"{train_path: /t, eval_path: /e, eval: [{name: x, path: /a}]}", "",
                "data.eval set only one of data.eval_path and data.eval"},
        BadData{"{}", "", "data.train_path is required (or data.train"},
        BadData{"{train: [{path: /a}, {path: /b, weight: 0}]}", "",
                "data.train[1].weight must be > 0"},
        BadData{"{train: [{path: /a, weight: -2}]}", "",
                "data.train[0].weight must be > 0 and <= 1e6 (got -2)"},
        BadData{"{train: [{path: /a, weight: 1e7}]}", "",
                "data.train[0].weight must be > 0 and <= 1e6"},
        BadData{"{train: [{path: /a}, {weight: 2}]}", "", "data.train[1].path is required"},
        BadData{"{train: [{path: /a}], eval: [{path: /e}]}", "", "data.eval[0].name is required"},
        BadData{"{train: [{path: /a}], eval: [{name: x}]}", "", "data.eval[0].path is required"},
        BadData{"{train: [{path: /a}], eval: [{name: 'a/b', path: /e}]}", "",
                "data.eval[0].name must be 1-64 of [A-Za-z0-9_-] (got 'a/b')"},
        BadData{"{train: [{path: /a}], eval: [{name: x, path: /e}, {name: y, path: /f}, {name: x, "
                "path: /g}]}",
                "", "data.eval[2].name 'x' names an earlier set too"},
        BadData{"{train: [{path: /a}]}", "training: {eval_every_steps: 10}",
                "training.eval_every_steps needs data.eval_path or data.eval"}));

TEST(DataSourcesTest, ANotANumberWeightIsRefused) {
  v1::JobSpec spec = Parse("{train: [{path: /a}, {path: /b}]}");
  spec.mutable_data()->mutable_train(1)->set_weight(std::nan(""));
  EXPECT_NE(
      ValidateJobSpec(spec).message().find("data.train[1].weight must be > 0 and <= 1e6 (got nan)"),
      std::string::npos)
      << ValidateJobSpec(spec);
}

TEST(DataSourcesTest, EvalEveryStepsAndExportBestAcceptANamedSet) {
  const v1::JobSpec spec =
      Parse("{train: [{path: /a}], eval: [{name: held-out, path: /e}]}",
            "training: {eval_every_steps: 10}\noutput: {export: best, export_dir: /x}\n");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(DataSourcesTest, UnknownFieldsInAnElementAreNamedWithASuggestion) {
  absl::StatusOr<std::vector<ParsedJob>> jobs =
      ParseJobDocuments("name: mix\nmodel: {path: /m}\ndata: {train: [{path: /a, wieght: 2}]}\n");
  ASSERT_FALSE(jobs.ok());
  EXPECT_NE(
      jobs.status().message().find("data.train[0].wieght: unknown field (did you mean weight?)"),
      std::string::npos)
      << jobs.status();
}

TEST(DataSourcesTest, TheMixtureExampleIsValid) {
  std::ifstream in(std::string(LLAMAFLEET_EXAMPLES_DIR) + "/tiny-mixture.yaml");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text.str());
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  ApplyDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(TrainSourcesOf(spec).size(), 2u);
  EXPECT_EQ(TrainSourcesOf(spec)[1].format, v1::PROMPT_COMPLETION);
  EXPECT_EQ(EvalSetsOf(spec)[0].name, "chat");
}

TEST(DataSourcesTest, EveryDataPathIsListedForRewriting) {
  v1::JobSpec spec = Parse("{train: [{path: /a}, {path: /b}], eval: [{name: x, path: /e}]}");
  std::vector<std::string> fields;
  for (const auto& [field, value] : MutableDataPathFields(&spec)) fields.push_back(field);
  EXPECT_EQ(fields,
            (std::vector<std::string>{"data.train_path", "data.eval_path", "data.train[0].path",
                                      "data.train[1].path", "data.eval[0].path"}));
}

TEST(DataSourcesTest, TemplatesInListedPathsResolveFromTheParent) {
  v1::JobSpec parent = Parse("{train_path: /fsx/a.jsonl}", "output: {export_dir: /fsx/out}\n");
  v1::JobSpec child = Parse(
      "{train: [{path: /fsx/a.jsonl}, {path: '{{ jobs.gen.export_dir }}/b.jsonl'}],"
      " eval: [{name: x, path: '{{ jobs.gen.export_dir }}/e.jsonl'}]}",
      "depends_on: [{job: gen}]\n");
  parent.set_name("gen");
  const v1::JobSpec submitted = child;
  std::vector<BatchEntry> batch = {BatchEntry{&parent, "jobs[0].spec.", {}},
                                   BatchEntry{&child, "jobs[1].spec.", {}}};
  ASSERT_TRUE(
      ResolveBatchDependencies(batch, "alice", false, [](int64_t) -> absl::StatusOr<ParentJob> {
        return absl::NotFoundError("none");
      }).ok());
  EXPECT_EQ(child.data().train(0).path(), "/fsx/a.jsonl");
  EXPECT_EQ(child.data().train(1).path(), "/fsx/out/b.jsonl");
  EXPECT_EQ(child.data().eval(0).path(), "/fsx/out/e.jsonl");
  v1::JobSpec kept = submitted;
  KeepResolvedReferences(child, &kept);
  EXPECT_EQ(kept.data().train(1).path(), "/fsx/out/b.jsonl");
  EXPECT_EQ(kept.data().eval(0).path(), "/fsx/out/e.jsonl");
}

}  // namespace
}  // namespace llamafleet
