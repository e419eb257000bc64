// The Llama decoder as HF LlamaForCausalLM (and Mistral's, Qwen2's) computes it, written as a pure
// function of parameter units that a ParamEngine hands out (see engine.h): the model owns no
// weights.
//
//   x = embed[tokens]                                   [B, T, h]
//   per layer:  x += o(attn(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))))
//               x += down(silu(gate(n2(x))) * up(n2(x)))
//   logits = lm_head(norm(x))                           [B, T, V] (only at loss positions)
//
// RMSNorm is computed in fp32; RoPE uses HF's rotate_half convention with cos/sin in fp32,
// its frequencies HF's default or Llama 3.1's llama3 rescaling (config.rope_scaling: with
// wavelength w = 2π/f and old = original_max_position_embeddings, f stays where
// w < old/high_freq_factor, becomes f/factor where w > old/low_freq_factor, and in between
// (1-s)·f/factor + s·f with s = (old/w - low_freq_factor)/(high - low), all in fp32);
// query head h attends with kv head h / (H / KV); causal mask; q, k and v carry biases
// when config.qkv_bias (Qwen2), no other projection does.
//
// Packed rows of several documents (data.h's Batch::position): RoPE takes each token's
// position within its document, and attention is block-diagonal causal (a token sees the
// tokens of its own document up to itself), through an additive [B, 1, T, T] mask in the
// compute dtype built once per micro-batch and shared by every layer (and by a
// checkpointed layer's recompute). Batches whose rows are one document each keep plain
// causal attention (LibTorch 2.x: scaled_dot_product_attention's is_causal), no mask.
//
// Under tensor parallelism (tensor_parallel.h, set_tensor_parallel) each rank computes its
// heads and MLP rows with Megatron's f and g around the projections, a
// vocabulary-parallel embedding and a vocabulary-parallel loss (tensor_parallel_ops.h).
#pragma once

#include <ATen/ATen.h>
#include <torch/version.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives.h"
#include "config.h"
#include "data.h"
#include "lora_options.h"

