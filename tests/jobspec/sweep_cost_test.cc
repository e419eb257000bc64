// What a sweep's expansion costs (jobspec/sweep.h), counted in heap allocations rather
// than timed, so the count is the same on any machine: linear in the points' specs, so ten
// times the parameters over the same points costs at most about ten times as much. (Setting
// each parameter on a fresh copy of the whole spec, parameters included, cost the square.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "absl/strings/str_cat.h"
#include "jobspec/sweep.h"
#include "tests/testing/spec_builder.h"

namespace {
std::atomic<int64_t> allocations{0};
}  // namespace

// Every allocation of this program is counted (the counting is all these replacements add).
void* operator new(size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace llamafleet {
namespace {

// A spec swept over `seeds` seeds and `labels` one-value resources.node_labels.kN parameters.
v1::JobSpec Swept(int labels, int seeds) {
  v1::JobSpec spec = testing::SpecBuilder("cost").TrainPath("/d/train.jsonl").Build();
  v1::SweepSpec* sweep = spec.mutable_sweep();
  for (int k = 0; k < labels; ++k) {
    (*sweep->mutable_parameters())[absl::StrCat("resources.node_labels.k", k)].add_values("v");
  }
  for (int s = 0; s < seeds; ++s)
    (*sweep->mutable_parameters())["training.seed"].add_values(absl::StrCat(s));
  return spec;
}

// A zip sweep of `params` parameters (resources.node_labels.kN) of `points` values each.
v1::JobSpec Zipped(int params, int points) {
  v1::JobSpec spec = testing::SpecBuilder("cost").TrainPath("/d/train.jsonl").Build();
  v1::SweepSpec* sweep = spec.mutable_sweep();
  sweep->set_mode(kSweepZip);
  for (int k = 0; k < params; ++k) {
    v1::SweepValues& values =
        (*sweep->mutable_parameters())[absl::StrCat("resources.node_labels.k", k)];
    for (int i = 0; i < points; ++i) values.add_values(absl::StrCat("v", i));
  }
  return spec;
}

int64_t AllocationsToExpand(const v1::JobSpec& spec, size_t points) {
  const int64_t before = allocations.load();
  absl::StatusOr<std::vector<v1::JobSpec>> out = ExpandSweep(spec);
  const int64_t count = allocations.load() - before;
  EXPECT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out.ok() ? out->size() : 0, points);
  std::printf("%zu points: %lld allocations\n", points, static_cast<long long>(count));
  return count;
}

TEST(SweepCostTest, TenTimesTheParametersCostAtMostAboutTenTimesAsMuch) {
  const int64_t three = AllocationsToExpand(Zipped(3, 100), 100);
  const int64_t thirty = AllocationsToExpand(Zipped(30, 100), 100);
  EXPECT_LE(thirty, 12 * three) << three << " allocations for 3 parameters, " << thirty
                                << " for 30";
}

TEST(SweepCostTest, TenTimesThePointsCostAtMostAboutTenTimesAsMuch) {
  const int64_t hundred = AllocationsToExpand(Swept(30, 100), 100);
  const int64_t thousand = AllocationsToExpand(Swept(30, 1000), 1000);
  EXPECT_LE(thousand, 12 * hundred)
      << hundred << " allocations for 100 points, " << thousand << " for 1000";
}

}  // namespace
}  // namespace llamafleet
