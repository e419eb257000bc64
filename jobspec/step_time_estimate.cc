#include "jobspec/step_time_estimate.h"

#include <algorithm>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llamafleet::sched {

namespace {

constexpr double kGB = 1e9;
constexpr double kTera = 1e12;

// Elementwise bytes a token moves per decoder layer in forward, in passes over each width
// (read + write) in the compute dtype: RMSNorms (x2), RoPE on q and k, head reshapes,
// residual adds, SwiGLU; plus the fp32 copies of the norms; plus, on the explicit
// attention path, the scale / mask / softmax passes over the H x s scores.
constexpr double kPassesHidden = 16;
constexpr double kPassesKv = 8;
constexpr double kPassesFfn = 5;
constexpr double kNormFp32BytesPerHidden = 32;
constexpr double kPassesScores = 6;
// Backward moves about twice what forward moves.
constexpr double kBackwardElementwise = 2;
// The head's logits: bytes per logit over forward and backward (log-softmax, its fp32
// copy, the incoming gradient, the softmax temporary; the memory estimate's 16, x3 passes).
constexpr double kLogitBytes = 48;

// Per-GPU figures: dense bf16 peak (datasheet), memory bandwidth, and the NCCL bus
// bandwidth among the 8 GPUs of one node (nccl-tests all_reduce on the NVLink or PCIe
// fabric). Inter-node figures belong to the instance type (below).
struct GpuFigures {
  const char* gpu;
  double peak_tflops, memory_gbps, intra_node_gbps;
};
constexpr GpuFigures kGpus[] = {
    {"V100 16GB", 125, 900, 130},  {"V100 32GB", 125, 900, 130},   {"A10G 24GB", 125, 600, 12},
    {"L40S 48GB", 362, 864, 20},   {"A100 40GB", 312, 1555, 230},  {"A100 80GB", 312, 2039, 230},
    {"H100 80GB", 989, 3350, 450}, {"H200 141GB", 989, 4800, 450},
};

// Inter-node all_reduce bus bandwidth per instance type, GB/s: p4de and p5 as measured by
// aws-samples/awsome-distributed-training; the others from their EFA / ENA line rate.
const std::map<std::string, double>& InterNodeGbps() {
  static const auto* m = new std::map<std::string, double>{
      {"p3.16xlarge", 3},   {"p3dn.24xlarge", 12}, {"g5.xlarge", 3},       {"g5.12xlarge", 5},
      {"g5.48xlarge", 12},  {"g6e.48xlarge", 50},  {"p4d.24xlarge", 78},   {"p4de.24xlarge", 78},
      {"p5.48xlarge", 487}, {"p5e.48xlarge", 487}, {"p5en.48xlarge", 487},
  };
  return *m;
}

// A ring collective's bytes per rank: all-gather / reduce-scatter of S bytes over n ranks.
double RingBytes(double s, int64_t n) {
  return n > 1 ? s * static_cast<double>(n - 1) / static_cast<double>(n) : 0;
}

int64_t ShardGroup(const MemoryInputs& in, int64_t data_parallel) {
  switch (in.strategy) {
    case Strategy::kFullShard:
    case Strategy::kShardGradOp:
      return data_parallel;
    case Strategy::kHybridShard:
      return in.shard_group_size > 0
                 ? std::max<int64_t>(1, in.shard_group_size / std::max(1, in.tensor_parallel))
                 : data_parallel;
    case Strategy::kNoShard:
      return 1;
  }
  return 1;
}

}  // namespace

double RecomputeFraction(RecomputeMode mode) { return mode == RecomputeMode::kFull ? 1.0 : 0.0; }

double ElementwiseRecomputeFraction(RecomputeMode mode) {
  return mode == RecomputeMode::kNone ? 0.0 : 1.0;
}

RecomputeMode RecomputeModeOf(Checkpointing activation_checkpointing) {
  switch (activation_checkpointing) {
    case Checkpointing::kNone:
      return RecomputeMode::kNone;
    case Checkpointing::kSelective:
      return RecomputeMode::kSelective;
    case Checkpointing::kFull:
      break;
  }
  return RecomputeMode::kFull;
}

StepTimeInputs StepTimeInputsOf(const MemoryInputs& job) {
  StepTimeInputs in;
  in.job = job;
  in.recompute = RecomputeModeOf(job.activation_checkpointing);
  return in;
}

