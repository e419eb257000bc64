// Sweeps: the points a submitted spec stands for (order, names, labels, values set as
// --set would) and the refusals, each naming its field (jobspec/sweep.h). Parsed from
// YAML as a user writes them.
#include "jobspec/sweep.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"

namespace llamafleet {
namespace {

v1::JobSpec Parse(const std::string& sweep_yaml, const std::string& extra = "") {
  const std::string text = absl::StrCat(
      "name: lr-rank\nmodel: {preset: tiny, tokenizer: /d/tok.model}\ndata: {train_path: "
      "/d/train.jsonl}\n"
      "peft: {method: lora}\n",
      extra, "sweep:\n", sweep_yaml);
  absl::StatusOr<std::vector<ParsedJob>> jobs = ParseJobDocuments(text);
  EXPECT_TRUE(jobs.ok()) << jobs.status() << "\n" << text;
  return jobs.ok() ? (*jobs)[0].spec : v1::JobSpec();
}

std::string Error(const v1::JobSpec& spec, const SweepBudget& budget = {}) {
  absl::StatusOr<std::vector<v1::JobSpec>> points = ExpandSweep(spec, "jobs[0].spec.", budget);
  EXPECT_FALSE(points.ok());
  if (points.ok()) return "";
  EXPECT_EQ(points.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(points.status().message());
}

TEST(SweepTest, AGridIsEveryCombinationTheLastParameterInNameOrderFastest) {
  absl::StatusOr<std::vector<v1::JobSpec>> points =
      ExpandSweep(Parse("  parameters:\n    training.lr: [1.0e-4, 3.0e-4]\n    peft.r: [8, 16]\n  "
                        "max_concurrent: 2\n"));
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 4u);
  // Name order: peft.r before training.lr, so lr varies fastest.
  const std::vector<std::pair<int, double>> expected = {
      {8, 1e-4}, {8, 3e-4}, {16, 1e-4}, {16, 3e-4}};
  for (int i = 0; i < 4; ++i) {
    const v1::JobSpec& p = (*points)[i];
    EXPECT_EQ(p.name(), absl::StrCat("lr-rank-", i));
    EXPECT_EQ(p.peft().r(), expected[i].first);
    EXPECT_DOUBLE_EQ(p.training().lr(), expected[i].second);
    EXPECT_EQ(p.labels().at("sweep"), "lr-rank");
    EXPECT_EQ(p.labels().at("peft.r"), i < 2 ? "8" : "16");
    EXPECT_EQ(p.labels().at("training.lr"), i % 2 == 0 ? "1.0e-4" : "3.0e-4");
    EXPECT_TRUE(p.sweep().parameters().empty());
    EXPECT_EQ(p.sweep().mode(), "grid");
    EXPECT_EQ(p.sweep().max_concurrent(), 2u);
    EXPECT_EQ(p.sweep().point().sweep(), "lr-rank");
    EXPECT_EQ(p.sweep().point().index(), i);
    EXPECT_EQ(p.sweep().point().points(), 4);
    EXPECT_EQ(p.sweep().point().values(0), absl::StrCat("peft.r=", i < 2 ? "8" : "16"));
    // Every point is a valid job on its own, and its throttle is the owner's sweep.
    v1::JobSpec with_defaults = p;
    ApplyDefaults(&with_defaults);
    EXPECT_TRUE(ValidateJobSpec(with_defaults).ok()) << ValidateJobSpec(with_defaults);
    EXPECT_EQ(SweepThrottleKey("alice", p), "alice/lr-rank");
  }
  // The same spec expands the same way (resubmission maps to the same jobs).
  absl::StatusOr<std::vector<v1::JobSpec>> again =
      ExpandSweep(Parse("  parameters:\n    training.lr: [1.0e-4, 3.0e-4]\n    peft.r: [8, 16]\n  "
                        "max_concurrent: 2\n"));
  ASSERT_TRUE(again.ok());
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals((*again)[i], (*points)[i]));
}

TEST(SweepTest, ZipTakesTheIthValueOfEach) {
  absl::StatusOr<std::vector<v1::JobSpec>> points =
      ExpandSweep(Parse("  mode: zip\n  parameters:\n    training.lr: [1.0e-4, 2.0e-4, 3.0e-4]\n   "
                        " training.lr_schedule.warmup_steps: [0, 5, 10]\n"));
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 3u);
  EXPECT_DOUBLE_EQ((*points)[2].training().lr(), 3e-4);
  EXPECT_EQ((*points)[2].training().lr_schedule().warmup_steps(), 10);
  EXPECT_EQ(SweepThrottleKey("alice", (*points)[0]), "") << "no max_concurrent: no throttle";
}

