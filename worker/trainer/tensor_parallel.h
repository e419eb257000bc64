// Tensor parallelism (Megatron-style) as layout arithmetic: how a tensor-parallel group of T
// ranks splits each tensor of the layout, the shapes one rank holds, and how a rank's flat
// shard is read from a source written with any other T (the HF weights and the seeded
// init are T = 1; a checkpoint records its own T).
//
// The split of a decoder layer (model.h computes with it):
//   q, k, v, gate, up   column-parallel: output rows split (rank t holds heads
//                       [t*H/T, (t+1)*H/T), KV heads likewise, MLP rows [t*F/T, ...))
//   o, down             row-parallel: input columns split the same way
//   norms               replicated
//   embedding, lm_head  vocabulary-parallel: rows [t*V/T, (t+1)*V/T)
//   LoRA                A [r, in] follows the base's input split (replicated for a
//                       column-parallel base, columns for a row-parallel one), B [out, r]
//                       the base's output split (rows, or replicated)
// So every tensor is either replicated, split along dim 0 ("rows") or along dim 1
// ("columns"), in T equal contiguous blocks; a 1-D tensor is a column of rows.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "config.h"
#include "model.h"
#include "sharded_engine.h"

namespace llamafleet::trainer {

// INVALID_ARGUMENT naming parallelism.tensor_parallel unless T >= 1 divides the heads, the
// KV heads, the MLP width and the vocabulary of `config` (and `world_size`, when > 0); the
// message lists the T that would work.
absl::Status CheckTensorParallel(const LlamaConfig& config, int tensor_parallel, int world_size = 0);

// The layout one rank of a group of `tensor_parallel` holds: `full`'s names and splits,
// each shape divided along its split (identical on every rank of the group).
std::vector<UnitLayout> TensorParallelLayout(const std::vector<UnitLayout>& full, int tensor_parallel);

// Elements [begin, end) of TP rank `tp_rank`'s flat of unit `unit` (its trainable or its
// frozen tensors, as the source was made for) in the layout of the source's T.
using TpShardSource =
    std::function<absl::Status(int tp_rank, int unit, int64_t begin, int64_t end, at::Tensor out)>;

// A ShardSource (sharded_engine.h) of rank `tp_rank` of `tensor_parallel` over the
// trainable (or, with `frozen`, the frozen) tensors of the unsplit layout `full`, reading
// from `source`, written with `source_tp`. Equal T reads straight through; otherwise
// each tensor's slice is assembled from the source ranks' slices, a bounded block of rows
// at a time.
ShardSource RetileSource(std::vector<UnitLayout> full, bool frozen, int source_tp, TpShardSource source,
                         int tensor_parallel, int tp_rank);

// A source of T = 1 from a ShardSource over the unsplit layout.
inline TpShardSource Untiled(ShardSource source) {
  return [source = std::move(source)](int, int unit, int64_t begin, int64_t end, at::Tensor out) {
    return source(unit, begin, end, out);
  };
}

// The full tensor from the group's slices, in rank order ([T, numel of a slice], any
// dtype): concatenated along the split, or slice 0 when replicated.
at::Tensor JoinSlices(const at::Tensor& slices, TpSplit split, const std::vector<int64_t>& slice_shape);

}  // namespace llamafleet::trainer
