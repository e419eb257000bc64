#ifndef LLAMAFLEET_JOBSPEC_MEMORY_ESTIMATE_H_
#define LLAMAFLEET_JOBSPEC_MEMORY_ESTIMATE_H_

// Memory-fit estimate: bytes one trainer rank needs at its peak, from the job's shape
// alone. A pure function on plain structs (no proto, no Torch) shared by the job-spec
// validator (refusal at submission), the CLI (--dry-run, describe) and the scheduler
// (placement only on workers whose per-GPU memory holds it).
//
// It models llamafleet's own engine (worker/trainer/sharded_engine.h), not FSDP in
// general. With P parameters, N the shard group size (FULL_SHARD / SHARD_GRAD_OP: the
// world; HYBRID_SHARD: the group; NO_SHARD: 1), c the compute bytes (2 for BF16/FP16,
// 4 for FP32), r the reduce bytes, t = micro_batch x seq_len tokens, U the largest unit
// (a decoder layer, or the embedding / head when larger):
//
//   parameters        4P/N     fp32 master shard
//   gradients         4P/N     fp32 gradient shard
//                     + 4P     unsharded fp32 accumulator (NO_SHARD / SHARD_GRAD_OP with
//                              grad_accum > 1: micro-steps accumulate locally)
//   optimizer_state   8P/N     AdamW exp_avg + exp_avg_sq, fp32
//   gathered_params   FULL_SHARD / HYBRID_SHARD: (max_inflight_all_gathers + 1) x U x c
//                     SHARD_GRAD_OP / NO_SHARD:  P x c (every unit stays gathered from
//                     forward to its backward)
//   activations       forward end: per layer t x (6h + 2kv + 4f) x c + t x 2h x 4 (the
//                     fp32 RMSNorm copies) + attention t x H x seq_len x (4 + c) unless
//                     fused (LibTorch >= 2 on a GPU: scaled_dot_product_attention keeps
//                     O(t)); with full activation checkpointing only t x h x c per layer,
//                     plus one layer recomputed in backward; with selective checkpointing
//                     per layer t x (3h + q + 2kv + 2f) x c (the input and the outputs of
//                     the seven projections, q = H x head_dim), plus one layer recomputed
//                     in backward. Of the 6h (4h + 2q): the layer input, both norm outputs
//                     and the residual after attention (4h), the queries and the attention
//                     output (2q). Final norm t x (4h + 2h x c). Logits, 16 bytes each
//                     (the lm_head output and its fp32 copy, log-softmax, the incoming
//                     gradient and the softmax temporary of log-softmax backward;
//                     calibrated on the CPU): C x V with C = kLossChunkPositions when a
//                     micro-batch has more target positions (micro_batch x (seq_len - 1))
//                     than C, plus 4 x V x h for the output projection's fp32 gradient
//                     summed over the chunks (full finetuning only); otherwise t x V.
//                     Packing (document_mask): the block-diagonal attention mask,
//                     t x seq_len x c, built once per micro-batch and kept through
//                     backward (every layer and recompute shares it), on a GPU too.
//   communication     min((K + 1) x U, P) x r, K = max_inflight_reduces: the unsharded
//                     gradients whose reduce-scatter is in flight (the engine waits for
//                     the oldest before it holds more), x 2 on a CPU (Gloo's all-to-all
//                     receive buffer), + 1/N of that for the output shards (N > 1).
//   checkpoint staging  12P/N of host memory while a background checkpoint is written
//                     (async checkpoints only): in the total on a CPU, where host memory
//                     is the device's; beside it on a GPU.
//   workspace         runtime (CUDA context, cuBLAS/NCCL workspaces: 1 GiB on a GPU; the
//                     process itself on a CPU) + 10% of the rest on a GPU for allocator
//                     fragmentation.
//
// Tensor parallelism (tensor_parallel T > 1, Megatron-style; the data-parallel world is
// D = world / T): each rank holds 1/T of every weight matrix (q/k/v and gate/up by output,
// o and down by input, the embedding and lm_head by vocabulary) and all of the RMSNorm
// weights, so P and U above are one rank's slice: P_T = (P - norms) / T + norms with
// norms = (2L + 1) h, and likewise per unit. Sharding then runs over the data-parallel
// ranks: N is D for FULL_SHARD / SHARD_GRAD_OP and shard_group_size / T for HYBRID_SHARD
// (a group of G ranks holds G / T copies of each slice position). Activations follow the
// split: the queries, keys, values, attention output, attention scores and the 4f of the
// MLP are divided by T; the 4h of replicated residual stream and norm outputs, the fp32
// norm copies, the checkpointed layer inputs and the final norm are not; the logits are
// divided by T and never chunked (vocabulary-parallel cross entropy never gathers them;
// its per-token max / sum / target all-reduces, 12 bytes a token, are left out).
// Communication adds the tensor-parallel all-reduce buffers: max_inflight_tp_all_reduces x
// t x h x c (the row-parallel outputs in forward, the column-parallel input gradients in
// backward).
// LoRA adapters follow their base projection's split: a column-parallel projection's A
// is whole and its B split by output, a row-parallel one's A split by input and B whole.
// model_parameters and trainable_parameters stay whole-model counts.
//
// LoRA (lora_r > 0): the base is frozen and held in the compute dtype, sharded (c x B/N
// for the B base parameters); masters, gradients, optimizer state, checkpoint staging and
// the reductions in flight count only the A adapter parameters (r x (in + out) per
// targeted projection) in place of P, and U in communication is one layer's adapters.
// Gathered units and activations are as for full finetuning (the adapters still need the
// inputs of the targeted projections).
// QLoRA (nf4_base, with tensor_parallel 1): the targeted projections' base weights are held
// as NF4, about 0.516 bytes per weight (4-bit codes, one absmax byte per 64 weights, a float
// per 16,384), sharded; a gathered unit is decoded into the compute dtype as for LoRA and
// its packed bytes are counted beside it.
//
// The peak is early in backward: parameters, gradients, optimizer state, the gathered
// units, every activation saved by forward (logits included) and the first reductions in
// flight, all at once. It is reported as peak_phase "backward".

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llamafleet::sched {

// The trainer's cross entropy holds the logits of at most this many target positions at
// once (LlamaModel::set_loss_chunk_positions' default) without tensor parallelism.
inline constexpr int64_t kLossChunkPositions = 1024;

// A model's shape (the fields of config.json the estimate reads). The formulas above
// write q = H x head_dim and kv = KV x head_dim for the query and key/value widths.
struct ModelShape {
  int64_t hidden = 0;         // h
  int64_t intermediate = 0;   // f (SwiGLU width)
  int64_t layers = 0;         // L
  int64_t heads = 0;          // H
  int64_t kv_heads = 0;       // KV
  int64_t head_dim = 0;       // 0: h / H
  int64_t vocab = 0;          // V
  bool tied_embeddings = false;  // the head is the embedding: counted (and gathered) once
  bool qkv_bias = false;         // q, k, v projections carry biases (q + 2kv a layer)

  int64_t HeadDim() const { return head_dim > 0 ? head_dim : heads > 0 ? hidden / heads : 0; }
  int64_t QueryWidth() const { return heads * HeadDim(); }        // q
  int64_t KeyValueWidth() const { return kv_heads * HeadDim(); }  // kv

  // One tensor-parallel rank's share (tensor_parallel 1: the whole model): each weight
  // matrix (and bias) split tensor_parallel ways (rounded up), the RMSNorm weights whole.
  int64_t Parameters(int tensor_parallel = 1) const;
  // The biggest of embedding, one layer, head (one rank's share of it).
  int64_t LargestUnitParameters(int tensor_parallel = 1) const;
};

// The built-in presets' shapes (jobspec/model_presets.h, the table the trainer's
// PresetConfig reads too); nullopt if unknown.
std::optional<ModelShape> PresetShape(const std::string& preset);

enum class Strategy { kFullShard, kShardGradOp, kHybridShard, kNoShard };
// fsdp.activation_checkpointing: what each decoder layer keeps for backward (see above).
enum class Checkpointing { kNone, kFull, kSelective };

struct MemoryInputs {
  ModelShape model;
  Strategy strategy = Strategy::kFullShard;
  int world_size = 1;               // ranks in the job, tensor-parallel ranks included
  // HYBRID_SHARD only: ranks per shard group, tensor-parallel ranks included (0 = world);
  // it shards each slice shard_group_size / tensor_parallel ways.
  int shard_group_size = 0;
  int tensor_parallel = 1;          // ranks per tensor-parallel group (see above)
  int max_inflight_tp_all_reduces = 1;  // tensor-parallel all-reduces in flight at once
  int compute_bytes = 2;            // 2 (BF16/FP16) or 4 (FP32)
  int reduce_bytes = 4;             // gradient collectives
  Checkpointing activation_checkpointing = Checkpointing::kFull;
  int64_t micro_batch = 4;          // rows per micro-step
  int64_t seq_len = 4096;           // tokens per row
  int64_t grad_accum = 1;           // micro-steps per optimizer step
  int max_inflight_all_gathers = 2;
  int max_inflight_reduces = 2;     // the engine's bound on unsharded gradients in flight
  bool fused_attention = true;      // LibTorch 2 SDPA on a GPU; false: the explicit T x T path
  bool document_mask = false;  // packed rows: the [micro_batch, seq_len, seq_len] mask (see above)
  bool gpu = true;                  // GPU workspace rules; false: CPU process (RSS)
  int64_t cpu_runtime_bytes = 0;    // !gpu: the trainer process before it allocates
  bool async_checkpoints = false;   // checkpoints written in the background (a host copy)
  int64_t lora_r = 0;               // LoRA adapter rank; 0 = full finetuning
  // Targeted projections, bit i for kLoraModuleBits[i]: q, k, v, o, gate, up, down.
  unsigned lora_modules = 0;
  bool nf4_base = false;            // QLoRA: the targeted base weights held as NF4 (see above)
  // An evaluation job (forward passes only, no autograd): no gradients, optimizer state,
  // reductions or checkpoint staging; activations as modelled above (an upper bound);
  // peak_phase "forward".
  bool forward_only = false;
};

// Bits of MemoryInputs::lora_modules by module name ("q_proj" -> 1, ...); 0 if unknown.
unsigned LoraModuleBit(const std::string& module);
// Adapter parameters of one decoder layer: r x (in + out) per targeted projection; with
// tensor_parallel > 1 one rank's share (the split side divided, rounded up; see above).
int64_t LoraLayerParameters(const ModelShape& m, int64_t r, unsigned modules, int tensor_parallel = 1);

struct MemoryEstimate {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t gathered_params = 0;
  int64_t activations = 0;
  int64_t communication = 0;
  int64_t workspace = 0;
  int64_t checkpoint_staging = 0;  // host bytes (see above)
  int64_t total = 0;          // the sum of the above but staging on a GPU: bytes per device
  int64_t model_parameters = 0;      // counts, not bytes: the whole model
  int64_t trainable_parameters = 0;  // what the optimizer updates (LoRA: the adapters)
  std::string peak_phase;     // the moment modelled: "backward" (early backward, above)
};

MemoryEstimate EstimateMemory(const MemoryInputs& in);

// A GPU instance type with its accelerator memory (as the driver reports it).
struct InstanceType {
  std::string name;
  int gpus = 0;
  int64_t gpu_memory_bytes = 0;
  std::string gpu;  // "H100 80GB", ...
};
const std::vector<InstanceType>& KnownInstanceTypes();
const InstanceType* FindInstanceType(const std::string& name);

// "12.3 GiB"
std::string FormatGiB(int64_t bytes);

}  // namespace llamafleet::sched

#endif  // LLAMAFLEET_JOBSPEC_MEMORY_ESTIMATE_H_
