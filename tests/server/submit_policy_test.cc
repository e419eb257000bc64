// The submission policy's pure parts (server/submit_policy.h): lexical path resolution,
// roots, llamafleet's reserved directory, queues and per-role priority. The same checks
// against a real coordinator are in tests/security.
#include "server/submit_policy.h"

#include <gtest/gtest.h>

#include "jobspec/jobspec.h"
#include "tests/testing/spec_builder.h"

namespace llamafleet {
namespace {

TEST(NormalizeAbsolutePathTest, ResolvesDotsAndSlashesLexically) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/", "/"},           {"/a/b", "/a/b"},       {"/a/b/", "/a/b"},     {"//a///b", "/a/b"},
      {"/a/./b", "/a/b"},   {"/a/b/..", "/a"},      {"/a/../../..", "/"},  {"/a/../b/./c/..", "/b"},
      {"/fsx/..x", "/fsx/..x"}};
  for (const auto& [in, out] : cases) {
    ASSERT_TRUE(NormalizeAbsolutePath(in).has_value()) << in;
    EXPECT_EQ(*NormalizeAbsolutePath(in), out) << in;
  }
  EXPECT_FALSE(NormalizeAbsolutePath("").has_value());
  EXPECT_FALSE(NormalizeAbsolutePath("a/b").has_value());
  EXPECT_FALSE(NormalizeAbsolutePath("./a").has_value());
}

TEST(PathWithinTest, WholeComponentsOnly) {
  EXPECT_TRUE(PathWithin("/fsx", "/fsx"));
  EXPECT_TRUE(PathWithin("/fsx/a", "/fsx"));
  EXPECT_FALSE(PathWithin("/fsx2", "/fsx"));
  EXPECT_FALSE(PathWithin("/fs", "/fsx"));
  EXPECT_TRUE(PathWithin("/anything", "/"));
}

TEST(NormalizeRootsTest, RefusesRelativeRootsNamingTheSetting) {
  absl::StatusOr<std::vector<std::string>> roots = NormalizeRoots({"/fsx/", "/fsx", "/b/../c"}, "--path-root");
  ASSERT_TRUE(roots.ok());
  EXPECT_EQ(*roots, (std::vector<std::string>{"/fsx", "/c"}));
  absl::StatusOr<std::vector<std::string>> bad = NormalizeRoots({"data"}, "paths.roots");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("paths.roots"), std::string::npos);
}

TEST(DefaultCheckpointDirTest, UnderTheFirstRootAndRecognised) {
  const std::vector<std::string> roots = {"/fsx", "/scratch"};
  EXPECT_EQ(DefaultCheckpointDir(roots, 42), "/fsx/llamafleet/checkpoints/42");
  EXPECT_EQ(DefaultCheckpointDir({"/"}, 7), "/llamafleet/checkpoints/7");
  EXPECT_EQ(DefaultCheckpointDirJob(roots, "/fsx/llamafleet/checkpoints/42/step-10"), 42);
  EXPECT_EQ(DefaultCheckpointDirJob(roots, "/scratch/llamafleet/checkpoints/3"), 3);
  EXPECT_FALSE(DefaultCheckpointDirJob(roots, "/fsx/llamafleet/checkpoints").has_value());
  EXPECT_FALSE(DefaultCheckpointDirJob(roots, "/fsx/other/checkpoints/42").has_value());
  EXPECT_EQ(InsideReservedDir(roots, "/scratch/llamafleet/x"), "/scratch/llamafleet");
  EXPECT_FALSE(InsideReservedDir(roots, "/fsx/llamafleet2").has_value());
}

v1::JobSpec Spec(const std::string& extra) {
  return testing::SpecBuilder("j").Tokenizer("").TrainPath("/fsx/d.jsonl").Format(v1::TOKENS).Yaml(extra).WithDefaults();
}

TEST(ApplySubmitPolicyTest, NormalizesPathsInsideARoot) {
  SubmitPolicy policy;
  policy.path_roots = {"/fsx"};
  v1::JobSpec spec = Spec("checkpoint: {dir: /fsx/a/../ck/, resume: latest}\n");
  ASSERT_TRUE(ApplySubmitPolicy(policy, v1::USER, "spec.", &spec).ok());
  EXPECT_EQ(spec.checkpoint().dir(), "/fsx/ck");
  EXPECT_EQ(spec.checkpoint().resume(), "latest") << "a keyword, not a path";
  EXPECT_FALSE(spec.has_peft()) << "a full finetune's spec gets no empty peft block";
}

TEST(ApplySubmitPolicyTest, EachRefusalNamesItsField) {
  SubmitPolicy policy;
  policy.path_roots = {"/fsx"};
  policy.queues = {"research"};
  policy.max_priority[v1::USER] = 10;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"output: {export_dir: /fsx/../etc}\n", "output.export_dir"},
      {"output: {export_dir: /fsx}\n", "output.export_dir"},  // the root itself
      {"checkpoint: {dir: /fsx/llamafleet/checkpoints/1}\n", "checkpoint.dir"},
      {"checkpoint: {resume: fsx/step-1}\n", "checkpoint.resume"},
      {"queue: other\n", "queue"},
      {"priority: 11\n", "priority"},
  };
  for (const auto& [yaml, field] : cases) {
    v1::JobSpec spec = Spec(yaml);
    absl::Status s = ApplySubmitPolicy(policy, v1::USER, "jobs[2].spec.", &spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << yaml;
    std::vector<v1::FieldViolation> v = FieldViolationsOf(s);
    ASSERT_EQ(v.size(), 1u) << s;
    EXPECT_EQ(v[0].field(), "jobs[2].spec." + field) << s;
  }
  v1::JobSpec spec = Spec("queue: research\npriority: 11\n");
  EXPECT_TRUE(ApplySubmitPolicy(policy, v1::ADMIN, "spec.", &spec).ok()) << "no maximum for admins";
  policy.path_roots.clear();
  spec = Spec("");
  absl::Status s = ApplySubmitPolicy(policy, v1::ADMIN, "spec.", &spec);
  EXPECT_NE(s.message().find("--path-root"), std::string::npos) << s;
}

}  // namespace
}  // namespace llamafleet
