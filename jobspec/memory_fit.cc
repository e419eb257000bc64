// The memory estimate of a spec (jobspec/memory_estimate.h) and its fit on the named
// instance type.

#include "jobspec/memory_fit.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobspec/estimates.h"
#include "jobspec/jobspec.h"
#include "jobspec/memory_estimate.h"
#include "jobspec/model_presets.h"
#include "jobspec/parallelism.h"

namespace llamafleet {
namespace {

sched::Strategy ToStrategy(v1::ShardingStrategy s) {
  switch (s) {
    case v1::SHARD_GRAD_OP: return sched::Strategy::kShardGradOp;
    case v1::HYBRID_SHARD: return sched::Strategy::kHybridShard;
    case v1::NO_SHARD: return sched::Strategy::kNoShard;
    default: return sched::Strategy::kFullShard;
  }
}

}  // namespace

namespace jobspec_internal {

std::optional<sched::MemoryInputs> MemoryInputsOf(const v1::JobSpec& spec, int world_size,
                                                  int64_t tokenizer_vocab) {
  std::optional<sched::ModelShape> shape = sched::PresetShape(spec.model().preset());
  if (!shape) return std::nullopt;
  if (tokenizer_vocab > 0 && sched::FindModelPreset(spec.model().preset())->takes_tokenizer_vocab) {
    shape->vocab = tokenizer_vocab;
  }
  const v1::TrainingSpec& t = spec.training();
  const v1::FsdpSpec& f = spec.fsdp();
  const v1::ResourceSpec& r = spec.resources();
  sched::MemoryInputs in;
  in.model = *shape;
  in.strategy = ToStrategy(f.sharding());
  in.world_size = world_size > 0 ? world_size : std::max(1, r.nodes()) * std::max(1, r.gpus_per_node());
  in.shard_group_size = f.hybrid_shard_group_size();
  in.tensor_parallel = std::max(1, TensorParallelOf(spec));
  in.compute_bytes = f.mixed_precision() == v1::FP32 ? 4 : 2;
  in.reduce_bytes = f.reduce_precision() == v1::FP32 ? 4 : 2;
  switch (ActivationCheckpointingOf(f)) {
    case v1::AC_NONE:
      in.activation_checkpointing = sched::Checkpointing::kNone;
      break;
    case v1::AC_SELECTIVE:
      in.activation_checkpointing = sched::Checkpointing::kSelective;
      break;
    default:
      in.activation_checkpointing = sched::Checkpointing::kFull;
      break;
  }
  in.micro_batch = std::max(1, t.micro_batch_size());
  // The trainer caps seq_len at the preset's max_position_embeddings.
  in.seq_len = std::min<int64_t>(std::max(1, t.seq_len()),
                                 sched::FindModelPreset(spec.model().preset())->max_positions);
  in.grad_accum = std::max(1, t.grad_accum());
  in.document_mask = t.batching() != v1::PADDING;  // PACKING is the default
  in.max_inflight_all_gathers = std::max(1, f.max_inflight_all_gathers());
  in.async_checkpoints = !spec.checkpoint().has_async() || spec.checkpoint().async();
  const v1::PeftSpec& peft = spec.peft();
  if (peft.method() == "lora" || peft.method() == "qlora") {
    in.nf4_base = peft.method() == "qlora";
    // Without r or targets (an adapter_path supplies them), the defaults stand in.
    in.lora_r = peft.has_r() ? std::max(1, peft.r()) : 8;
    for (const std::string& m : peft.target_modules()) in.lora_modules |= sched::LoraModuleBit(m);
    if (in.lora_modules == 0) in.lora_modules = sched::LoraModuleBit("q_proj") | sched::LoraModuleBit("v_proj");
  }
  return in;
}

}  // namespace jobspec_internal

namespace {

v1::MemoryEstimate ToProto(const sched::MemoryEstimate& e, int world_size) {
  v1::MemoryEstimate out;
  out.set_total_bytes(e.total);
  out.set_parameters_bytes(e.parameters);
  out.set_gradients_bytes(e.gradients);
  out.set_optimizer_state_bytes(e.optimizer_state);
  out.set_gathered_params_bytes(e.gathered_params);
  out.set_activations_bytes(e.activations);
  out.set_communication_bytes(e.communication);
  out.set_workspace_bytes(e.workspace);
  out.set_checkpoint_staging_bytes(e.checkpoint_staging);
  out.set_peak_phase(e.peak_phase);
  out.set_world_size(world_size);
  out.set_parameters(e.model_parameters);
  out.set_trainable_parameters(e.trainable_parameters);
  return out;
}

}  // namespace

namespace jobspec_internal {

void CheckInstanceFit(const v1::JobSpec& spec, Violations& v) {
  const sched::InstanceType* type = sched::FindInstanceType(spec.resources().instance_type());
  if (type == nullptr) return;  // a site-specific type: the scheduler checks real workers
  const v1::ResourceSpec& res = spec.resources();
  if (res.gpus_per_node() > type->gpus) {
    v.Add("resources.gpus_per_node", absl::StrCat("(", res.gpus_per_node(), ") exceeds the ", type->gpus,
                                                  " GPUs of ", type->name));
    return;
  }
  std::optional<sched::MemoryInputs> in = MemoryInputsOf(spec, 0);
  if (!in) return;
  const sched::MemoryEstimate e = sched::EstimateMemory(*in);
  if (e.total <= type->gpu_memory_bytes) return;

  std::vector<std::string> fits;
  auto total_with = [&](const sched::MemoryInputs& alt) { return sched::EstimateMemory(alt).total; };
  if (in->strategy != sched::Strategy::kFullShard) {
    sched::MemoryInputs alt = *in;
    alt.strategy = sched::Strategy::kFullShard;
    const int64_t b = total_with(alt);
    if (b <= type->gpu_memory_bytes) fits.push_back(absl::StrCat("fsdp.sharding FULL_SHARD (", sched::FormatGiB(b), ")"));
  }
  // Less kept per layer: selective first (less recompute), then full.
  for (auto [mode, name] : {std::pair{sched::Checkpointing::kSelective, "selective"},
                            std::pair{sched::Checkpointing::kFull, "full"}}) {
    if (in->activation_checkpointing == sched::Checkpointing::kFull) break;
    if (mode == in->activation_checkpointing) continue;
    sched::MemoryInputs alt = *in;
    alt.activation_checkpointing = mode;
    const int64_t b = total_with(alt);
    if (b <= type->gpu_memory_bytes) {
      fits.push_back(absl::StrCat("fsdp.activation_checkpointing ", name, " (", sched::FormatGiB(b), ")"));
      break;
    }
  }
  {
    // More nodes, FULL_SHARD, activation checkpointing, every GPU of the instance.
    sched::MemoryInputs alt = *in;
    alt.strategy = sched::Strategy::kFullShard;
    alt.activation_checkpointing = sched::Checkpointing::kFull;
    for (int nodes = std::max(1, res.nodes()); nodes <= 4096; nodes *= 2) {
      alt.world_size = nodes * type->gpus;
      const int64_t b = total_with(alt);
      if (b <= type->gpu_memory_bytes) {
        fits.push_back(absl::StrCat(nodes, " nodes x ", type->gpus, " GPUs with FULL_SHARD and activation "
                                    "checkpointing (", sched::FormatGiB(b), ")"));
        break;
      }
    }
  }
  {
    // A higher tensor-parallel degree the spec allows: the smallest that fits.
    for (int t : TensorParallelChoices(spec)) {
      if (t <= in->tensor_parallel) continue;
      sched::MemoryInputs alt = *in;
      alt.tensor_parallel = t;
      const int64_t b = total_with(alt);
      if (b <= type->gpu_memory_bytes) {
        fits.push_back(absl::StrCat("parallelism.tensor_parallel ", t, " (", sched::FormatGiB(b), ")"));
        break;
      }
    }
  }
  if (in->lora_r == 0) {
    sched::MemoryInputs alt = *in;
    alt.lora_r = 8;
    alt.lora_modules = sched::LoraModuleBit("q_proj") | sched::LoraModuleBit("v_proj");
    const int64_t b = total_with(alt);
    if (b <= type->gpu_memory_bytes) fits.push_back(absl::StrCat("peft.method lora (", sched::FormatGiB(b), ")"));
  }
  if (!in->nf4_base && in->tensor_parallel <= 1) {
    // QLoRA's recipe: adapters on (and so an NF4 base under) all seven projections.
    sched::MemoryInputs alt = *in;
    if (alt.lora_r == 0) alt.lora_r = 8;
    alt.lora_modules = 0x7f;
    alt.nf4_base = true;
    const int64_t b = total_with(alt);
    if (b <= type->gpu_memory_bytes) {
      fits.push_back(absl::StrCat("peft.method qlora on all seven projections (", sched::FormatGiB(b), ")"));
    }
  }
  for (const sched::InstanceType& other : sched::KnownInstanceTypes()) {
    if (other.gpu_memory_bytes > type->gpu_memory_bytes && e.total <= other.gpu_memory_bytes &&
        res.gpus_per_node() <= other.gpus) {
      fits.push_back(absl::StrCat("instance type ", other.name, " (", other.gpu, ")"));
      break;
    }
  }
  v.Add("resources.instance_type",
        absl::StrCat(type->name, ": estimated ", sched::FormatGiB(e.total), " per GPU (parameters ",
                     sched::FormatGiB(e.parameters), ", gradients ", sched::FormatGiB(e.gradients),
                     ", optimizer state ", sched::FormatGiB(e.optimizer_state), ", gathered parameters ",
                     sched::FormatGiB(e.gathered_params), ", activations ", sched::FormatGiB(e.activations),
                     ", communication ", sched::FormatGiB(e.communication), ", workspace ",
                     sched::FormatGiB(e.workspace), ") does not fit its ", sched::FormatGiB(type->gpu_memory_bytes),
                     " ", type->gpu, " GPUs; ",
                     fits.empty() ? "nothing within 4096 nodes fits this model with this engine"
                                  : absl::StrCat("would fit: ", absl::StrJoin(fits, "; or "))));
}

}  // namespace jobspec_internal

std::optional<v1::MemoryEstimate> EstimateJobMemory(const v1::JobSpec& spec, int world_size) {
  std::optional<sched::MemoryInputs> in = jobspec_internal::MemoryInputsOf(spec, world_size);
  if (!in) return std::nullopt;
  return ToProto(sched::EstimateMemory(*in), in->world_size);
}

std::optional<v1::MemoryEstimate> EstimateJobMemoryWithVocab(const v1::JobSpec& spec,
                                                             int64_t tokenizer_vocab) {
  std::optional<sched::MemoryInputs> in =
      jobspec_internal::MemoryInputsOf(spec, 0, tokenizer_vocab);
  if (!in) return std::nullopt;
  return ToProto(sched::EstimateMemory(*in), in->world_size);
}

}  // namespace llamafleet
