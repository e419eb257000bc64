#ifndef LLAMAFLEET_JOBSPEC_STEP_TIME_ESTIMATE_H_
#define LLAMAFLEET_JOBSPEC_STEP_TIME_ESTIMATE_H_

// Step-time estimate: seconds per optimizer step of a job, from its shape and the
// hardware it runs on. A pure function on plain structs (no proto, no Torch), beside the
// memory estimate (memory_estimate.h), whose MemoryInputs it reads. docs/estimates.md
// writes the model down; in short, per rank and micro-step (t = micro_batch x seq_len
// tokens, h = hidden, f = ffn, q = query width H x head_dim, kv = kv width, s = seq_len,
// T = tensor_parallel):
//
//   GEMM FLOPs   forward 2 t x (layer matmul parameters / T) per layer + 4 t s q / T
//                (attention scores and values, all s x s) + 2 t h V / T (head);
//                backward 2x forward (input and weight gradients); LoRA: the frozen base
//                only 1x (input gradients), the adapters 3x their own forward;
//                + recompute: RecomputeFraction(mode) x the layers' forward.
//   elementwise  bytes moved by the non-GEMM ops (norms, RoPE, SwiGLU, residuals,
//                softmax of the explicit attention path), forward and backward, at the
//                device's memory bandwidth.
//   compute      GEMM FLOPs / (peak x sustained_fraction) (attention's at its own fraction
//                when given) + elementwise bytes / bandwidth.
//   collectives  per micro-step, in the dtype the engine moves: FULL_SHARD and
//                HYBRID_SHARD gather every unit twice (forward, backward) and reduce-scatter
//                the gradients; SHARD_GRAD_OP gathers once and reduce-scatters on the synced
//                micro-step only; NO_SHARD all-reduces on the synced micro-step only;
//                HYBRID_SHARD adds the all-reduce of the gradient shards across groups.
//                Ring costs: all-gather / reduce-scatter S (N-1)/N, all-reduce 2 S (N-1)/N
//                bytes per rank at the bus bandwidth of the group's link (inside a node:
//                intra_node; spanning nodes: inter_node), + latency per collective.
//                LoRA gathers the frozen base too, reduces only the adapters. Tensor
//                parallelism adds 2 all-reduces of t x h per layer forward, 2 in backward
//                (and again for a full recompute), always exposed.
//   overlap      the engine's (sharded_engine.h): forward gathers are prefetched, so only
//                the first unit's gather and what exceeds the forward compute is exposed;
//                backward without activation checkpointing prefetches the next unit and
//                reduces asynchronously (exposed: what exceeds the backward compute, and
//                the last reduction); with activation checkpointing and FULL_SHARD /
//                HYBRID_SHARD the engine gathers layer j-1 before layer j recomputes
//                (`prefetch_under_checkpointing`); without that prefetch a layer's
//                gather would start only with its recompute and every backward
//                collective would be exposed.
//   optimizer    AdamW over the rank's shard: optimizer_bytes_per_parameter at the
//                memory bandwidth.
//
// MFU counts model FLOPs (torchtitan's: 6 x parameters without the embedding + 12 L q s
// per token, no recompute; a tied output projection is counted once, as the head's GEMM)
// against the datasheet peak.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jobspec/memory_estimate.h"

namespace llamafleet::sched {

// What activation checkpointing recomputes in backward.
enum class RecomputeMode {
  kNone,       // nothing checkpointed
  kSelective,  // the projections' outputs kept; attention and the elementwise ops recomputed
  kFull,       // every checkpointed layer's forward runs again
};

// The fraction of a layer's forward GEMM FLOPs recomputed in backward: 0, 0, 1. (Selective
// recompute is elementwise work, counted in bytes; see ElementwiseRecomputeFraction.)
double RecomputeFraction(RecomputeMode mode);
// The fraction of a layer's forward elementwise bytes moved again in backward: 0, 1, 1.
double ElementwiseRecomputeFraction(RecomputeMode mode);
// The recompute of fsdp.activation_checkpointing's mode (MemoryInputs::activation_checkpointing).
RecomputeMode RecomputeModeOf(Checkpointing activation_checkpointing);

// The device and its links as the estimate sees them.
struct Hardware {
  std::string gpu;                  // "H100 80GB", or "CPU"
  double peak_flops = 0;            // per device, dense, in the compute dtype (MFU's peak)
  double sustained_fraction = 0.5;  // of peak_flops that the step's GEMMs sustain
  // Of peak_flops that attention's batched score and value products sustain; 0: as the
  // GEMMs (a CPU runs them through another library than its linear layers).
  double attention_sustained_fraction = 0;
  double memory_bytes_per_s = 0;      // device memory bandwidth (elementwise ops, optimizer)
  double intra_node_bytes_per_s = 0;  // collective bus bandwidth among one node's devices
  double inter_node_bytes_per_s = 0;  // per device, collectives spanning nodes
  double collective_latency_s = 0;    // fixed cost of one collective
  int devices_per_node = 1;
  double optimizer_bytes_per_parameter = 88;  // unfused AdamW's memory traffic
};

// The hardware of a known GPU instance type (memory_estimate.h's KnownInstanceTypes):
// NOT_FOUND naming the type when it is not known, as the memory estimate leaves such a
// type to the scheduler.
absl::StatusOr<Hardware> HardwareOf(const std::string& instance_type);

struct StepTimeInputs {
  MemoryInputs job;  // shape, strategy, world, tensor parallelism, LoRA, batch, seq_len
  RecomputeMode recompute = RecomputeMode::kFull;
  // Whether backward gathers the next checkpointed layer before its recompute (FSDP2's
  // prefetch, ParamEngine::Prefetch); the engine does.
  bool prefetch_under_checkpointing = true;
};

// StepTimeInputs for `job`, its recompute mode taken from its activation_checkpointing.
StepTimeInputs StepTimeInputsOf(const MemoryInputs& job);

// Figures per rank and optimizer step unless said otherwise. Times in seconds.
struct StepTimeEstimate {
  double gemm_flops = 0;               // executed, recompute included
  double model_flops = 0;              // MFU's count (no recompute), per rank
  double elementwise_bytes = 0;        // moved by non-GEMM ops
  double compute_s = 0;                // GEMMs + elementwise
  double gathered_bytes = 0;           // received by all-gathers
  double reduced_bytes = 0;            // sent by reduce-scatters and all-reduces (TP's included)
  double communication_s = 0;          // all collectives, were none overlapped
  double exposed_communication_s = 0;  // the part the step waits for
  double optimizer_s = 0;
  double step_s = 0;
  double tokens_per_s = 0;  // the whole job
  double mfu = 0;           // model FLOPs / (step_s x peak_flops), 0..1
};

// The estimate; `hw` must have positive peak and bandwidths (an invariant of HardwareOf
// and of the CPU calibration, which measure them).
StepTimeEstimate EstimateStepTime(const StepTimeInputs& in, const Hardware& hw);

// Model FLOPs per token of the whole model (torchtitan's formula, above).
double ModelFlopsPerToken(const ModelShape& m, int64_t seq_len);

}  // namespace llamafleet::sched

#endif  // LLAMAFLEET_JOBSPEC_STEP_TIME_ESTIMATE_H_