namespace llamafleet::trainer {

// How a tensor-parallel group splits a tensor (tensor_parallel.h): kept whole on every
// rank, or cut into equal contiguous blocks along dim 0 or dim 1.
enum class TpSplit : uint8_t { kReplicated = 0, kRows = 1, kColumns = 2 };

// A parameter unit (FSDP's wrap policy): the embedding, one decoder layer, or the final
// norm + lm_head. Names are the HF tensor names; shapes are [out, in] for projections.
//
// A frozen tensor (LoRA's base weights) gets no gradient, no fp32 master and no optimizer
// state: an engine keeps it in the compute dtype, gathers it like the others and never
// reduces it. `frozen` is empty (nothing frozen) or one flag per name.
struct UnitLayout {
  std::string name;                          // "embed", "layers.N", "head"
  std::vector<std::string> param_names;      // HF names, in the order the model uses them
  std::vector<std::vector<int64_t>> shapes;  // one per name
  std::vector<bool> frozen;                  // empty, or one per name
  std::vector<TpSplit> split;                // empty (all replicated), or one per name
  int64_t numel() const;
  bool is_frozen(size_t i) const { return i < frozen.size() && frozen[i]; }
  TpSplit split_of(size_t i) const { return i < split.size() ? split[i] : TpSplit::kReplicated; }
  int64_t numel(size_t i) const;             // elements of tensor i
  int64_t trainable_numel() const;           // elements of the tensors not frozen
};

// Units in forward order: [embed, layers.0 .. layers.L-1, head]. In a decoder-layer unit
// the parameters are ordered: input_layernorm, q, k, v, o, post_attention_layernorm,
// gate, up, down, then with config.qkv_bias the q, k and v biases (split as their
// weights' rows under tensor parallelism). The head unit holds model.norm.weight and,
// unless the embeddings are tied, lm_head.weight.
std::vector<UnitLayout> MakeLayout(const LlamaConfig& config);
// Tensors of a decoder-layer unit of MakeLayout (9, or 12 with q/k/v biases): LoRA's
// adapters follow them.
int LayerBaseTensors(const LlamaConfig& config);
inline constexpr int kQkvBiasIndex = 9;  // q's bias in a layer unit (k, v follow)
inline int EmbedUnit() { return 0; }
inline int LayerUnit(int layer) { return 1 + layer; }
inline int HeadUnit(const LlamaConfig& c) { return 1 + static_cast<int>(c.num_hidden_layers); }

class ParamEngine;
struct KvCache;

// What a decoder layer keeps from forward for backward (the JobSpec's
// fsdp.activation_checkpointing):
//   kNone       everything autograd saves (no recompute);
//   kFull       only the layer's input; backward re-runs the whole layer;
//   kSelective  the input and the outputs of the seven projections (q, k, v, o, gate, up,
//               down: the matmuls, most of a layer's FLOPs); backward re-runs only the
//               cheap rest (RMSNorms, RoPE, attention's softmax path, SiLU times up,
//               residual adds) and takes the projections' outputs as kept. Attention's
//               output is recomputed: its backward needs its probabilities, which only a
//               fused kernel's saved log-sum-exp would spare.
// All three give the same gradients.
enum class ActivationCheckpointing : uint8_t { kNone = 0, kFull = 1, kSelective = 2 };
const char* ActivationCheckpointingName(
    ActivationCheckpointing mode);  // "none", "full", "selective"
// "none" | "full" | "selective", or "true" (full) / "false" (none).
absl::StatusOr<ActivationCheckpointing> ParseActivationCheckpointing(const std::string& name);

// A micro-batch on the device.
struct ModelInput {
  at::Tensor tokens;         // [B, T] int64
  // [B, T] int64: each token's position in its document (Batch::position); undefined when
  // every row is one document (positions 0..T-1, causal attention).
  at::Tensor positions;
  at::Tensor loss_positions;  // [N] int64: flat indices b*(T-1)+t whose next token is a target
  at::Tensor labels;          // [N] int64: tokens[b][t+1] for those positions
  int64_t num_targets = 0;    // N
};
ModelInput MakeModelInput(const Batch& batch, const at::Device& device);

class LlamaModel {
 public:
  // `compute_dtype` is the dtype of activations (the engine hands out parameters in it).
  LlamaModel(const LlamaConfig& config, at::Device device, at::ScalarType compute_dtype);

  const LlamaConfig& config() const { return config_; }
  at::ScalarType compute_dtype() const { return dtype_; }

  // LoRA (lora.h): the layout's layer units carry the adapters of `lora`, which the
  // decoder adds to their projections. Dropout applies while training() is true.
  void set_lora(const LoraOptions& lora);
  void set_training(bool training) { training_ = training; }
  // Tensor parallelism (tensor_parallel.h): the engine's layout is this rank's slice of a
  // group of `tp->size()` ranks, which run every micro-batch together. nullptr: none.
  void set_tensor_parallel(Comm* tp);
  bool training() const { return training_; }

  // Sum over the N target positions of the token cross-entropy (fp32 scalar),
  // differentiable with respect to the engine's parameters. Divide by the global target
  // count before backward (see the loss semantics in train.h). T must not exceed
  // max_position_embeddings.
  at::Tensor LossSum(ParamEngine& engine, const ModelInput& input);

  // Recompute decoder layers' activations in backward instead of keeping them (see
  // ActivationCheckpointing): the forward keeps each layer's input (and, selective, its
  // projections' outputs); backward tells the engine which layer comes next (so its
  // gather starts before this layer recomputes), acquires the layer's parameters again,
  // re-runs it with autograd and back-propagates through it (PyTorch's reentrant
  // checkpoint). Same results, a fraction of the activation memory; full costs one extra
  // forward, selective the elementwise part of one.
  void set_activation_checkpointing(ActivationCheckpointing mode) { checkpointing_ = mode; }
  void set_activation_checkpointing(bool on) {
    checkpointing_ = on ? ActivationCheckpointing::kFull : ActivationCheckpointing::kNone;
  }
  ActivationCheckpointing activation_checkpointing() const { return checkpointing_; }

