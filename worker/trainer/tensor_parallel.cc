#include "tensor_parallel.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util.h"

namespace llamafleet::trainer {

absl::Status CheckTensorParallel(const LlamaConfig& c, int t, int world_size) {
  auto fits = [&](int64_t k) {
    return k >= 1 && c.num_attention_heads % k == 0 && c.num_key_value_heads % k == 0 &&
           c.intermediate_size % k == 0 && c.vocab_size % k == 0 && (world_size <= 0 || world_size % k == 0);
  };
  if (fits(t)) return absl::OkStatus();
  std::vector<int64_t> good;
  for (int64_t k = 1; k <= c.num_key_value_heads; ++k) {
    if (fits(k)) good.push_back(k);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "parallelism.tensor_parallel (", t, ") must divide the model's ", c.num_attention_heads, " heads, ",
      c.num_key_value_heads, " KV heads, ", c.intermediate_size, " MLP width and ", c.vocab_size, " vocabulary",
      world_size > 0 ? absl::StrCat(" and the world size ", world_size) : "", " (", absl::StrJoin(good, ", "),
      " would)"));
}

namespace {

// A tensor as rows x columns (a 1-D tensor is n x 1).
struct Geometry {
  int64_t rows = 0, cols = 1;
};
Geometry GeometryOf(const std::vector<int64_t>& shape) {
  Geometry g;
  g.rows = shape.empty() ? 1 : shape[0];
  for (size_t d = 1; d < shape.size(); ++d) g.cols *= shape[d];
  return g;
}
Geometry Slice(Geometry full, TpSplit split, int t) {
  if (split == TpSplit::kRows) full.rows /= t;
  if (split == TpSplit::kColumns) full.cols /= t;
  return full;
}

// Offsets of the selected (trainable or frozen) tensors in the unit's flat of a layout of
// `t` ranks; -1 for the others.
std::vector<int64_t> FlatOffsets(const UnitLayout& full, bool frozen, int t) {
  std::vector<int64_t> out(full.shapes.size(), -1);
  int64_t off = 0;
  for (size_t i = 0; i < full.shapes.size(); ++i) {
    if (full.is_frozen(i) != frozen) continue;
    out[i] = off;
    const Geometry g = Slice(GeometryOf(full.shapes[i]), full.split_of(i), t);
    off += g.rows * g.cols;
  }
  return out;
}

// Rows [r0, r1) x columns [c0, c1) of the full tensor `i` of unit `unit`, from a source
// written with `t` ranks ([r1 - r0, c1 - c0] fp32).
absl::StatusOr<at::Tensor> FullBlock(const UnitLayout& full, int unit, size_t i, int64_t offset, int t,
                                     const TpShardSource& source, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const Geometry g = GeometryOf(full.shapes[i]);
  const TpSplit split = full.split_of(i);
  const Geometry s = Slice(g, split, t);
  // Local rows [a, b) of rank `rank`'s slice, all of its columns.
  auto read = [&](int rank, int64_t a, int64_t b) -> absl::StatusOr<at::Tensor> {
    at::Tensor out = at::empty({b - a, s.cols}, at::kFloat);
    if (b > a) LF_RETURN_IF_ERROR(source(rank, unit, offset + a * s.cols, offset + b * s.cols, out.view({-1})));
    return out;
  };
  std::vector<at::Tensor> parts;
  if (split == TpSplit::kRows && t > 1) {
    for (int rank = static_cast<int>(r0 / s.rows); rank < t && rank * s.rows < r1; ++rank) {
      const int64_t a = std::max(r0, rank * s.rows) - rank * s.rows, b = std::min(r1, (rank + 1) * s.rows) - rank * s.rows;
      LF_ASSIGN_OR_RETURN(at::Tensor p, read(rank, a, b));
      parts.push_back(p.narrow(1, c0, c1 - c0));
    }
    return at::cat(parts, 0);
  }
  if (split == TpSplit::kColumns && t > 1) {
    for (int rank = static_cast<int>(c0 / s.cols); rank < t && rank * s.cols < c1; ++rank) {
      const int64_t a = std::max(c0, rank * s.cols) - rank * s.cols, b = std::min(c1, (rank + 1) * s.cols) - rank * s.cols;
      LF_ASSIGN_OR_RETURN(at::Tensor p, read(rank, r0, r1));
      parts.push_back(p.narrow(1, a, b - a));
    }
    return at::cat(parts, 1);
  }
  LF_ASSIGN_OR_RETURN(at::Tensor p, read(0, r0, r1));
  return p.narrow(1, c0, c1 - c0);
}

}  // namespace

