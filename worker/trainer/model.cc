#include "model.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "engine.h"
#include "lora.h"
#include "tensor_parallel_ops.h"

namespace llamafleet::trainer {

int64_t UnitLayout::numel(size_t i) const {
  int64_t k = 1;
  for (int64_t d : shapes[i]) k *= d;
  return k;
}

int64_t UnitLayout::numel() const {
  int64_t n = 0;
  for (size_t i = 0; i < shapes.size(); ++i) n += numel(i);
  return n;
}

int64_t UnitLayout::trainable_numel() const {
  int64_t n = 0;
  for (size_t i = 0; i < shapes.size(); ++i) n += is_frozen(i) ? 0 : numel(i);
  return n;
}

std::vector<UnitLayout> MakeLayout(const LlamaConfig& c) {
  const int64_t h = c.hidden_size, ffn = c.intermediate_size;
  const int64_t q_dim = c.num_attention_heads * c.head_dim();
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim();
  using S = TpSplit;
  std::vector<UnitLayout> units;
  units.push_back({"embed", {"model.embed_tokens.weight"}, {{c.vocab_size, h}}, {}, {S::kRows}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    units.push_back({"layers." + std::to_string(i),
                     {p + "input_layernorm.weight", p + "self_attn.q_proj.weight",
                      p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight",
                      p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
                      p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                      p + "mlp.down_proj.weight"},
                     {{h}, {q_dim, h}, {kv_dim, h}, {kv_dim, h}, {h, q_dim}, {h}, {ffn, h},
                      {ffn, h}, {h, ffn}},
                     {},
                     {S::kReplicated, S::kRows, S::kRows, S::kRows, S::kColumns, S::kReplicated, S::kRows,
                      S::kRows, S::kColumns}});
    if (c.qkv_bias) {
      UnitLayout& u = units.back();
      u.param_names.insert(
          u.param_names.end(),
          {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"});
      u.shapes.insert(u.shapes.end(), {{q_dim}, {kv_dim}, {kv_dim}});
      u.split.insert(u.split.end(), {S::kRows, S::kRows, S::kRows});
    }
  }
  UnitLayout head{"head", {"model.norm.weight"}, {{h}}, {}, {S::kReplicated}};
  if (!c.tie_word_embeddings) {
    head.param_names.push_back("lm_head.weight");
    head.shapes.push_back({c.vocab_size, h});
    head.split.push_back(S::kRows);
  }
  units.push_back(std::move(head));
  return units;
}

int LayerBaseTensors(const LlamaConfig& c) {
  return c.qkv_bias ? kQkvBiasIndex + 3 : kQkvBiasIndex;
}

ModelInput MakeModelInput(const Batch& b, const at::Device& device) {
  ModelInput in;
  const int64_t B = b.rows, T = b.seq_len;
  in.tokens = at::from_blob(const_cast<int64_t*>(b.tokens.data()), {B, T}, at::kLong).clone();
  std::vector<int64_t> pos, labels;
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t t = 0; t + 1 < T; ++t) {
      if (b.target[r * T + t + 1]) {
        pos.push_back(r * (T - 1) + t);
        labels.push_back(b.tokens[r * T + t + 1]);
      }
    }
  }
  in.num_targets = static_cast<int64_t>(pos.size());
  in.loss_positions = at::tensor(pos, at::kLong);
  in.labels = at::tensor(labels, at::kLong);
  if (!b.position.empty()) {
    in.positions =
        at::from_blob(const_cast<int32_t*>(b.position.data()), {B, T}, at::kInt).to(at::kLong);
  }
  std::vector<at::Tensor*> moved = {&in.tokens, &in.loss_positions, &in.labels};
  if (in.positions.defined()) moved.push_back(&in.positions);
  if (device.is_cuda()) {
    // From page-locked memory the copies are asynchronous: the host does not wait for the
    // device to drain its queue (a pageable copy would). The caching host allocator keeps
    // the pinned buffers until the copies are done.
    for (at::Tensor* t : moved) *t = t->pin_memory().to(device, /*non_blocking=*/true);
  } else if (device != at::Device(at::kCPU)) {
    for (at::Tensor* t : moved) *t = t->to(device);
  }
  return in;
}

const char* ActivationCheckpointingName(ActivationCheckpointing mode) {
  switch (mode) {
    case ActivationCheckpointing::kNone:
      return "none";
    case ActivationCheckpointing::kFull:
      return "full";
    case ActivationCheckpointing::kSelective:
      return "selective";
  }
  return "?";
}

absl::StatusOr<ActivationCheckpointing> ParseActivationCheckpointing(const std::string& name) {
  if (name == "none" || name == "false") return ActivationCheckpointing::kNone;
  if (name == "full" || name == "true") return ActivationCheckpointing::kFull;
  if (name == "selective") return ActivationCheckpointing::kSelective;
  return absl::InvalidArgumentError(
      "activation checkpointing must be full, selective or none (or true/false), got \"" + name +
      "\"");
}

namespace {
bool UseOneDnnGemm(const at::Device& device, at::ScalarType dtype) {
  if (!device.is_cpu() || dtype != at::kFloat || !at::hasMKLDNN()) return false;
  const char* env = std::getenv("LLAMAFLEET_CPU_GEMM");
  return env == nullptr || std::string(env) != "aten";
}

}  // namespace

LlamaModel::LlamaModel(const LlamaConfig& config, at::Device device, at::ScalarType compute_dtype)
    : config_(config),
      device_(device),
      dtype_(compute_dtype),
      onednn_gemm_(UseOneDnnGemm(device, compute_dtype)) {
  // HF LlamaRotaryEmbedding: inv_freq = 1 / theta^(arange(0, d, 2) / d), emb = cat(f, f).
  const int64_t d = config.head_dim();
  at::Tensor inv_freq =
      1.0 / at::pow(config.rope_theta, at::arange(0, d, 2, at::kLong).to(at::kFloat) / d);
  if (config.rope_scaling.type == RopeScaling::Type::kLlama3) {
    // HF's _compute_llama3_parameters, op for op in fp32 (see the file comment).
    const RopeScaling& r = config.rope_scaling;
    const double old = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = old / r.low_freq_factor, high_wavelen = old / r.high_freq_factor;
    const at::Tensor wavelen = 2 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq);
    const at::Tensor smooth =
        (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    const at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    const at::Tensor medium =
        (wavelen < high_wavelen).logical_not() & (wavelen > low_wavelen).logical_not();
    inv_freq = at::where(medium, smoothed, scaled);
  }
  at::Tensor t = at::arange(config.max_position_embeddings, at::kLong).to(at::kFloat);
  at::Tensor freqs = at::outer(t, inv_freq);   // [P, d/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);  // [P, d]
  cos_ = emb.cos().to(device);
  sin_ = emb.sin().to(device);
}

at::Tensor LlamaModel::Linear(const at::Tensor& x, const at::Tensor& w) const {
  if (!onednn_gemm_) return at::linear(x, w);
  // y = x w^T through oneDNN; autograd differentiates mkldnn_linear and the layout
  // conversions, so the backward GEMMs run in oneDNN too.
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = w.size(0);
  at::Tensor x2 = x.reshape({-1, x.size(-1)}).contiguous().to_mkldnn();  // [rows, in]
  return at::mkldnn_linear(x2, w).to_dense().view(shape);                 // [..., out]
}

void LlamaModel::set_lora(const LoraOptions& lora) {
  lora_ = lora;
  for (int m = 0; m < kLoraModules; ++m)
    lora_index_[m] = LoraIndex(lora, m, LayerBaseTensors(config_));
}

void LlamaModel::set_tensor_parallel(Comm* tp) {
  tp_ = tp;
  tp_size_ = tp ? tp->size() : 1;
}

// The projections' outputs a selectively checkpointed layer keeps (kLoraModuleNames'
// order): recorded by its forward, taken instead of recomputed by its backward's replay.
struct LlamaModel::KeptProjections {
  bool replay = false;
  std::array<at::Tensor, kLoraModules> out;
};

namespace {
// y = x w^T (plus, row-parallel, the group's sum) whose value was kept from forward:
// forward returns the kept tensor without a matmul; backward is the linear's, computed
// the way autograd differentiates LlamaModel::Linear (oneDNN's mkldnn_linear_backward on
// the oneDNN path, two GEMMs otherwise), so the gradients match a recompute's. The
// row-parallel sum's backward is the identity (Megatron's g), so it adds nothing here.
class KeptLinear : public torch::autograd::Function<KeptLinear> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, at::Tensor w,
                            at::Tensor kept, bool onednn) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["onednn"] = onednn;
    // A new tensor object on the kept storage: autograd gives it this node as grad_fn
    // without touching the kept tensor itself.
    return at::empty({0}, kept.options())
        .set_(kept.storage(), kept.storage_offset(), kept.sizes(), kept.strides());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const int64_t in = x.size(-1), out = w.size(0);
    const bool want_x = ctx->needs_input_grad(0),
               want_w = ctx->needs_input_grad(1);  // LoRA: w frozen
    at::Tensor gx, gw;
    if (ctx->saved_data["onednn"].toBool()) {
      const at::Tensor x2 = x.reshape({-1, in}).contiguous().to_mkldnn();
      const at::Tensor g2 = grads[0].reshape({-1, out}).contiguous().to_mkldnn();
      auto r = at::mkldnn_linear_backward(x2, g2, w, {want_x, want_w, false});
      if (want_x) gx = std::get<0>(r).to_dense().view(x.sizes());
      if (want_w) gw = std::get<1>(r).is_mkldnn() ? std::get<1>(r).to_dense() : std::get<1>(r);
    } else {
      const at::Tensor g2 = grads[0].reshape({-1, out});
      if (want_x) gx = g2.mm(w).view(x.sizes());
      if (want_w) gw = g2.t().mm(x.reshape({-1, in}));
    }
    return {gx, gw, at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor LlamaModel::Project(const std::vector<at::Tensor>& p, int module, const at::Tensor& x,
                               const at::Tensor& x_whole) const {
  static constexpr std::array<int, kLoraModules> kBase = {1, 2, 3, 4, 6, 7, 8};  // see MakeLayout
  const bool row_parallel = module == 3 || module == 6;                      // o, down
  at::Tensor y;
  if (kept_ != nullptr && kept_->replay) {
    y = KeptLinear::apply(x, p[kBase[module]], kept_->out[module], onednn_gemm_);
  } else {
    y = Linear(x, p[kBase[module]]);
    if (row_parallel) y = ReduceFromTensorParallel(y, tp_);
    if (kept_ != nullptr) kept_->out[module] = y;
  }
  // q, k, v biases (column-parallel: this rank's slice), outside the kept output.
  if (module < 3 && config_.qkv_bias) y = y + p[kQkvBiasIndex + module];
  const int a = lora_.enabled ? lora_index_[module] : -1;
  if (a < 0) return y;
  // PEFT: base(x) + lora_B(lora_A(dropout(x))) * scaling. The rank-r products go through
  // ATen even on the oneDNN path: converting layouts for them costs more than they do.
  // Under tensor parallelism the [.., r] product is whole on every rank before B: summed
  // over the group (row-parallel A), or marked so that its gradient is (B split by rows).
  const at::Tensor in = row_parallel ? x : x_whole;
  const at::Tensor xd = lora_.dropout > 0 && training_ ? at::dropout(in, lora_.dropout, /*train=*/true) : in;
  at::Tensor z = at::linear(xd, p[a]);
  z = row_parallel ? ReduceFromTensorParallel(z, tp_) : CopyToTensorParallel(z, tp_);
  return y + at::linear(z, p[a + 1]) * lora_.scale();
}

at::Tensor LlamaModel::RmsNorm(const at::Tensor& x, const at::Tensor& weight) const {
  // HF LlamaRMSNorm: fp32 variance, normalize in fp32, cast back, then scale.
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  at::Tensor y = (xf * at::rsqrt(var + config_.rms_norm_eps)).to(x.scalar_type());
  return weight * y;
}

namespace {
// rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2])
at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}
}  // namespace

at::Tensor LlamaModel::DecoderLayer(const std::vector<at::Tensor>& p, const at::Tensor& x,
                                    const at::Tensor& cos, const at::Tensor& sin,
                                    const at::Tensor& mask) {
  const at::Tensor &ln1 = p[0], &ln2 = p[5];
  const int64_t B = x.size(0), T = x.size(1);
  // This rank's heads (all of them without tensor parallelism).
  const int64_t H = config_.num_attention_heads / tp_size_, KV = config_.num_key_value_heads / tp_size_;
  const int64_t d = config_.head_dim(), G = H / KV;

  at::Tensor xn = RmsNorm(x, ln1);                                   // [B, T, h]
  at::Tensor xc = CopyToTensorParallel(xn, tp_);
  at::Tensor q = Project(p, 0, xc, xn).view({B, T, H, d}).transpose(1, 2);   // [B, H, T, d]
  at::Tensor k = Project(p, 1, xc, xn).view({B, T, KV, d}).transpose(1, 2);  // [B, KV, T, d]
  at::Tensor v = Project(p, 2, xc, xn).view({B, T, KV, d}).transpose(1, 2);  // [B, KV, T, d]
  q = q * cos + RotateHalf(q) * sin;
  k = k * cos + RotateHalf(k) * sin;

  at::Tensor attn;  // [B, H, T, d]
  // HF repeat_kv: kv head j serves query heads j*G .. j*G+G-1. `mask`: see Trunk.
#if TORCH_VERSION_MAJOR >= 2
  // (SDPA's enable_gqa, LibTorch >= 2.5, would spare the copy, but on 2.6's CPU its kernel
  // moved one weight of the reference test by 1.3e-5 relative, past the 1e-5 the
  // equivalence tests hold: not used until that is understood.)
  if (G > 1) {
    // A [B, KV, G, T, d] view with stride 0 over G; SDPA wants a head dimension with one
    // stride, so the reshape materialises it (as repeat_interleave would).
    k = k.unsqueeze(2).expand({B, KV, G, T, d}).reshape({B, H, T, d});
    v = v.unsqueeze(2).expand({B, KV, G, T, d}).reshape({B, H, T, d});
  }
  attn = mask.defined() ? at::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/false)
                        : at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  // Group the G query heads of each kv head into one [G*T, d] block so k and v are never
  // copied per query head: scores [B*KV, G*T, T] = mask + scale * q k^T in one baddbmm
  // (the causal [G*T, T] mask), or with a document mask [B, 1, T, T] added per row.
  at::Tensor qg = q.reshape({B * KV, G * T, d});
  at::Tensor kt = k.reshape({B * KV, T, d}).transpose(1, 2);  // [B*KV, d, T]
  const double scale = 1.0 / std::sqrt(double(d));
  at::Tensor scores = mask.dim() == 2 ? at::baddbmm(mask, qg, kt, /*beta=*/1.0, /*alpha=*/scale)
                                      : at::bmm(qg, kt)
                                            .mul(scale)
                                            .view({B, KV, G, T, T})
                                            .add(mask.view({B, 1, 1, T, T}))
                                            .view({B * KV, G * T, T});
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  attn = at::bmm(probs, v.reshape({B * KV, T, d})).view({B, H, T, d});
#endif
  const at::Tensor heads = attn.transpose(1, 2).reshape({B, T, H * d});
  at::Tensor h1 = x + Project(p, 3, heads, heads);

  at::Tensor hn = RmsNorm(h1, ln2);
  at::Tensor hc = CopyToTensorParallel(hn, tp_);
  at::Tensor act = at::silu(Project(p, 4, hc, hn)) * Project(p, 5, hc, hn);
  at::Tensor mlp = Project(p, 6, act, act);
  return h1 + mlp;
}

// One decoder layer under activation checkpointing (see set_activation_checkpointing).
// The mask is optional: LibTorch 2.x has none for rows of one document (is_causal), and an
// undefined tensor is not a valid input of a custom autograd function there (it records
// every tensor's device). The recompute gets the forward's cos, sin and mask: a packed
// batch's per-document positions and document mask.
// Selective mode: the forward records the projections' outputs and keeps them in the
// context; the backward's recompute replays them (KeptLinear) instead of the matmuls.
class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  using KeptProjections = LlamaModel::KeptProjections;
  // Points the model at `kept` (nullptr: nothing kept) for one DecoderLayer call; only the
  // selective mode records in forward.
  class KeepScope {
   public:
    KeepScope(LlamaModel* model, KeptProjections* kept) : model_(model) {
      const bool selective = model->checkpointing_ == ActivationCheckpointing::kSelective;
      model_->kept_ = selective ? kept : nullptr;
    }
    ~KeepScope() { model_->kept_ = nullptr; }
    KeepScope(const KeepScope&) = delete;
    KeepScope& operator=(const KeepScope&) = delete;

