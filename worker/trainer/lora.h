// LoRA (low-rank adapters) in Hugging Face PEFT's convention.
//
// For each targeted projection W [out, in] of a decoder layer:
//
//   y = x W^T + dropout(x) A^T B^T * (alpha / r)      A [r, in], B [out, r]
//
// A starts Kaiming-uniform (PEFT: kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in),
// 1/sqrt(in))) from a generator seeded by (seed, tensor name), B starts at zero, so step 0
// computes exactly the base model. The base is frozen: every base tensor is marked frozen
// in the layout (engines then keep it in the compute dtype with no gradient, no master and
// no optimizer state; q/k/v biases too), and the adapters are appended to their layer's
// unit after its base tensors (LayerBaseTensors), in module order (q, k, v, o, gate, up, down), A
// before B, named as the base tensor with ".weight" replaced by ".lora_A.weight" /
// ".lora_B.weight".
//
// On disk an adapter is a PEFT directory: adapter_config.json and adapter_model.safetensors
// whose tensor names carry PEFT's "base_model.model." prefix.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "adapter_config.h"
#include "config.h"
#include "engine.h"
#include "hf_io.h"
#include "lora_options.h"
#include "model.h"

namespace llamafleet::trainer {

// Marks every tensor of `layout` frozen and appends the adapters (see the file comment).
void ApplyLora(const LlamaConfig& config, const LoraOptions& lora, std::vector<UnitLayout>& layout);

// Index in a layer unit's tensors of module `module`'s A (B follows it); -1 if untargeted.
// `base_tensors`: the unit's base tensors (LayerBaseTensors).
int LoraIndex(const LoraOptions& lora, int module, int base_tensors);

// QLoRA: whether a base tensor is one Nf4BaseSource quantizes, i.e. the weight of a
// targeted projection ("model.layers.N.self_attn.q_proj.weight"; not its bias).
std::function<bool(const std::string& name)> QloraQuantizes(const LoraOptions& lora);

// Tensors of the adapter, all layers, in layout order: (layout unit, tensor index).
std::vector<std::pair<int, int>> AdapterTensors(const std::vector<UnitLayout>& layout);
int64_t AdapterParameters(const std::vector<UnitLayout>& layout);

// PEFT's name of an adapter tensor: "base_model.model." + layout name.
std::string PeftTensorName(const std::string& layout_name);

// Fills a ShardSource-shaped request for the adapter tensors of `layout` from
// `dir`/adapter_model.safetensors: `out` [end - begin] gets elements [begin, end) of unit
// `unit`'s trainable tensors flattened in layout order. Every adapter tensor must be
// present with its layout shape (errors name the file and the tensor). The returned
// function keeps the file mapped.
absl::StatusOr<std::function<absl::Status(int unit, int64_t begin, int64_t end, at::Tensor out)>>
AdapterSource(const std::string& dir, const std::vector<UnitLayout>& layout);

// Unit `unit`'s base tensors with the adapter folded in, W + (alpha / r) B A, in the base
// layout's order (fp32). `tensors` are the unit's tensors in the LoRA layout's order.
std::vector<at::Tensor> MergeUnit(const LoraOptions& lora, const UnitLayout& unit,
                                  const std::vector<at::Tensor>& tensors);

// While alive, `model` computes the base model alone: its adapters are skipped (the
// engine still hands them out; they take no part in the output). `lora` is what the
// model was set to, restored on destruction. DPO's reference model, with no second copy.
class AdapterDisabled {
 public:
  AdapterDisabled(LlamaModel& model, const LoraOptions& lora) : model_(model), lora_(lora) {
    model_.set_lora(LoraOptions{});
  }
  ~AdapterDisabled() { model_.set_lora(lora_); }
  AdapterDisabled(const AdapterDisabled&) = delete;
  AdapterDisabled& operator=(const AdapterDisabled&) = delete;

 private:
  LlamaModel& model_;
  const LoraOptions lora_;
};

// Writes the PEFT adapter directory `out_dir` (adapter_config.json,
// adapter_model.safetensors in options.dtype, the tokenizer if given) and, with `merge`,
// the merged model in HF format to `out_dir`/merged. Collective: every rank calls it
// (units are gathered in order, the base only for the merge); only rank 0 writes.
absl::Status ExportLora(ParamEngine& engine, const LlamaConfig& config, const std::vector<UnitLayout>& layout,
                        const LoraOptions& lora, bool merge, const std::string& out_dir,
                        const ExportOptions& options);

}  // namespace llamafleet::trainer
