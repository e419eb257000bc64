// Rows of a weighted mixture of training sources for every (epoch, step, micro-step, rank):
// the order is a function of the seed alone, so it is the same at every world size and
// across any resume (elastic resumes at another world size included).
//
// An epoch of a mixture is as many global rows as all the sources hold together
// (sum of num_rows); steps_per_epoch is that over the global batch, rounded down (the last
// incomplete global batch is dropped, as Sampler does). Global row i of epoch e:
//   1. draws its source by weight from a counter-based generator keyed by (seed, e, i):
//      u = Hash(seed, e, i) / 2^64 in [0, 1) picks source k with
//      W_{<k} <= u * W < W_{<=k} (W: the sum of the weights), independently of every
//      other row;
//   2. takes that source's next row: the j-th draw of source k in epoch e (j counted from
//      0 over rows 0..i-1 of the epoch) is row perm(k, e, j / n_k)[j % n_k], where
//      perm(k, e, c) is a seeded permutation of the source's n_k rows (identity without
//      shuffle). A source drawn more often than it has rows wraps into a new permutation;
//      one drawn less leaves the rest of its rows unseen that epoch. Every epoch starts
//      each source afresh.
// Each global batch is then split exactly as Sampler splits it: rank r takes the r-th
// contiguous block, micro-step m the m-th slice of it. No Torch here.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data.h"
#include "token_cache.h"

namespace llamafleet::trainer {

// One row of a mixture: row `row` of source `source`.
struct MixtureRow {
  int32_t source = 0;
  int64_t row = 0;
  bool operator==(const MixtureRow& o) const { return source == o.source && row == o.row; }
};

class MixtureSampler {
 public:
  struct Source {
    int64_t num_rows = 0;  // rows the source holds (after packing or padding), > 0
    double weight = 1;     // relative share of the draws, > 0 and finite
  };
  struct Options {
    std::vector<Source> sources;  // at least one
    int64_t micro_batch = 1;      // rows per rank per micro-step
    int64_t grad_accum = 1;       // micro-steps per optimizer step
    int64_t world_size = 1;       // data-parallel ranks
    uint64_t seed = 42;           // data-order seed
    bool shuffle = true;          // false: each source's rows in file order (draws stay seeded)
  };
  // INVALID_ARGUMENT naming the source (0-based, as data.train[k]) for a source without rows
  // or a weight that is not > 0 and finite, and when all sources together hold fewer rows
  // than one global batch.
  static absl::StatusOr<MixtureSampler> Create(const Options& options);

  int64_t global_batch() const { return opt_.micro_batch * opt_.grad_accum * opt_.world_size; }
  int64_t rows_per_epoch() const { return rows_per_epoch_; }
  int64_t steps_per_epoch() const { return rows_per_epoch_ / global_batch(); }
  // Rows of `rank`'s micro-step `micro` in step `step` (0-based within the epoch).
  std::vector<MixtureRow> Rows(int64_t epoch, int64_t step, int64_t micro, int64_t rank) const;
  // The epoch's rows_per_epoch() global rows in order.
  std::vector<MixtureRow> EpochRows(int64_t epoch) const;
  // The source global row `index` of epoch `epoch` draws (step 1 above).
  int32_t DrawSource(int64_t epoch, int64_t index) const;

 private:
  explicit MixtureSampler(const Options& o);
  std::vector<int64_t> SourcePermutation(int32_t source, int64_t epoch, int64_t cycle) const;

  Options opt_;
  int64_t rows_per_epoch_ = 0;
  std::vector<double> cumulative_;  // cumulative_[k] = W_{<=k} / W; the last is 1
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<MixtureRow> cached_rows_;
};

// The rows `rows` of a mixture's sources (sources[k]: data.train[k]'s rows) as one batch,
// in MakeBatch's layout and padding; each row is exactly what sources[k]->MakeBatch({row})
// holds. INVALID_ARGUMENT as TokenRows::MakeBatch (an id >= vocab_size).
absl::StatusOr<Batch> MakeMixtureBatch(const std::vector<const TokenRows*>& sources,
                                       const std::vector<MixtureRow>& rows, int32_t pad_id,
                                       int64_t vocab_size);

}  // namespace llamafleet::trainer