  // At most this many target positions' logits ([positions, V] fp32) exist at once: the
  // loss over more positions is computed in chunks, each recomputed in backward (the
  // same loss and gradients up to the order of sums; one more output-projection GEMM
  // per position in backward). Not applied under tensor parallelism. Must be > 0.
  void set_loss_chunk_positions(int64_t positions) { loss_chunk_ = positions; }
  int64_t loss_chunk_positions() const { return loss_chunk_; }

  // Final hidden states after the last norm, [B, T, h] (used by tests); `positions` as
  // ModelInput's (undefined: one document per row).
  at::Tensor Hidden(ParamEngine& engine, const at::Tensor& tokens,
                    const at::Tensor& positions = {});

  // Incremental decoding (kv_cache.h), without autograd, LoRA layers or tensor
  // parallelism: runs `tokens` [B, S] at slots [cache.length, cache.length + S) of
  // `cache` (whose `valid` the caller has set for those slots), each token rotated by its
  // row's position in `positions` [B, S] int64, attending to the valid slots before it;
  // appends their keys and values and advances cache.length by S. Returns the fp32
  // logits of the last of the S tokens, [B, V]: for a row whose valid slots are its
  // tokens at positions 0..n-1 they are the logits Hidden gives at its last token when
  // the row runs alone, unpadded. The training path (LossSum, Hidden) is not involved.
  at::Tensor ForwardCached(ParamEngine& engine, const at::Tensor& tokens,
                           const at::Tensor& positions, KvCache& cache);

 private:
  friend class CheckpointedLayer;
  friend class ChunkedCrossEntropy;
  struct KeptProjections;
  at::Tensor DecoderLayer(const std::vector<at::Tensor>& p, const at::Tensor& x,
                          const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask);
  // One decoder layer of ForwardCached: `mask` as CachedAttentionMask's, keys and values
  // written to `k_cache`/`v_cache` at slots [start, start + S).
  at::Tensor CachedDecoderLayer(const std::vector<at::Tensor>& p, const at::Tensor& x,
                                const at::Tensor& cos, const at::Tensor& sin,
                                const at::Tensor& mask, at::Tensor& k_cache,
                                at::Tensor& v_cache, int64_t start);
  at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight) const;
  at::Tensor Linear(const at::Tensor& x, const at::Tensor& w) const;  // x w^T
  // Projection `module` (kLoraModuleNames' order) of a decoder layer's tensors `p`, plus
  // its adapter when it has one. Under tensor parallelism a column-parallel module takes
  // `x` after CopyToTensorParallel and `x_whole` before it (the adapter's A reads the
  // replicated input itself, so its input gradient is not summed over the group again);
  // a row-parallel module (o, down) returns the group's sum.
  at::Tensor Project(const std::vector<at::Tensor>& p, int module, const at::Tensor& x,
                     const at::Tensor& x_whole) const;
  // Before the final norm; `positions` as ModelInput's.
  at::Tensor Trunk(ParamEngine& engine, const at::Tensor& tokens, const at::Tensor& positions);
  // Sum of the cross-entropy of logits y w^T (fp32) against labels: y [N, h], w [V, h].
  at::Tensor ChunkLoss(const at::Tensor& y, const at::Tensor& w, const at::Tensor& labels) const;

  LlamaConfig config_;
  at::Device device_;
  at::ScalarType dtype_;
  // fp32 on the CPU: projections run through oneDNN's GEMM (at::mkldnn_linear), several
  // times faster than the generic BLAS Debian's LibTorch is built with. Off with
  // LLAMAFLEET_CPU_GEMM=aten.
  bool onednn_gemm_;
  at::Tensor cos_;  // [max_pos, head_dim] fp32
  at::Tensor sin_;  // [max_pos, head_dim] fp32
  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::kNone;
  int64_t loss_chunk_ = 1024;  // see set_loss_chunk_positions
  // Set while a checkpointed layer records (forward) or replays (backward recompute) its
  // projections' outputs; null otherwise.
  KeptProjections* kept_ = nullptr;
  LoraOptions lora_;                               // !enabled: no adapters
  std::array<int, kLoraModules> lora_index_{};     // LoraIndex per module
  bool training_ = true;
  Comm* tp_ = nullptr;  // tensor-parallel group, or none
  int64_t tp_size_ = 1;
};

}  // namespace llamafleet::trainer