TEST(SweepTest, ASpecWithoutASweepIsItself) {
  v1::JobSpec spec = Parse("  {}\n");
  absl::StatusOr<std::vector<v1::JobSpec>> points = ExpandSweep(spec);
  ASSERT_TRUE(points.ok());
  ASSERT_EQ(points->size(), 1u);
  EXPECT_EQ((*points)[0].name(), "lr-rank");
  EXPECT_FALSE((*points)[0].has_sweep());
}

TEST(SweepTest, RefusalsNameTheirField) {
  EXPECT_TRUE(absl::StrContains(Error(Parse("  parameters:\n    training.lrr: [1]\n")),
                                "jobs[0].spec.sweep.parameters.training.lrr unknown field"))
      << Error(Parse("  parameters:\n    training.lrr: [1]\n"));
  EXPECT_TRUE(absl::StrContains(Error(Parse("  parameters:\n    peft.r: [8, eight]\n")),
                                "jobs[0].spec.sweep.parameters.peft.r[1] "));
  EXPECT_TRUE(
      absl::StrContains(Error(Parse("  parameters:\n    peft.r: []\n")), "at least one value"));
  EXPECT_TRUE(
      absl::StrContains(Error(Parse("  parameters:\n    name: [a, b]\n")), "cannot be swept"));
  EXPECT_TRUE(
      absl::StrContains(Error(Parse("  parameters:\n    labels.x: [a, b]\n")), "cannot be swept"));
  EXPECT_TRUE(absl::StrContains(Error(Parse("  mode: cross\n  parameters:\n    peft.r: [8]\n")),
                                "jobs[0].spec.sweep.mode must be grid or zip"));
  EXPECT_TRUE(absl::StrContains(
      Error(Parse("  mode: zip\n  parameters:\n    peft.r: [8, 16]\n    training.lr: [1.0e-4]\n")),
      "has 1 values, the other parameters 2"));
  EXPECT_TRUE(
      absl::StrContains(Error(Parse("  max_concurrent: 2\n")), "sweep.parameters must name"));
  // Only the coordinator sets the point.
  EXPECT_TRUE(absl::StrContains(
      Error(Parse("  parameters:\n    peft.r: [8]\n  point: {sweep: x, index: 0, points: 1}\n")),
      "sweep.point is set by the coordinator"));
  // 11 x 10 x 10 > 1,000 points.
  std::string big = "  parameters:\n    training.lr: [";
  for (int i = 0; i < 11; ++i) absl::StrAppend(&big, i == 0 ? "" : ", ", "1.0e-", i + 1);
  absl::StrAppend(
      &big, "]\n    peft.r: [1,2,3,4,5,6,7,8,9,10]\n    training.seed: [1,2,3,4,5,6,7,8,9,10]\n");
  EXPECT_TRUE(absl::StrContains(Error(Parse(big)), "more than 1000 points"));
  // A value is a YAML scalar as written, never parsed again as a document.
  EXPECT_TRUE(absl::StrContains(Error(Parse("  parameters:\n    training.lr: [\"[1, 2]\"]\n")),
                                "training.lr"));
  v1::JobSpec unnamed = Parse("  parameters:\n    peft.r: [8]\n");
  unnamed.clear_name();
  EXPECT_TRUE(absl::StrContains(Error(unnamed), "jobs[0].spec.name is required for a sweep"));
}

// A sweep of `n` one-value parameters (resources.node_labels.kN) and `seeds` seeds.
v1::JobSpec Wide(int n, int seeds) {
  v1::JobSpec spec = Parse("  parameters: {}\n");
  for (int k = 0; k < n; ++k) {
    (*spec.mutable_sweep()->mutable_parameters())[absl::StrCat("resources.node_labels.k", k)]
        .add_values("v");
  }
  for (int s = 0; s < seeds; ++s) {
    (*spec.mutable_sweep()->mutable_parameters())["training.seed"].add_values(absl::StrCat(s));
  }
  return spec;
}