absl::StatusOr<Hardware> HardwareOf(const std::string& instance_type) {
  const InstanceType* type = FindInstanceType(instance_type);
  if (type == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("resources.instance_type ", instance_type.empty() ? "(unset)" : instance_type,
                     " is not a known GPU instance type: no step-time estimate"));
  }
  Hardware hw;
  for (const GpuFigures& g : kGpus) {
    if (type->gpu != g.gpu) continue;
    hw.gpu = g.gpu;
    hw.peak_flops = g.peak_tflops * kTera;
    hw.memory_bytes_per_s = g.memory_gbps * kGB;
    hw.intra_node_bytes_per_s = g.intra_node_gbps * kGB;
  }
  if (hw.gpu.empty())
    return absl::NotFoundError(absl::StrCat("no figures for the GPU of ", instance_type));
  hw.inter_node_bytes_per_s = InterNodeGbps().at(type->name) * kGB;
  hw.devices_per_node = type->gpus;
  hw.sustained_fraction = 0.6;
  hw.collective_latency_s = 30e-6;
  return hw;
}

double ModelFlopsPerToken(const ModelShape& m, int64_t seq_len) {
  // The output projection runs whether or not it is the embedding matrix (tied).
  const double embedding = m.tied_embeddings ? 0.0 : static_cast<double>(m.vocab * m.hidden);
  return 6.0 * (static_cast<double>(m.Parameters()) - embedding) +
         12.0 * static_cast<double>(m.layers * m.QueryWidth() * seq_len);
}

