// adapter_config.json of a PEFT LoRA adapter directory: written by ExportLora, read when
// a run continues from an adapter. No Torch: the fuzz harnesses compile it on its own.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lora_options.h"

namespace llamafleet::trainer {

// adapter_config.json: peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, lora_dropout,
// target_modules, bias none, base_model_name_or_path.
std::string AdapterConfigJson(const LoraOptions& lora);

// The text of an adapter_config.json as LoraOptions (adapter_path left empty). Refuses a
// non-LORA adapter, bias other than none, unknown target modules, modules_to_save,
// fan_in_fan_out, DoRA, and any key of the wrong JSON type; every bound of ValidateLora
// applies. INVALID_ARGUMENT "<source>: <key> <why>" otherwise; never throws.
absl::StatusOr<LoraOptions> ParseAdapterConfig(absl::string_view text, absl::string_view source);

// Reads `dir`/adapter_config.json (ParseAdapterConfig) with adapter_path = dir.
absl::StatusOr<LoraOptions> ReadAdapterConfig(const std::string& dir);

}  // namespace llamafleet::trainer
