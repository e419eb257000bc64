// depends_on: resolving a submitted batch (names, ids, cycles, owners, templates) and the
// verdict each scheduling pass takes (jobspec/dependencies.h), as tables.
#include "jobspec/dependencies.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "tests/testing/spec_builder.h"

namespace llamafleet {
namespace {

v1::JobSpec Job(const std::string& name, const std::vector<std::string>& parents = {},
                const std::string& export_dir = "") {
  testing::SpecBuilder spec(name);
  spec.Tokenizer("/d/tok.model").ExportDir(export_dir);
  for (const std::string& p : parents) spec.DependsOn(p);
  return spec.WithDefaults();
}

// Job 41 is alice's (export /fsx/alice/out41), 42 bob's; nothing else exists.
absl::StatusOr<ParentJob> Lookup(int64_t id) {
  if (id == 41) return ParentJob{"alice", "base", "/fsx/alice/out41"};
  if (id == 42) return ParentJob{"bob", "other", ""};
  return absl::NotFoundError("no such job");
}

absl::Status Resolve(std::vector<v1::JobSpec>& specs, std::vector<BatchEntry>* out = nullptr,
                     const std::string& user = "alice", bool admin = false) {
  std::vector<BatchEntry> batch;
  for (size_t i = 0; i < specs.size(); ++i) {
    batch.push_back(BatchEntry{&specs[i], absl::StrCat("jobs[", i, "].spec."), {}});
  }
  absl::Status s = ResolveBatchDependencies(batch, user, admin, Lookup);
  if (out != nullptr) *out = batch;
  return s;
}

TEST(DependenciesTest, NamesEarlierInTheBatchBecomeBatchParents) {
  std::vector<v1::JobSpec> specs = {Job("finetune", {}, "/fsx/alice/export"), Job("eval", {"finetune", "41"})};
  specs[1].mutable_model()->clear_preset();
  specs[1].mutable_model()->set_path("{{ jobs.finetune.export_dir }}/merged");
  specs[1].mutable_data()->set_eval_path("{{jobs.41.export_dir}}/eval.jsonl");
  std::vector<BatchEntry> batch;
  ASSERT_TRUE(Resolve(specs, &batch).ok()) << Resolve(specs);
  EXPECT_TRUE(batch[0].batch_parents.empty());
  ASSERT_EQ(batch[1].batch_parents.size(), 1u);
  EXPECT_EQ(batch[1].batch_parents[0], (std::pair<int, int>{0, 0}));  // depends_on[0] -> jobs[0]
  EXPECT_EQ(specs[1].model().path(), "/fsx/alice/export/merged");
  EXPECT_EQ(specs[1].data().eval_path(), "/fsx/alice/out41/eval.jsonl");
  EXPECT_EQ(specs[1].depends_on(0).on(), "succeeded");  // the default
}

struct BadBatch {
  const char* what;
  std::vector<v1::JobSpec> specs;
  absl::StatusCode code;
  const char* message;
};

std::vector<BadBatch> BadBatches() {
  v1::JobSpec no_depends = Job("eval");
  no_depends.mutable_model()->clear_preset();
  no_depends.mutable_model()->set_path("{{ jobs.finetune.export_dir }}");
  v1::JobSpec no_export = Job("eval", {"finetune"});
  no_export.mutable_data()->set_train_path("{{ jobs.finetune.export_dir }}/x.jsonl");
  v1::JobSpec other_template = Job("eval", {"finetune"});
  other_template.mutable_data()->set_train_path("{{ jobs.finetune.checkpoint_dir }}");
  v1::JobSpec written = Job("eval", {"finetune"}, "{{ jobs.finetune.export_dir }}/again");
  v1::JobSpec unclosed = Job("eval", {"finetune"});
  unclosed.mutable_data()->set_eval_path("{{ jobs.finetune.export_dir");
  return {
      {"unknown name", {Job("a", {"nope"})}, absl::StatusCode::kInvalidArgument,
       "jobs[0].spec.depends_on[0].job names \"nope\", which is neither a job id nor the name of a job in this batch"},
      {"itself", {Job("a", {"a"})}, absl::StatusCode::kInvalidArgument, "cannot depend on itself"},
      {"later job", {Job("a", {"b"}), Job("b")}, absl::StatusCode::kInvalidArgument,
       "which comes later in this batch (jobs[1]); list a job after the jobs it depends on"},
      {"cycle", {Job("a", {"b"}), Job("b", {"a"})}, absl::StatusCode::kInvalidArgument,
       "jobs[0].spec.depends_on[0].job forms a cycle: a -> b -> a"},
      {"ambiguous", {Job("x"), Job("x"), Job("c", {"x"})}, absl::StatusCode::kInvalidArgument,
       "which 2 jobs of this batch are called (jobs[0], jobs[1])"},
      {"twice", {Job("a"), Job("b", {"a", "a"})}, absl::StatusCode::kInvalidArgument,
       "depends_on[1].job names \"a\" a second time"},
      {"missing id", {Job("a", {"7"})}, absl::StatusCode::kInvalidArgument, "names job 7, which does not exist"},
      {"another user's job", {Job("a", {"42"})}, absl::StatusCode::kPermissionDenied,
       "jobs[0].spec.depends_on[0].job: job 42 is owned by bob; only its owner or an admin may depend on it"},
      {"template without depends_on", {Job("finetune", {}, "/e"), no_depends}, absl::StatusCode::kInvalidArgument,
       "jobs[1].spec.model.path reads job \"finetune\"'s export_dir, but depends_on does not name that job"},
      {"parent without export", {Job("finetune"), no_export}, absl::StatusCode::kInvalidArgument,
       "but that job sets no output.export_dir"},
      {"unknown template", {Job("finetune", {}, "/e"), other_template}, absl::StatusCode::kInvalidArgument,
       "the only one is {{ jobs.NAME.export_dir }}"},
      {"template in a written dir", {Job("finetune", {}, "/e"), written}, absl::StatusCode::kInvalidArgument,
       "jobs[1].spec.output.export_dir may not hold a template"},
      {"unclosed template", {Job("finetune", {}, "/e"), unclosed}, absl::StatusCode::kInvalidArgument,
       "data.eval_path has \"{{\" without a closing \"}}\""},
  };
}

TEST(DependenciesTest, BadReferencesAreRefusedNamingTheField) {
  for (BadBatch& c : BadBatches()) {
    absl::Status s = Resolve(c.specs);
    EXPECT_EQ(s.code(), c.code) << c.what << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.message)) << c.what << ": " << s.message();
    if (c.code == absl::StatusCode::kInvalidArgument) {
      EXPECT_FALSE(FieldViolationsOf(s).empty()) << c.what;
    }
  }
}

