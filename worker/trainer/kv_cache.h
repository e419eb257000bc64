// The key/value cache of incremental decoding, and the attention mask a cached step uses.
//
// One cache holds, per decoder layer, the keys and values of every token a batch has run
// through LlamaModel::ForwardCached: [batch, kv_heads, capacity, head_dim] each, in the
// compute dtype (grouped-query attention keeps the KV heads only: query head h reads kv
// head h / (H / KV), as in training). Slot s of every row holds the token run at step
// position s of that row's sequence; rows of different prompt lengths are left-padded,
// and `valid` marks which slots hold real tokens (a pad slot is never attended to).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "config.h"

namespace llamafleet::trainer {

struct KvCache {
  // An empty cache of `capacity` slots for `batch` rows, on `device` in `dtype`.
  static KvCache Make(const LlamaConfig& config, int64_t batch, int64_t capacity, at::Device device,
                      at::ScalarType dtype);

  int64_t batch() const { return valid.size(0); }
  int64_t capacity() const { return valid.size(1); }

  std::vector<at::Tensor> k, v;  // per layer, [batch, kv_heads, capacity, head_dim]
  at::Tensor valid;              // [batch, capacity] bool: the slot holds a real token
  int64_t length = 0;            // slots [0, length) are filled, in every row
};

// Additive attention mask of a step that appends `steps` tokens at slots
// [cache.length, cache.length + steps) (their `valid` already set): [B, 1, steps, L] in
// `dtype` with L = cache.length + steps, 0 where query i may attend to slot j (a valid
// slot j <= length + i, and always its own slot, so that a pad query's softmax row is
// never empty) and -inf elsewhere.
at::Tensor CachedAttentionMask(const KvCache& cache, int64_t steps, at::ScalarType dtype);

}  // namespace llamafleet::trainer