namespace {

// The job's sizes, as the formulas below use them.
struct Dims {
  int tp = 1;
  double T = 1;  // tensor-parallel degree
  int64_t world = 1, data_parallel = 1;
  double t = 1;  // tokens of one micro-batch on a rank
  double s = 1;  // sequence length
  double h = 0, f = 0, q = 0, kv = 0, L = 0, V = 0;
  double c = 0, r = 0;  // compute and gradient-reduction bytes per element
  double micro_steps = 1;
  bool lora = false;
  double adapter_layer = 0;  // adapter parameters of one layer on this rank
};

Dims DimsOf(const MemoryInputs& j) {
  const ModelShape& m = j.model;
  Dims d;
  d.tp = std::max(1, j.tensor_parallel);
  d.T = d.tp;
  d.world = std::max(1, j.world_size);
  d.data_parallel = std::max<int64_t>(1, d.world / d.tp);
  d.t = static_cast<double>(std::max<int64_t>(1, j.micro_batch) * std::max<int64_t>(1, j.seq_len));
  d.s = static_cast<double>(std::max<int64_t>(1, j.seq_len));
  d.h = static_cast<double>(m.hidden);
  d.f = static_cast<double>(m.intermediate);
  d.q = static_cast<double>(m.QueryWidth());
  d.kv = static_cast<double>(m.KeyValueWidth());
  d.L = static_cast<double>(m.layers);
  d.V = static_cast<double>(m.vocab);
  d.c = j.compute_bytes;
  d.r = j.reduce_bytes;
  d.micro_steps = static_cast<double>(std::max<int64_t>(1, j.grad_accum));
  d.lora = j.lora_r > 0;
  d.adapter_layer =
      d.lora ? static_cast<double>(LoraLayerParameters(m, j.lora_r, j.lora_modules, d.tp)) : 0;
  return d;
}

// One micro-step's compute on one rank: GEMM FLOPs, elementwise bytes, and their time.
struct MicroCompute {
  double fwd = 0, bwd = 0, recompute = 0;  // GEMM FLOPs
  double elementwise = 0;                  // bytes, forward + backward + recompute
  double fwd_s = 0, bwd_s = 0;             // seconds, backward including recompute
};

MicroCompute EstimateMicroCompute(const StepTimeInputs& in, const Hardware& hw, const Dims& d) {
  const MemoryInputs& j = in.job;
  const double T = d.T, t = d.t, s = d.s, h = d.h, f = d.f, q = d.q, kv = d.kv, L = d.L, V = d.V;
  const double c = d.c;
  MicroCompute mc;
  const double layer_matmul = (2 * h * q + 2 * h * kv + 3 * h * f) / T;
  const double dense_fwd = L * 2 * t * layer_matmul;
  const double attention_fwd = L * 4 * t * s * q / T;
  const double head_fwd = 2 * t * h * V / T;
  const double adapter_fwd = L * 2 * t * d.adapter_layer;
  mc.fwd = dense_fwd + attention_fwd + head_fwd + adapter_fwd;
  mc.bwd = (d.lora ? 1.0 : 2.0) * (dense_fwd + head_fwd) + 2 * attention_fwd + 2 * adapter_fwd;
  mc.recompute = RecomputeFraction(in.recompute) * (dense_fwd + attention_fwd + adapter_fwd);

  const double scores =
      j.fused_attention ? 0 : kPassesScores * static_cast<double>(j.model.heads) * s * c / T;
  const double layer_bytes = c * (kPassesHidden * h + (kPassesKv * kv + kPassesFfn * f) / T) +
                             kNormFp32BytesPerHidden * h + scores;
  const double elementwise_fwd = L * t * layer_bytes;
  mc.elementwise =
      elementwise_fwd * (1 + kBackwardElementwise + ElementwiseRecomputeFraction(in.recompute)) +
      t * kLogitBytes * V / T;

  const double gemm_rate = hw.peak_flops * hw.sustained_fraction / (c == 4 ? 2.0 : 1.0);
  const double attention_rate =
      hw.attention_sustained_fraction > 0
          ? gemm_rate * hw.attention_sustained_fraction / hw.sustained_fraction
          : gemm_rate;
  // Attention's share of each pass, timed at its own rate.
  const double attention_recompute = RecomputeFraction(in.recompute) * attention_fwd;
  mc.fwd_s = (mc.fwd - attention_fwd) / gemm_rate + attention_fwd / attention_rate +
             elementwise_fwd / hw.memory_bytes_per_s;
  mc.bwd_s = (mc.bwd + mc.recompute - 2 * attention_fwd - attention_recompute) / gemm_rate +
             (2 * attention_fwd + attention_recompute) / attention_rate +
             (mc.elementwise - elementwise_fwd) / hw.memory_bytes_per_s;
  return mc;
}

// One micro-step's collectives: a pass of parameter gathers, a gradient reduction, and
// tensor parallelism's activation all-reduces.
struct MicroCollectives {
  int64_t shard_group = 1;
  double units = 0;    // sharded units (layers, embedding, head)
  double trained = 0;  // trained parameters on this rank (before sharding)
  double gather_pass_bytes = 0, gather_pass_s = 0, first_unit_gather_s = 0;
  double reduce_bytes = 0, reduce_s = 0;  // of a reducing micro-step
  double tp_bytes = 0, tp_s = 0;
};

MicroCollectives EstimateCollectives(const StepTimeInputs& in, const Hardware& hw, const Dims& d) {
  const MemoryInputs& j = in.job;
  MicroCollectives mc;
  const int64_t n = ShardGroup(j, d.data_parallel);
  mc.shard_group = n;
  const bool spans_nodes = d.world > hw.devices_per_node;
  const double shard_bw =
      (j.strategy == Strategy::kHybridShard ? n * d.tp > hw.devices_per_node : spans_nodes)
          ? hw.inter_node_bytes_per_s
          : hw.intra_node_bytes_per_s;
  mc.units = d.L + 2;
  const double base_rank = static_cast<double>(j.model.Parameters(d.tp));
  const double gathered_unit_bytes = (base_rank + d.L * d.adapter_layer) * d.c;  // every unit, once
  mc.trained = d.lora ? d.L * d.adapter_layer : base_rank;
  const double lat = hw.collective_latency_s;
  if (n > 1) {
    mc.gather_pass_bytes = RingBytes(gathered_unit_bytes, n);
    mc.gather_pass_s = mc.gather_pass_bytes / shard_bw + mc.units * lat;
    mc.first_unit_gather_s = mc.gather_pass_s / mc.units;
  }
  if (j.strategy == Strategy::kNoShard) {
    if (d.data_parallel > 1) {
      mc.reduce_bytes = 2 * RingBytes(mc.trained * d.r, d.data_parallel);
      mc.reduce_s =
          mc.reduce_bytes / (spans_nodes ? hw.inter_node_bytes_per_s : hw.intra_node_bytes_per_s) +
          mc.units * lat;
    }
  } else if (n > 1) {
    mc.reduce_bytes = RingBytes(mc.trained * d.r, n);
    mc.reduce_s = mc.reduce_bytes / shard_bw + mc.units * lat;
    const int64_t replicas = d.data_parallel / n;
    if (j.strategy == Strategy::kHybridShard && replicas > 1) {
      const double cross = 2 * RingBytes(mc.trained * d.r / static_cast<double>(n), replicas);
      mc.reduce_bytes += cross;
      mc.reduce_s += cross / hw.inter_node_bytes_per_s + mc.units * lat;
    }
  }
  // Tensor parallelism: 2 all-reduces of t x h per layer forward, 2 backward, exposed.
  if (d.tp > 1) {
    const double passes = 2 + (in.recompute == RecomputeMode::kFull ? 1 : 0);
    mc.tp_bytes = passes * 2 * d.L * 2 * RingBytes(d.t * d.h * d.c, d.tp);
    mc.tp_s = mc.tp_bytes / (d.tp > hw.devices_per_node ? hw.inter_node_bytes_per_s
                                                        : hw.intra_node_bytes_per_s) +
              passes * 2 * d.L * lat;
  }
  return mc;
}

}  // namespace