   private:
    LlamaModel* model_;
  };

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, LlamaModel* model,
                            ParamEngine* engine, int64_t layer, at::Tensor cos, at::Tensor sin,
                            c10::optional<at::Tensor> mask_or_none) {
    const at::Tensor mask = mask_or_none.has_value() ? *mask_or_none : at::Tensor();
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["engine"] = reinterpret_cast<int64_t>(engine);
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["mask"] = mask;
    ctx->save_for_backward({x});
    // Dropout must draw the same masks when backward recomputes the layer (PyTorch's
    // checkpoint with preserve_rng_state): keep the generator's state from here.
    if (model->lora_.dropout > 0 && model->training_) {
      at::Generator gen = at::globalContext().defaultGenerator(x.device());
      std::lock_guard<std::mutex> lock(gen.mutex());
      ctx->saved_data["rng"] = gen.get_state();
    }
    // Autograd is off here: the engine frees the gathered layer at Release.
    const int unit = LayerUnit(static_cast<int>(layer));
    at::Tensor input = x;
    std::vector<at::Tensor> p = engine->Acquire(unit, &input);
    KeptProjections kept;
    at::Tensor y;
    {
      KeepScope scope(model, &kept);
      y = model->DecoderLayer(p, input, cos, sin, mask);
    }
    engine->Release(unit);
    if (model->checkpointing_ == ActivationCheckpointing::kSelective) {
      ctx->saved_data["kept"] = std::vector<at::Tensor>(kept.out.begin(), kept.out.end());
    }
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* model = reinterpret_cast<LlamaModel*>(ctx->saved_data["model"].toInt());
    auto* engine = reinterpret_cast<ParamEngine*>(ctx->saved_data["engine"].toInt());
    const int layer = static_cast<int>(ctx->saved_data["layer"].toInt());
    const int unit = LayerUnit(layer);
    // FSDP2's backward prefetch: this layer's gather (unless the layer after it started
    // it), then the next layer in backward order, so that gather overlaps this layer's
    // recompute and backward instead of waiting behind them.
    engine->Prefetch(unit);
    if (layer > 0) engine->Prefetch(LayerUnit(layer - 1));
    KeptProjections kept;
    kept.replay = true;
    const bool selective = ctx->saved_data.count("kept") > 0;
    if (selective) {
      // Taken out of the context, so they are freed when this backward returns.
      const std::vector<at::Tensor> outs = ctx->saved_data["kept"].toTensorVector();
      std::copy(outs.begin(), outs.end(), kept.out.begin());
      ctx->saved_data.erase("kept");
    }
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor y;
    {
      at::AutoGradMode enable(true);
      at::Generator gen = at::globalContext().defaultGenerator(x.device());
      at::Tensor rng_now;
      if (ctx->saved_data.count("rng")) {
        std::lock_guard<std::mutex> lock(gen.mutex());
        rng_now = gen.get_state();
        gen.set_state(ctx->saved_data["rng"].toTensor());
      }
      at::Tensor input = x;
      std::vector<at::Tensor> p = engine->Acquire(unit, &input);
      const at::Tensor mask = ctx->saved_data["mask"].isTensor() ? ctx->saved_data["mask"].toTensor() : at::Tensor();
      {
        KeepScope scope(model, selective ? &kept : nullptr);
        y = model->DecoderLayer(p, input, ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(), mask);
      }
      engine->Release(unit);
      if (rng_now.defined()) {
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(rng_now);
      }
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

namespace {
// Block-diagonal causal attention over packed documents, additive: [B, 1, T, T] of
// `dtype`, 0 where token i of a row may attend to token j (i - positions[i] <= j <= i:
// its own document up to itself) and -inf elsewhere. Every row keeps its diagonal, so no
// softmax row is empty.
at::Tensor DocumentMask(const at::Tensor& positions, at::ScalarType dtype) {
  const int64_t T = positions.size(1);
  const at::Tensor i = at::arange(T, positions.options());  // [T]
  const at::Tensor first = (i - positions).unsqueeze(2);    // [B, T, 1]: document start
  const at::Tensor j = i.view({1, 1, T});
  const at::Tensor allowed = j.ge(first).logical_and(j.le(i.view({1, T, 1})));  // [B, T, T]
  return at::zeros(allowed.sizes(), positions.options().dtype(dtype))
      .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity())
      .unsqueeze(1);
}
}  // namespace

at::Tensor LlamaModel::Trunk(ParamEngine& engine, const at::Tensor& tokens,
                             const at::Tensor& positions) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  TORCH_CHECK(T <= config_.max_position_embeddings, "sequence length ", T,
              " exceeds max_position_embeddings ", config_.max_position_embeddings);
  at::Tensor cos, sin, mask;
  if (positions.defined()) {
    // Each token's rotation by its position in its document, [B, 1, T, d] (broadcast over
    // heads); attention block-diagonal causal.
    const at::Tensor flat = positions.reshape({B * T});
    const int64_t d = cos_.size(1);
    cos = cos_.index_select(0, flat).view({B, 1, T, d}).to(dtype_);
    sin = sin_.index_select(0, flat).view({B, 1, T, d}).to(dtype_);
    mask = DocumentMask(positions, dtype_);
  } else {
    cos = cos_.narrow(0, 0, T).to(dtype_);  // [T, d]
    sin = sin_.narrow(0, 0, T).to(dtype_);
#if TORCH_VERSION_MAJOR < 2
    // Additive causal mask for the grouped scores: [G*T, T], row g*T+i masks columns > i.
    // (LibTorch 2.x uses scaled_dot_product_attention's is_causal instead.)
    const int64_t G = config_.num_attention_heads / config_.num_key_value_heads;
    mask = at::full({T, T}, -std::numeric_limits<float>::infinity(),
                    at::TensorOptions().dtype(dtype_).device(device_))
               .triu(1)
               .repeat({G, 1});
#endif
  }

  std::vector<at::Tensor> embed = engine.Acquire(EmbedUnit());
  at::Tensor x = VocabParallelEmbedding(embed[0], tokens, tp_);  // [B, T, h]
  engine.Release(EmbedUnit());
  // A frozen embedding gives an input without a gradient, and a checkpointed layer is
  // only differentiated through its input (HF's enable_input_require_grads for PEFT).
  const bool recompute = checkpointing_ != ActivationCheckpointing::kNone && at::GradMode::is_enabled();
  if (recompute && !x.requires_grad()) x = x.detach().requires_grad_(true);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const int unit = LayerUnit(static_cast<int>(i));
    if (recompute) {
      x = CheckpointedLayer::apply(x, this, &engine, i, cos, sin,
                                   mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt);
      continue;
    }
    std::vector<at::Tensor> p = engine.Acquire(unit, &x);
    x = DecoderLayer(p, x, cos, sin, mask);
    engine.Release(unit);
  }
  return x;
}

