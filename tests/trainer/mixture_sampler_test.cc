// MixtureSampler (worker/trainer/mixture_sampler.h): draws by weight within a stated
// binomial bound, the same rows at world sizes 1, 2 and 3 and across a resume, sources
// that run out wrapping into a new permutation, bad sources named. No Torch; < 1 s.
#include "mixture_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace llamafleet::trainer {
namespace {

MixtureSampler Make(std::vector<MixtureSampler::Source> sources, int64_t micro, int64_t accum,
                    int64_t world, uint64_t seed = 42) {
  MixtureSampler::Options o;
  o.sources = std::move(sources);
  o.micro_batch = micro;
  o.grad_accum = accum;
  o.world_size = world;
  o.seed = seed;
  absl::StatusOr<MixtureSampler> s = MixtureSampler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

// Each source's count over N independent draws is Binomial(N, p_k): within 5 standard
// deviations of N p_k (a false failure has probability below 1e-6 per source).
TEST(MixtureSamplerTest, TenThousandDrawsMatchTheWeightsWithinFiveSigma) {
  const std::vector<double> weights = {1, 2, 7, 0.5};
  std::vector<MixtureSampler::Source> sources;
  for (double w : weights) sources.push_back({2500, w});  // 10,000 rows: one epoch
  const MixtureSampler s = Make(sources, 4, 1, 1);
  ASSERT_EQ(s.rows_per_epoch(), 10000);
  for (uint64_t seed : {42ull, 7ull}) {
    const MixtureSampler seeded = Make(sources, 4, 1, 1, seed);
    std::vector<int64_t> counts(weights.size(), 0);
    for (const MixtureRow& r : seeded.EpochRows(0)) ++counts[r.source];
    const double total = 10.5, n = 10000;
    for (size_t k = 0; k < weights.size(); ++k) {
      const double p = weights[k] / total;
      const double sigma = std::sqrt(n * p * (1 - p));
      EXPECT_LE(std::abs(counts[k] - n * p), 5 * sigma)
          << "source " << k << " drawn " << counts[k] << " times, expected " << n * p << " +- "
          << sigma;
    }
  }
}

// The same global batch (12 rows a step) split three ways: concatenating the ranks'
// micro-batches in (rank, micro) order gives the same rows at every world size.
TEST(MixtureSamplerTest, RowsAreTheSameAtWorldSizesOneTwoAndThree) {
  const std::vector<MixtureSampler::Source> sources = {{50, 3}, {7, 1}, {30, 1.5}};
  struct Split {
    int64_t micro, accum, world;
  };
  std::vector<std::vector<MixtureRow>> runs;
  for (const Split& split : {Split{4, 3, 1}, Split{2, 3, 2}, Split{4, 1, 3}}) {
    const MixtureSampler s = Make(sources, split.micro, split.accum, split.world);
    ASSERT_EQ(s.global_batch(), 12);
    ASSERT_EQ(s.steps_per_epoch(), 87 / 12);
    std::vector<MixtureRow> all;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      for (int64_t step = 0; step < s.steps_per_epoch(); ++step) {
        for (int64_t rank = 0; rank < split.world; ++rank) {
          for (int64_t micro = 0; micro < split.accum; ++micro) {
            for (const MixtureRow& r : s.Rows(epoch, step, micro, rank)) all.push_back(r);
          }
        }
      }
    }
    runs.push_back(std::move(all));
  }
  EXPECT_EQ(runs[0].size(), 2u * 7 * 12);
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

// A sampler made afresh (another process, another world size) at any (epoch, step) gives
// the rows the first one gave there: nothing but the seed decides them.
TEST(MixtureSamplerTest, AResumeAtAnyStepAndWorldSizeReproducesTheRows) {
  const std::vector<MixtureSampler::Source> sources = {{40, 1}, {9, 2}};
  const MixtureSampler first = Make(sources, 2, 1, 2);
  std::vector<std::vector<MixtureRow>> seen;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t step = 0; step < first.steps_per_epoch(); ++step) {
      std::vector<MixtureRow> rows = first.Rows(epoch, step, 0, 0);
      const std::vector<MixtureRow> other = first.Rows(epoch, step, 0, 1);
      rows.insert(rows.end(), other.begin(), other.end());
      seen.push_back(rows);
    }
  }
  // Resumed at epoch 2, step 5 on one rank with grad_accum 2 (the same global batch of 4).
  const MixtureSampler resumed = Make(sources, 2, 2, 1);
  std::vector<MixtureRow> rows = resumed.Rows(2, 5, 0, 0);
  const std::vector<MixtureRow> second = resumed.Rows(2, 5, 1, 0);
  rows.insert(rows.end(), second.begin(), second.end());
  EXPECT_EQ(rows, seen[2 * first.steps_per_epoch() + 5]);
  // Epochs differ from each other, and seeds from each other.
  EXPECT_NE(first.EpochRows(0), first.EpochRows(1));
  EXPECT_NE(first.EpochRows(0), Make(sources, 2, 1, 2, 43).EpochRows(0));
}

// A small source drawn often: each run through its rows is a whole permutation of them,
// and the next run is another permutation (it wraps, never repeats a row early).
TEST(MixtureSamplerTest, ASourceThatRunsOutWrapsIntoANewPermutation) {
  const MixtureSampler s = Make({{5, 10}, {200, 1}}, 1, 1, 1);
  std::vector<int64_t> small;
  for (const MixtureRow& r : s.EpochRows(0)) {
    if (r.source == 0) small.push_back(r.row);
  }
  ASSERT_GE(small.size(), 100u);  // about 205 * 10/11 draws of a 5-row source
  for (size_t c = 0; c + 5 <= small.size(); c += 5) {
    const std::set<int64_t> cycle(small.begin() + c, small.begin() + c + 5);
    EXPECT_EQ(cycle, (std::set<int64_t>{0, 1, 2, 3, 4})) << "cycle " << c / 5;
  }
  EXPECT_NE(std::vector<int64_t>(small.begin(), small.begin() + 5),
            std::vector<int64_t>(small.begin() + 5, small.begin() + 10));
}

TEST(MixtureSamplerTest, WithoutShuffleEachSourceIsReadInOrder) {
  MixtureSampler::Options o;
  o.sources = {{6, 1}, {4, 1}};
  o.shuffle = false;
  absl::StatusOr<MixtureSampler> s = MixtureSampler::Create(o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<int64_t> next(2, 0);
  for (const MixtureRow& r : s->EpochRows(0)) {
    EXPECT_EQ(r.row, next[r.source] % o.sources[r.source].num_rows);
    ++next[r.source];
  }
}

TEST(MixtureSamplerTest, BadSourcesAreNamed) {
  MixtureSampler::Options o;
  o.sources = {{10, 1}, {0, 1}};
  EXPECT_EQ(MixtureSampler::Create(o).status().message(), "data.train[1] has no rows to draw");
  o.sources = {{10, 1}, {3, 0}};
  EXPECT_EQ(MixtureSampler::Create(o).status().message(),
            "data.train[1].weight must be > 0 and finite (got 0)");
  o.sources = {{10, NAN}};
  EXPECT_FALSE(MixtureSampler::Create(o).ok());
  o.sources = {{2, 1}, {1, 5}};
  o.micro_batch = 4;
  EXPECT_NE(MixtureSampler::Create(o).status().message().find(
                "hold 3 rows together, fewer than one global batch of 4"),
            std::string::npos);
  o.sources.clear();
  EXPECT_FALSE(MixtureSampler::Create(o).ok());
}

}  // namespace
}  // namespace llamafleet::trainer
