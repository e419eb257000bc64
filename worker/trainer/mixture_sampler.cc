#include "mixture_sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "micro_batch_slice.h"

namespace llamafleet::trainer {
namespace {

// splitmix64's finalizer: a bijective mix of 64 bits, the generator's whole state being
// its input, so any draw is computed on its own (counter-based).
uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Distinct streams per purpose: the draws, and each source's permutations.
constexpr uint64_t kDrawStream = 0x6D69787475726531ull;
constexpr uint64_t kPermStream = 0x7065726D75746531ull;

uint64_t Key(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b, uint64_t c) {
  return Mix64(Mix64(Mix64(Mix64(seed ^ stream) + a) + b) + c);
}

}  // namespace

absl::StatusOr<MixtureSampler> MixtureSampler::Create(const Options& o) {
  if (o.micro_batch <= 0 || o.grad_accum <= 0 || o.world_size <= 0) {
    return absl::InvalidArgumentError("micro_batch, grad_accum and world_size must be > 0");
  }
  if (o.sources.empty()) return absl::InvalidArgumentError("a mixture needs at least one source");
  int64_t rows = 0;
  for (size_t k = 0; k < o.sources.size(); ++k) {
    const Source& s = o.sources[k];
    if (s.num_rows <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("data.train[", k, "] has no rows to draw"));
    }
    if (!(s.weight > 0 && std::isfinite(s.weight))) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.train[", k, "].weight must be > 0 and finite (got ", s.weight, ")"));
    }
    rows += s.num_rows;
  }
  const int64_t global = o.micro_batch * o.grad_accum * o.world_size;
  if (rows < global) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the mixture's sources hold ", rows, " rows together, fewer than one global batch of ",
        global, " (micro_batch_size ", o.micro_batch, " x grad_accum ", o.grad_accum,
        " x world size ", o.world_size, ")"));
  }
  return MixtureSampler(o);
}

MixtureSampler::MixtureSampler(const Options& o) : opt_(o) {
  double total = 0;
  for (const Source& s : opt_.sources) {
    rows_per_epoch_ += s.num_rows;
    total += s.weight;
  }
  double running = 0;
  for (const Source& s : opt_.sources) {
    running += s.weight;
    cumulative_.push_back(running / total);
  }
  cumulative_.back() = 1.0;  // rounding never leaves a u without a source
}

int32_t MixtureSampler::DrawSource(int64_t epoch, int64_t index) const {
  const uint64_t bits =
      Key(opt_.seed, kDrawStream, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index), 0);
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // exact in [0, 1)
  const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
  return static_cast<int32_t>(
      std::min<ptrdiff_t>(it - cumulative_.begin(), cumulative_.size() - 1));
}

std::vector<int64_t> MixtureSampler::SourcePermutation(int32_t source, int64_t epoch,
                                                       int64_t cycle) const {
  const int64_t n = opt_.sources[source].num_rows;
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  if (!opt_.shuffle) return perm;
  uint64_t counter = Key(opt_.seed, kPermStream, static_cast<uint64_t>(source),
                         static_cast<uint64_t>(epoch), static_cast<uint64_t>(cycle));
  for (int64_t i = n - 1; i > 0; --i) {
    // Unbiased index in [0, i] by rejection.
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t r;
    do {
      r = Mix64(++counter);
    } while (r >= limit);
    std::swap(perm[i], perm[r % bound]);
  }
  return perm;
}

std::vector<MixtureRow> MixtureSampler::EpochRows(int64_t epoch) const {
  const size_t k_sources = opt_.sources.size();
  std::vector<int64_t> drawn(k_sources, 0);
  std::vector<std::vector<int64_t>> perm(k_sources);  // of each source's current cycle
  std::vector<MixtureRow> out;
  out.reserve(static_cast<size_t>(rows_per_epoch_));
  for (int64_t i = 0; i < rows_per_epoch_; ++i) {
    const int32_t k = DrawSource(epoch, i);
    const int64_t n = opt_.sources[k].num_rows;
    const int64_t j = drawn[k]++;
    if (j % n == 0) perm[k] = SourcePermutation(k, epoch, j / n);
    out.push_back({k, perm[k][j % n]});
  }
  return out;
}

std::vector<MixtureRow> MixtureSampler::Rows(int64_t epoch, int64_t step, int64_t micro,
                                             int64_t rank) const {
  if (epoch != cached_epoch_) {
    cached_rows_ = EpochRows(epoch);
    cached_epoch_ = epoch;
  }
  return MicroBatchSlice(cached_rows_, opt_, step, micro, rank);
}

absl::StatusOr<Batch> MakeMixtureBatch(const std::vector<const TokenRows*>& sources,
                                       const std::vector<MixtureRow>& rows, int32_t pad_id,
                                       int64_t vocab_size) {
  std::vector<Batch> one_row;
  one_row.reserve(rows.size());
  Batch b;
  b.rows = static_cast<int64_t>(rows.size());
  for (const MixtureRow& r : rows) {
    absl::StatusOr<Batch> row = sources[r.source]->MakeBatch({r.row}, pad_id, vocab_size);
    if (!row.ok()) return row.status();
    b.seq_len = std::max(b.seq_len, row->seq_len);
    b.real_tokens += row->real_tokens;
    one_row.push_back(*std::move(row));
  }
  b.tokens.assign(b.rows * b.seq_len, pad_id);
  b.target.assign(b.rows * b.seq_len, 0);
  // Each row's documents (packed rows hold several), read back from its positions.
  std::vector<std::vector<int32_t>> documents(b.rows);
  for (int64_t i = 0; i < b.rows; ++i) {
    const Batch& r = one_row[i];
    std::copy(r.tokens.begin(), r.tokens.end(), b.tokens.begin() + i * b.seq_len);
    std::copy(r.target.begin(), r.target.end(), b.target.begin() + i * b.seq_len);
    if (r.position.empty()) {
      documents[i] = {static_cast<int32_t>(r.seq_len)};
      continue;
    }
    int64_t start = 0;
    for (int64_t t = 1; t <= r.seq_len; ++t) {
      if (t == r.seq_len || r.position[t] == 0) {
        documents[i].push_back(static_cast<int32_t>(t - start));
        start = t;
      }
    }
  }
  SetDocuments(documents, &b);
  return b;
}

}  // namespace llamafleet::trainer