at::Tensor LlamaModel::Hidden(ParamEngine& engine, const at::Tensor& tokens,
                              const at::Tensor& positions) {
  at::Tensor x = Trunk(engine, tokens, positions);
  const int head = HeadUnit(config_);
  std::vector<at::Tensor> p = engine.Acquire(head, &x);
  at::Tensor y = RmsNorm(x, p[0]);
  engine.Release(head);
  return y;
}

// Sum of the token cross-entropy of logits = y w^T (fp32) against `labels`, computed
// `chunk` positions at a time so that at most [chunk, V] fp32 logits exist at once, in
// forward and in backward (which recomputes each chunk's logits with autograd and
// back-propagates through them, the gradient of w summed in fp32 over the chunks). The
// chunks go through the same ops as the unchunked loss: the same values up to the order
// of the sums over positions.
class ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor y, at::Tensor w,
                            at::Tensor labels, LlamaModel* model, int64_t chunk) {
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["chunk"] = chunk;
    ctx->save_for_backward({y, w, labels});
    at::Tensor sum = at::zeros({}, y.options().dtype(at::kFloat));
    for (int64_t s = 0; s < y.size(0); s += chunk) {
      const int64_t n = std::min(chunk, y.size(0) - s);
      sum.add_(model->ChunkLoss(y.narrow(0, s, n), w, labels.narrow(0, s, n)));
    }
    return sum;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* model = reinterpret_cast<LlamaModel*>(ctx->saved_data["model"].toInt());
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &y = saved[0], &w = saved[1], &labels = saved[2];
    const bool want_y = ctx->needs_input_grad(0), want_w = ctx->needs_input_grad(1);
    at::Tensor grad_y = want_y ? at::empty_like(y) : at::Tensor();
    at::Tensor grad_w = want_w ? at::zeros(w.sizes(), w.options().dtype(at::kFloat)) : at::Tensor();
    at::AutoGradMode enable(true);
    for (int64_t s = 0; s < y.size(0); s += chunk) {
      const int64_t n = std::min(chunk, y.size(0) - s);
      at::Tensor yc = y.narrow(0, s, n).detach().requires_grad_(want_y);
      at::Tensor wc = w.detach().requires_grad_(want_w);
      at::Tensor loss = model->ChunkLoss(yc, wc, labels.narrow(0, s, n));
      torch::autograd::backward({loss}, {grads[0]});
      if (want_y) grad_y.narrow(0, s, n).copy_(yc.grad());
      if (want_w) grad_w.add_(wc.grad());
    }
    if (want_w) grad_w = grad_w.to(w.scalar_type());
    return {grad_y, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor LlamaModel::ChunkLoss(const at::Tensor& y, const at::Tensor& w,
                                 const at::Tensor& labels) const {
  at::Tensor logits = Linear(y, w).to(at::kFloat);  // [N, V] (this rank's V / T columns)
  return VocabParallelCrossEntropySum(logits, labels, tp_);
}

at::Tensor LlamaModel::LossSum(ParamEngine& engine, const ModelInput& in) {
  at::Tensor x = Trunk(engine, in.tokens, in.positions);  // [B, T, h]
  const int64_t B = x.size(0), T = x.size(1), h = x.size(2);
  // Only positions whose next token is a target reach the norm and lm_head.
  at::Tensor sel = x.narrow(1, 0, T - 1).reshape({B * (T - 1), h}).index_select(0, in.loss_positions);
  const int head = HeadUnit(config_);
  std::vector<at::Tensor> p = engine.Acquire(head, &sel);
  at::Tensor y = CopyToTensorParallel(RmsNorm(sel, p[0]), tp_);  // [N, h]
  at::Tensor w_out;
  if (config_.tie_word_embeddings) {
    w_out = engine.Acquire(EmbedUnit(), &y)[0];
  } else {
    w_out = p[1];
  }
  // Under tensor parallelism each rank's logits are V / T wide and the loss's collectives
  // run once per forward: positions are not chunked there.
  at::Tensor loss = tp_ == nullptr && y.size(0) > loss_chunk_
                        ? ChunkedCrossEntropy::apply(y, w_out, in.labels, this, loss_chunk_)
                        : ChunkLoss(y, w_out, in.labels);
  engine.Release(head);
  if (config_.tie_word_embeddings) engine.Release(EmbedUnit());
  return loss;
}

}  // namespace llamafleet::trainer