TEST(SweepTest, BoundsAreCheckedFromTheRequestsSizesBeforeAnyPointIsMade) {
  // Parameters: each labels every job, beside sweep=<name>. No value is looked at.
  v1::JobSpec many = Wide(31, 2);
  (*many.mutable_sweep()->mutable_parameters())["training.lrr"].add_values("x");
  std::string error = Error(many);
  EXPECT_TRUE(
      absl::StrContains(error, "jobs[0].spec.sweep.parameters has 33 parameters; at most 31"))
      << error;
  EXPECT_FALSE(absl::StrContains(error, "lrr")) << error;
  EXPECT_TRUE(ExpandSweep(Wide(30, 2)).ok());
  // With the spec's own labels.
  v1::JobSpec labelled = Wide(26, 2);
  for (int i = 0; i < 5; ++i) (*labelled.mutable_labels())[absl::StrCat("team", i)] = "x";
  error = Error(labelled);
  EXPECT_TRUE(
      absl::StrContains(error,
                        "jobs[0].spec.sweep.parameters with the spec's 5 labels, sweep=<name> and "
                        "one label per parameter, each job would carry 33 labels; at most 32"))
      << error;
  // Values per parameter, and points, before any value is parsed.
  v1::JobSpec bad_values = Wide(0, 1001);
  (*bad_values.mutable_sweep()->mutable_parameters())["training.lrr"].add_values("x");
  error = Error(bad_values);
  EXPECT_TRUE(absl::StrContains(
      error, "jobs[0].spec.sweep.parameters.training.seed has 1001 values; at most 1000"))
      << error;
  // The room a batch has left.
  SweepBudget room;
  room.max_points = 3;
  error = Error(Wide(1, 4), room);
  EXPECT_TRUE(
      absl::StrContains(error,
                        "sweep.parameters make 4 points; this batch has room for 3 more (at most "
                        "1000 jobs per call)"))
      << error;
  room = SweepBudget();
  room.max_bytes = 1000;
  error = Error(Wide(1, 4), room);
  EXPECT_TRUE(
      absl::StrContains(error, "of job specs per sweep; this batch has room for 1000 B more"))
      << error;
  // The bytes of the points' specs: a 20 KB spec 1,000 times is more than 16 MiB.
  v1::JobSpec big = Wide(0, 1000);
  big.mutable_peft()->add_target_modules(std::string(20000, 'x'));
  error = Error(big);
  EXPECT_TRUE(absl::StrContains(error, "sweep.parameters make 1000 jobs of up to 19.")) << error;
  EXPECT_TRUE(absl::StrContains(error, "at most 16.0 MiB of job specs per sweep")) << error;
  big.mutable_peft()->set_target_modules(0, std::string(10000, 'x'));
  absl::StatusOr<std::vector<v1::JobSpec>> points = ExpandSweep(big);
  ASSERT_TRUE(points.ok()) << points.status();
  int64_t bytes = 0;
  for (const v1::JobSpec& p : *points) bytes += static_cast<int64_t>(p.ByteSizeLong());
  EXPECT_LE(bytes, kMaxSweepSpecBytes);
}

// Each point is the spec with each of its parameters set once, in name order, as --set
// would set them; the spec's other fields kept.
TEST(SweepTest, EveryPointKeepsTheSpecAndSetsItsValues) {
  v1::JobSpec spec = Wide(3, 3);
  spec.mutable_training()->set_lr(0.5);
  absl::StatusOr<std::vector<v1::JobSpec>> points = ExpandSweep(spec);
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const v1::JobSpec& p = (*points)[i];
    EXPECT_EQ(p.training().seed(), i);
    EXPECT_DOUBLE_EQ(p.training().lr(), 0.5);
    EXPECT_EQ(p.resources().node_labels().at("k2"), "v");
    EXPECT_EQ(p.sweep().point().values_size(), 4);
    EXPECT_EQ(p.labels().size(), 5u);
  }
}

TEST(SweepTest, ValidationRefusesAnUnexpandedSweep) {
  v1::JobSpec spec = Parse("  parameters:\n    peft.r: [8, 16]\n");
  ApplyDefaults(&spec);
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_TRUE(absl::StrContains(s.message(), "sweep.parameters stand for one job per point")) << s;
}

}  // namespace
}  // namespace llamafleet