std::vector<UnitLayout> TensorParallelLayout(const std::vector<UnitLayout>& full, int t) {
  std::vector<UnitLayout> out = full;
  if (t <= 1) return out;
  for (UnitLayout& u : out) {
    for (size_t i = 0; i < u.shapes.size(); ++i) {
      const TpSplit split = u.split_of(i);
      if (split == TpSplit::kRows) u.shapes[i][0] /= t;
      if (split == TpSplit::kColumns) u.shapes[i][1] /= t;
    }
  }
  return out;
}

ShardSource RetileSource(std::vector<UnitLayout> full, bool frozen, int source_tp, TpShardSource source,
                         int t, int tp_rank) {
  if (source_tp == t) {
    return [source = std::move(source), tp_rank](int unit, int64_t begin, int64_t end, at::Tensor out) {
      return source(tp_rank, unit, begin, end, out);
    };
  }
  return [full = std::move(full), frozen, source_tp, source = std::move(source), t, tp_rank](
             int unit, int64_t begin, int64_t end, at::Tensor out) -> absl::Status {
    const UnitLayout& u = full[unit];
    const std::vector<int64_t> mine = FlatOffsets(u, frozen, t), theirs = FlatOffsets(u, frozen, source_tp);
    for (size_t i = 0; i < u.shapes.size(); ++i) {
      if (mine[i] < 0) continue;
      const TpSplit split = u.split_of(i);
      const Geometry g = GeometryOf(u.shapes[i]);
      const Geometry s = Slice(g, split, t);
      const int64_t lo = std::max(begin, mine[i]) - mine[i], hi = std::min(end, mine[i] + s.rows * s.cols) - mine[i];
      if (lo >= hi) continue;
      // This rank's slice, rows [ra, rb), a block of at most ~16M elements at a time.
      const int64_t chunk = std::max<int64_t>(1, (int64_t{16} << 20) / std::max<int64_t>(1, g.cols));
      for (int64_t r = lo / s.cols; r * s.cols < hi; r += chunk) {
        const int64_t r_end = std::min(r + chunk, s.rows);
        int64_t fr0 = r, fr1 = r_end, fc0 = 0, fc1 = g.cols;
        if (split == TpSplit::kRows) fr0 += tp_rank * s.rows, fr1 += tp_rank * s.rows;
        if (split == TpSplit::kColumns) fc0 = tp_rank * s.cols, fc1 = fc0 + s.cols;
        LF_ASSIGN_OR_RETURN(at::Tensor block, FullBlock(u, unit, i, theirs[i], source_tp, source, fr0, fr1, fc0, fc1));
        const at::Tensor flat = block.contiguous().view({-1});  // local elements [r*cols, r_end*cols)
        const int64_t a = std::max(lo, r * s.cols), b = std::min(hi, r_end * s.cols);
        out.narrow(0, mine[i] + a - begin, b - a).copy_(flat.narrow(0, a - r * s.cols, b - a));
      }
    }
    return absl::OkStatus();
  };
}

at::Tensor JoinSlices(const at::Tensor& slices, TpSplit split, const std::vector<int64_t>& shape) {
  const int64_t t = slices.size(0);
  if (split == TpSplit::kReplicated || t == 1) return slices[0].view(shape);
  const Geometry s = GeometryOf(shape);
  std::vector<int64_t> full = shape;
  if (split == TpSplit::kRows) {
    full[0] *= t;
    return slices.reshape(full);
  }
  full[1] *= t;
  return slices.view({t, s.rows, s.cols}).permute({1, 0, 2}).reshape(full);
}

}  // namespace llamafleet::trainer
