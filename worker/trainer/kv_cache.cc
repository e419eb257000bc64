#include "kv_cache.h"

#include <ATen/core/grad_mode.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

#include "engine.h"
#include "model.h"
#include "tensor_parallel_ops.h"

namespace llamafleet::trainer {

KvCache KvCache::Make(const LlamaConfig& config, int64_t batch, int64_t capacity, at::Device device,
                      at::ScalarType dtype) {
  KvCache cache;
  const at::TensorOptions options = at::TensorOptions().dtype(dtype).device(device);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    cache.k.push_back(
        at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim()}, options));
    cache.v.push_back(at::zeros_like(cache.k.back()));
  }
  cache.valid = at::zeros({batch, capacity}, at::TensorOptions().dtype(at::kBool).device(device));
  return cache;
}

at::Tensor CachedAttentionMask(const KvCache& cache, int64_t steps, at::ScalarType dtype) {
  const int64_t L = cache.length + steps;
  const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong).device(cache.valid.device());
  const at::Tensor query =
      at::arange(cache.length, L, longs).view({1, steps, 1});  // slot of query i
  const at::Tensor key = at::arange(L, longs).view({1, 1, L});
  const at::Tensor valid = cache.valid.narrow(1, 0, L).unsqueeze(1);  // [B, 1, L]
  const at::Tensor allowed = key.le(query).logical_and(valid).logical_or(key.eq(query));
  return at::zeros(allowed.sizes(), cache.valid.options().dtype(dtype))
      .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity())
      .unsqueeze(1);
}

namespace {
// rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]), as the training path's.
at::Tensor RotateHalfCached(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}
}  // namespace

at::Tensor LlamaModel::CachedDecoderLayer(const std::vector<at::Tensor>& p, const at::Tensor& x,
                                          const at::Tensor& cos, const at::Tensor& sin,
                                          const at::Tensor& mask, at::Tensor& k_cache,
                                          at::Tensor& v_cache, int64_t start) {
  const int64_t B = x.size(0), S = x.size(1);
  const int64_t H = config_.num_attention_heads, KV = config_.num_key_value_heads;
  const int64_t d = config_.head_dim(), G = H / KV, L = start + S;
  const at::Tensor xn = RmsNorm(x, p[0]);
  at::Tensor q = Project(p, 0, xn, xn).view({B, S, H, d}).transpose(1, 2);   // [B, H, S, d]
  at::Tensor k = Project(p, 1, xn, xn).view({B, S, KV, d}).transpose(1, 2);  // [B, KV, S, d]
  const at::Tensor v = Project(p, 2, xn, xn).view({B, S, KV, d}).transpose(1, 2);
  q = q * cos + RotateHalfCached(q) * sin;
  k = k * cos + RotateHalfCached(k) * sin;
  k_cache.narrow(2, start, S).copy_(k);
  v_cache.narrow(2, start, S).copy_(v);
  // The G query heads of kv head j (heads j*G .. j*G+G-1) as one [G*S, d] block against
  // that head's cached keys, so the cache is never copied per query head; the mask is per
  // row, shared by the heads. LibTorch 2.x runs it as the training path does, through
  // scaled_dot_product_attention (query g*S+i takes query i's mask row); 1.13 has no SDPA.
  const at::Tensor keys = k_cache.narrow(2, 0, L), values = v_cache.narrow(2, 0, L);
  const at::Tensor grouped = q.reshape({B, KV, G * S, d});
#if TORCH_VERSION_MAJOR >= 2
  const at::Tensor group_mask =
      G == 1 ? mask : mask.view({B, 1, 1, S, L}).expand({B, 1, G, S, L}).reshape({B, 1, G * S, L});
  const at::Tensor attn =
      at::scaled_dot_product_attention(grouped, keys, values, group_mask, 0.0, /*is_causal=*/false)
          .view({B, H, S, d});
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const at::Tensor scores = at::matmul(grouped, keys.transpose(2, 3))
                                .mul(scale)
                                .view({B, KV, G, S, L})
                                .add(mask.view({B, 1, 1, S, L}));
  const at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  const at::Tensor attn = at::matmul(probs.view({B, KV, G * S, L}), values).view({B, H, S, d});
#endif
  const at::Tensor heads = attn.transpose(1, 2).reshape({B, S, H * d});
  const at::Tensor h1 = x + Project(p, 3, heads, heads);
  const at::Tensor hn = RmsNorm(h1, p[5]);
  const at::Tensor act = at::silu(Project(p, 4, hn, hn)) * Project(p, 5, hn, hn);
  return h1 + Project(p, 6, act, act);
}

at::Tensor LlamaModel::ForwardCached(ParamEngine& engine, const at::Tensor& tokens,
                                     const at::Tensor& positions, KvCache& cache) {
  TORCH_CHECK(tp_ == nullptr, "cached decoding does not run under tensor parallelism");
  TORCH_CHECK(!lora_.enabled, "cached decoding takes merged weights, not LoRA layers");
  const int64_t B = tokens.size(0), S = tokens.size(1);
  TORCH_CHECK(B == cache.batch() && S >= 1 && cache.length + S <= cache.capacity(), "tokens [", B,
              ", ", S, "] do not fit a cache of ", cache.batch(), " rows holding ", cache.length,
              " of ", cache.capacity(), " slots");
  TORCH_CHECK(positions.sizes() == tokens.sizes(), "positions must be shaped as tokens");
  TORCH_CHECK(positions.max().item<int64_t>() < config_.max_position_embeddings,
              "a position exceeds max_position_embeddings ", config_.max_position_embeddings);
  at::NoGradGuard no_grad;
  const int64_t d = cos_.size(1);
  const at::Tensor flat = positions.reshape({B * S});
  const at::Tensor cos = cos_.index_select(0, flat).view({B, 1, S, d}).to(dtype_);
  const at::Tensor sin = sin_.index_select(0, flat).view({B, 1, S, d}).to(dtype_);
  const at::Tensor mask = CachedAttentionMask(cache, S, dtype_);

  std::vector<at::Tensor> embed = engine.Acquire(EmbedUnit());
  at::Tensor x = VocabParallelEmbedding(embed[0], tokens, nullptr);  // [B, S, h]
  engine.Release(EmbedUnit());
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const int unit = LayerUnit(static_cast<int>(i));
    std::vector<at::Tensor> p = engine.Acquire(unit, &x);
    x = CachedDecoderLayer(p, x, cos, sin, mask, cache.k[i], cache.v[i], cache.length);
    engine.Release(unit);
  }
  cache.length += S;
  const at::Tensor last = x.select(1, S - 1);  // [B, h]
  const int head = HeadUnit(config_);
  std::vector<at::Tensor> p = engine.Acquire(head);
  const at::Tensor y = RmsNorm(last, p[0]);
  const at::Tensor w = config_.tie_word_embeddings ? engine.Acquire(EmbedUnit())[0] : p[1];
  at::Tensor logits = Linear(y, w).to(at::kFloat);
  engine.Release(head);
  if (config_.tie_word_embeddings) engine.Release(EmbedUnit());
  return logits;
}

}  // namespace llamafleet::trainer