TEST(DependenciesTest, AnAdminMayDependOnAnyonesJob) {
  std::vector<v1::JobSpec> specs = {Job("a", {"42"})};
  EXPECT_TRUE(Resolve(specs, nullptr, "root", /*admin=*/true).ok());
}

TEST(DependenciesTest, ShapeRulesAreValidated) {
  v1::JobSpec spec = Job("a", {"b"});
  spec.mutable_depends_on(0)->set_on("failed");
  spec.add_depends_on()->set_job("a b");
  spec.mutable_depends_on(1)->set_on("finished");
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_TRUE(absl::StrContains(s.message(), "depends_on[0].on must be succeeded or finished (got \"failed\")")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "depends_on[1].job must be a job id or the name")) << s;
  v1::JobSpec many = Job("a");
  for (int i = 0; i < kMaxDependencies + 1; ++i) many.add_depends_on()->set_job(absl::StrCat(i + 1));
  ApplyDefaults(&many);
  EXPECT_TRUE(absl::StrContains(ValidateJobSpec(many).message(), "depends_on must have at most 32 entries"));
  // From YAML, `on` is a plain key (not YAML 1.1's boolean).
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(
      "name: e\nmodel: {preset: tiny, tokenizer: /t}\ndata: {train_path: /d}\n"
      "depends_on: [{job: '41', on: finished}, {job: finetune}]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  v1::JobSpec from_yaml = (*parsed)[0].spec;
  ApplyDefaults(&from_yaml);
  ASSERT_EQ(from_yaml.depends_on_size(), 2);
  EXPECT_EQ(from_yaml.depends_on(0).on(), "finished");
  EXPECT_EQ(from_yaml.depends_on(1).on(), "succeeded");
  EXPECT_TRUE(ValidateJobSpec(from_yaml).ok()) << ValidateJobSpec(from_yaml);
}

struct VerdictCase {
  std::vector<std::pair<std::string, std::string>> deps;  // {job, on}
  std::map<int64_t, v1::JobState> states;
  DependencyVerdict::Kind kind;
  const char* message;
};

TEST(DependenciesTest, VerdictTable) {
  using K = DependencyVerdict;
  const std::vector<VerdictCase> cases = {
      {{{"1", "succeeded"}}, {{1, v1::SUCCEEDED}}, K::kReady, ""},
      {{{"1", "succeeded"}}, {{1, v1::RUNNING}}, K::kWaiting, "waiting for job 1 (RUNNING)"},
      {{{"1", "succeeded"}}, {{1, v1::QUEUED}}, K::kWaiting, "waiting for job 1 (QUEUED)"},
      {{{"1", "succeeded"}}, {{1, v1::RESTARTING}}, K::kWaiting, "waiting for job 1 (RESTARTING)"},
      {{{"1", "succeeded"}}, {{1, v1::FAILED}}, K::kImpossible, "dependency job 1 FAILED (depends_on: succeeded)"},
      {{{"1", "succeeded"}}, {{1, v1::CANCELLED}}, K::kImpossible, "dependency job 1 CANCELLED (depends_on: succeeded)"},
      {{{"1", "finished"}}, {{1, v1::FAILED}}, K::kReady, ""},
      {{{"1", "finished"}}, {{1, v1::CANCELLED}}, K::kReady, ""},
      {{{"1", "finished"}}, {{1, v1::PREEMPTING}}, K::kWaiting, "waiting for job 1 (PREEMPTING)"},
      {{{"1", "succeeded"}}, {}, K::kImpossible, "dependency job 1 no longer exists (depends_on: succeeded)"},
      // The first parent not done is named; one that can no longer succeed decides at once.
      {{{"1", "succeeded"}, {"2", "succeeded"}}, {{1, v1::SUCCEEDED}, {2, v1::RUNNING}}, K::kWaiting,
       "waiting for job 2 (RUNNING)"},
      {{{"1", "succeeded"}, {"2", "succeeded"}}, {{1, v1::RUNNING}, {2, v1::FAILED}}, K::kImpossible,
       "dependency job 2 FAILED"},
      {{}, {}, K::kReady, ""},
  };
  for (const VerdictCase& c : cases) {
    v1::JobSpec spec;
    for (const auto& [job, on] : c.deps) {
      v1::JobDependency* d = spec.add_depends_on();
      d->set_job(job);
      d->set_on(on);
    }
    DependencyVerdict v = EvaluateDependencies(spec, c.states);
    EXPECT_EQ(v.kind, c.kind) << spec.ShortDebugString() << ": " << v.message;
    EXPECT_TRUE(absl::StrContains(v.message, c.message)) << v.message;
  }
}

}  // namespace
}  // namespace llamafleet
