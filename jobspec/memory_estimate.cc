#include "jobspec/memory_estimate.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "jobspec/model_presets.h"

namespace llamafleet::sched {

namespace {

// x / t rounded up: one tensor-parallel rank's share of x.
int64_t Split(int64_t x, int64_t t) { return t > 1 ? (x + t - 1) / t : x; }

// One tensor-parallel rank's parameters of a decoder layer, the embedding and the head.
struct RankUnits {
  int64_t layer = 0, embed = 0, head = 0;
};

RankUnits RankUnitsOf(const ModelShape& m, int tensor_parallel) {
  const int64_t t = std::max(1, tensor_parallel);
  const int64_t q = m.QueryWidth(), kv = m.KeyValueWidth(), h = m.hidden;
  const int64_t bias = m.qkv_bias ? q + 2 * kv : 0;
  RankUnits u;
  u.layer =
      2 * h + Split(2 * h * q + 2 * h * kv + 3 * h * m.intermediate + bias, t);  // the norms whole
  u.embed = Split(m.vocab * h, t);
  u.head = h + (m.tied_embeddings ? 0 : u.embed);
  return u;
}

}  // namespace

int64_t ModelShape::Parameters(int tensor_parallel) const {
  const RankUnits u = RankUnitsOf(*this, tensor_parallel);
  return u.embed + layers * u.layer + u.head;
}

int64_t ModelShape::LargestUnitParameters(int tensor_parallel) const {
  const RankUnits u = RankUnitsOf(*this, tensor_parallel);
  return std::max({u.layer, u.embed, u.head});
}

std::optional<ModelShape> PresetShape(const std::string& preset) {
  const ModelPreset* p = FindModelPreset(preset);
  if (p == nullptr) return std::nullopt;
  // The tiny presets take the tokenizer's vocabulary in the trainer: the table's 32,000
  // stands in unless the caller sets the tokenizer's (jobspec.h's EstimateJobMemory).
  ModelShape m;
  m.hidden = p->hidden, m.intermediate = p->intermediate, m.layers = p->layers;
  m.heads = p->heads, m.kv_heads = p->kv_heads, m.head_dim = p->head_dim, m.vocab = p->vocab;
  m.tied_embeddings = p->tied_embeddings;
  m.qkv_bias = p->qkv_bias;
  return m;
}

unsigned LoraModuleBit(const std::string& module) {
  static const char* const kNames[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  for (unsigned i = 0; i < 7; ++i) {
    if (module == kNames[i]) return 1u << i;
  }
  return 0;
}

int64_t LoraLayerParameters(const ModelShape& m, int64_t r, unsigned modules, int tensor_parallel) {
  const int64_t h = m.hidden, f = m.intermediate, t = std::max(1, tensor_parallel);
  const int64_t q = m.QueryWidth(), kv = m.KeyValueWidth();
  // {in, out, split by output (column-parallel) or by input (row-parallel)}
  struct Projection {
    int64_t in, out;
    bool column;
  };
  const Projection p[7] = {{h, q, true}, {h, kv, true}, {h, kv, true}, {q, h, false},
                           {h, f, true}, {h, f, true},  {f, h, false}};
  int64_t n = 0;
  for (int i = 0; i < 7; ++i) {
    if (!(modules >> i & 1u)) continue;
    n += p[i].column ? r * p[i].in + Split(r * p[i].out, t) : Split(r * p[i].in, t) + r * p[i].out;
  }
  return n;
}

namespace {
// Base weights of one decoder layer's targeted projections (whole, not split).
int64_t TargetedBaseParameters(const ModelShape& m, unsigned modules) {
  const int64_t h = m.hidden, f = m.intermediate, q = m.QueryWidth(), kv = m.KeyValueWidth();
  const int64_t sizes[7] = {h * q, h * kv, h * kv, q * h, h * f, h * f, f * h};
  int64_t n = 0;
  for (int i = 0; i < 7; ++i) {
    if (modules >> i & 1u) n += sizes[i];
  }
  return n;
}
// NF4 storage of n weights: codes, absmax codes, group scales (nf4.h's Nf4StorageBytes).
int64_t Nf4Bytes(int64_t n) {
  return n == 0 ? 0 : (n + 1) / 2 + (n + 63) / 64 + 4 * ((n + 16383) / 16384) + 4;
}
}  // namespace

MemoryEstimate EstimateMemory(const MemoryInputs& in) {
  const ModelShape& m = in.model;
  const bool lora = in.lora_r > 0;
  const int tp = std::max(1, in.tensor_parallel);
  const int64_t base = m.Parameters();           // the whole model
  const int64_t base_rank = m.Parameters(tp);    // this rank's tensor-parallel slice of it
  const int64_t adapter_layer = lora ? LoraLayerParameters(m, in.lora_r, in.lora_modules, tp) : 0;
  // P: what this rank trains (and reduces, and saves); U: the largest unit as gathered.
  const int64_t P = lora ? m.layers * adapter_layer : base_rank;
  const int64_t U = m.LargestUnitParameters(tp) + adapter_layer;
  const int64_t U_trained = lora ? adapter_layer : U;
  const int64_t c = in.compute_bytes;
  const int64_t r = in.reduce_bytes;
  // Sharding runs over the data-parallel ranks.
  const int64_t data_parallel = std::max(1, in.world_size / tp);
  int64_t n = 1;
  switch (in.strategy) {
    case Strategy::kFullShard:
    case Strategy::kShardGradOp: n = data_parallel; break;
    case Strategy::kHybridShard:
      n = in.shard_group_size > 0 ? std::max(1, in.shard_group_size / tp) : data_parallel;
      break;
    case Strategy::kNoShard: n = 1; break;
  }
  const bool keeps_gathered = in.strategy == Strategy::kShardGradOp || in.strategy == Strategy::kNoShard;
  auto shard = [&](int64_t bytes_per_param) { return (bytes_per_param * P + n - 1) / n; };

  // The frozen base (LoRA): in the compute dtype, or with QLoRA its targeted part as NF4.
  const int64_t nf4_layer = lora && in.nf4_base && tp == 1 ? TargetedBaseParameters(m, in.lora_modules) : 0;
  const int64_t frozen_bytes = lora ? c * (base_rank - m.layers * nf4_layer) + m.layers * Nf4Bytes(nf4_layer) : 0;

  MemoryEstimate e;
  e.parameters = shard(4) + (frozen_bytes + n - 1) / n;
  e.gradients = shard(4);
  if (keeps_gathered && in.grad_accum > 1) e.gradients += 4 * P;
  e.optimizer_state = shard(8);

  // End of forward. What tensor parallelism splits is divided by tp (Split), the
  // replicated residual stream and norms are not.
  const int64_t t = std::max<int64_t>(1, in.micro_batch) * std::max<int64_t>(1, in.seq_len);
  const int64_t h = m.hidden, f = m.intermediate;
  const int64_t q = m.QueryWidth(), kv = m.KeyValueWidth();
  const int64_t attention = in.fused_attention ? 0 : Split(t * m.heads * in.seq_len * (4 + (c == 4 ? 0 : c)), tp);
  const int64_t layer =
      t * 4 * h * c + Split(t * (2 * q + 2 * kv + 4 * f) * c, tp) + t * 2 * h * 4 + attention;
  int64_t saved_layers = m.layers * layer;
  switch (in.activation_checkpointing) {
    case Checkpointing::kNone:
      break;
    case Checkpointing::kFull:
      saved_layers = m.layers * t * h * c + layer;
      break;
    case Checkpointing::kSelective:
      saved_layers = m.layers * (t * 3 * h * c + Split(t * (q + 2 * kv + 2 * f) * c, tp)) + layer;
      break;
  }
  // Logits: 16 bytes per logit in FP32 and BF16 alike (calibrated on the CPU: the lm_head
  // output, its fp32 copy or log-softmax, the incoming gradient and log-softmax backward's
  // softmax temporary); with tensor parallelism each rank's vocabulary slice, all
  // positions at once. Without it the trainer computes the loss over more than
  // kLossChunkPositions target positions in chunks of that many, recomputed in backward,
  // where the output projection's gradient sums over the chunks in fp32 (full finetuning:
  // LoRA freezes it).
  const int64_t positions =
      std::max<int64_t>(1, in.micro_batch) * std::max<int64_t>(0, in.seq_len - 1);
  const bool chunked = tp == 1 && positions > kLossChunkPositions;
  const int64_t logits = chunked ? kLossChunkPositions * m.vocab * 16 + (lora ? 0 : 4 * m.vocab * h)
                                 : Split(t * m.vocab * 16, tp);
  const int64_t head = t * (4 * h + 2 * h * c) + logits;
  const int64_t document_mask = in.document_mask ? t * std::max<int64_t>(1, in.seq_len) * c : 0;
  const int64_t activations = saved_layers + head + document_mask;
  const int64_t everything = lora ? base_rank + P : base_rank;  // every tensor of the slice, gathered
  const int64_t gathered_fwd = (keeps_gathered ? everything * c : (in.max_inflight_all_gathers + 1) * U * c) +
                               (nf4_layer > 0 ? Nf4Bytes(nf4_layer) : 0);  // one unit's packed bytes
  // Backward: up to K + 1 unsharded gradients in reduce dtype are alive at once (the one
  // just launched before the oldest is freed), early in backward while the activations
  // are still held; Gloo's reduce-scatter (an all-to-all) adds a receive buffer per input,
  // and each sharded reduction its output shard. Tensor parallelism adds its all-reduce
  // buffers, one activation [micro_batch, seq_len, hidden] in the compute dtype each.
  const int64_t inflight = std::min<int64_t>((in.max_inflight_reduces + 1) * U_trained, P);
  const int64_t tp_all_reduce = tp > 1 ? std::max(1, in.max_inflight_tp_all_reduces) * t * h * c : 0;
  const int64_t communication =
      inflight * r * (in.gpu ? 1 : 2) + (n > 1 ? (inflight * r + n - 1) / n : 0) + tp_all_reduce;
  e.peak_phase = "backward";
  if (in.forward_only) {  // no backward: nothing reduced, nothing to optimize or stage
    e.gradients = e.optimizer_state = 0;
    e.peak_phase = "forward";
  }
  e.gathered_params = gathered_fwd;
  e.activations = activations;
  e.communication = in.forward_only ? tp_all_reduce : communication;
  const int64_t rest = e.parameters + e.gradients + e.optimizer_state + e.gathered_params +
                       e.activations + e.communication;
  e.workspace = in.gpu ? (int64_t{1} << 30) + rest / 10 : in.cpu_runtime_bytes;
  e.checkpoint_staging = in.async_checkpoints && !in.forward_only ? shard(12) : 0;
  e.total = rest + e.workspace + (in.gpu ? 0 : e.checkpoint_staging);
  e.model_parameters = base;
  e.trainable_parameters = lora ? m.layers * LoraLayerParameters(m, in.lora_r, in.lora_modules) : base;
  return e;
}

namespace {
constexpr int64_t kMiB = int64_t{1} << 20;
}  // namespace

const std::vector<InstanceType>& KnownInstanceTypes() {
  // Memory as nvidia-smi reports it (MiB) on each instance type's GPUs.
  static const auto* types = new std::vector<InstanceType>{
      {"p3.16xlarge", 8, 16160 * kMiB, "V100 16GB"},
      {"p3dn.24xlarge", 8, 32510 * kMiB, "V100 32GB"},
      {"g5.xlarge", 1, 23028 * kMiB, "A10G 24GB"},
      {"g5.12xlarge", 4, 23028 * kMiB, "A10G 24GB"},
      {"g5.48xlarge", 8, 23028 * kMiB, "A10G 24GB"},
      {"g6e.48xlarge", 8, 46068 * kMiB, "L40S 48GB"},
      {"p4d.24xlarge", 8, 40960 * kMiB, "A100 40GB"},
      {"p4de.24xlarge", 8, 81920 * kMiB, "A100 80GB"},
      {"p5.48xlarge", 8, 81559 * kMiB, "H100 80GB"},
      {"p5e.48xlarge", 8, 143771 * kMiB, "H200 141GB"},
      {"p5en.48xlarge", 8, 143771 * kMiB, "H200 141GB"},
  };
  return *types;
}

const InstanceType* FindInstanceType(const std::string& name) {
  for (const InstanceType& t : KnownInstanceTypes()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string FormatGiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
}

}  // namespace llamafleet::sched
