// What a LoRA run adapts (lora.h has the math and the files): plain options, no Torch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace llamafleet::trainer {

// The seven projections LoRA may target, in layout order.
inline constexpr int kLoraModules = 7;
extern const std::array<const char*, kLoraModules> kLoraModuleNames;  // "q_proj", ...

struct LoraOptions {
  bool enabled = false;      // false: full finetuning
  int64_t r = 0;             // adapter rank
  double alpha = 16;         // scale alpha / r
  double dropout = 0;        // on the adapter's input, training only; 0 <= dropout < 1
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};  // any subset of the seven
  std::string adapter_path;  // continue from this PEFT adapter directory ("" = fresh)
  std::string base_model_name;  // base_model_name_or_path written into adapter_config.json
  // QLoRA (peft.method qlora): the base weight of every targeted projection is NF4-quantized
  // once at load (nf4.h, per whole tensor) and trained on as its dequantized values.
  bool nf4_base = false;

  double scale() const { return alpha / static_cast<double>(r); }
  bool targets(int module) const;  // module: index into kLoraModuleNames
};

// The bounds the job spec puts on peft.r and peft.alpha (jobspec/validation.cc).
inline constexpr int64_t kMaxLoraRank = 4096;
inline constexpr double kMaxLoraAlpha = 1e6;

// Checks 1 <= r <= kMaxLoraRank, 0 < alpha < kMaxLoraAlpha, 0 <= dropout < 1, known and
// distinct module names; the error names the peft.* field.
absl::Status ValidateLora(const LoraOptions& lora);

}  // namespace llamafleet::trainer