StepTimeEstimate EstimateStepTime(const StepTimeInputs& in, const Hardware& hw) {
  const MemoryInputs& j = in.job;
  const Dims d = DimsOf(j);
  const MicroCompute mc = EstimateMicroCompute(in, hw, d);
  const MicroCollectives co = EstimateCollectives(in, hw, d);

  // Per micro-step: which collectives run, and how much of them the compute hides.
  const bool regathers = j.strategy == Strategy::kFullShard || j.strategy == Strategy::kHybridShard;
  const bool reduces_every_micro_step = regathers;
  auto micro = [&](bool synced, double* exposed, double* comm, double* gathered, double* reduced) {
    const double fwd_gather = (j.strategy == Strategy::kNoShard) ? 0 : co.gather_pass_s;
    const double bwd_gather = regathers ? co.gather_pass_s : 0;
    const double red = (reduces_every_micro_step || synced) ? co.reduce_s : 0;
    *gathered +=
        (fwd_gather > 0 ? co.gather_pass_bytes : 0) + (bwd_gather > 0 ? co.gather_pass_bytes : 0);
    *reduced += (reduces_every_micro_step || synced) ? co.reduce_bytes : 0;
    *comm += fwd_gather + bwd_gather + red;
    double e = fwd_gather > 0 ? std::max(co.first_unit_gather_s, fwd_gather - mc.fwd_s) : 0;
    const bool serial =
        in.recompute != RecomputeMode::kNone && regathers && !in.prefetch_under_checkpointing;
    if (serial) {
      e += bwd_gather + red;
    } else {
      e += std::max(red / co.units, bwd_gather + red - mc.bwd_s);
    }
    *exposed += e;
  };
  StepTimeEstimate out;
  double exposed = 0, comm = 0, gathered = 0, reduced = 0;
  for (int64_t i = 0; i < std::max<int64_t>(1, j.grad_accum); ++i) {
    micro(i + 1 == std::max<int64_t>(1, j.grad_accum), &exposed, &comm, &gathered, &reduced);
  }
  exposed += d.micro_steps * co.tp_s;
  comm += d.micro_steps * co.tp_s;
  reduced += d.micro_steps * co.tp_bytes;

  const double n = static_cast<double>(co.shard_group);
  const double shard_params = (co.trained + n - 1) / n;
  out.gemm_flops = d.micro_steps * (mc.fwd + mc.bwd + mc.recompute);
  out.model_flops = d.micro_steps * d.t * ModelFlopsPerToken(j.model, j.seq_len) / d.T;
  out.elementwise_bytes = d.micro_steps * mc.elementwise;
  out.compute_s = d.micro_steps * (mc.fwd_s + mc.bwd_s);
  out.gathered_bytes = gathered;
  out.reduced_bytes = reduced;
  out.communication_s = comm;
  out.exposed_communication_s = exposed;
  out.optimizer_s = shard_params * hw.optimizer_bytes_per_parameter / hw.memory_bytes_per_s;
  out.step_s = out.compute_s + out.exposed_communication_s + out.optimizer_s;
  out.tokens_per_s = d.micro_steps * d.t * static_cast<double>(d.data_parallel) / out.step_s;
  out.mfu = out.model_flops / (out.step_s * hw.peak_flops);
  return out;
}

}  // namespace llamafleet::sched
