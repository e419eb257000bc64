// adapter_config.json of a PEFT LoRA adapter (ParseAdapterConfig). Properties: what is
// accepted passes ValidateLora, and written back (AdapterConfigJson) reads the same.
#include "adapter_config.h"
#include "fuzz_check.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<LoraOptions> lora = ParseAdapterConfig(llamafleet::fuzz::AbslText(data, size), "adapter_config.json");
  if (!lora.ok()) {
    FUZZ_CHECK(lora.status().code() == absl::StatusCode::kInvalidArgument, "%s", lora.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(ValidateLora(*lora).ok(), "accepted an invalid adapter");
  const std::string json = AdapterConfigJson(*lora);
  absl::StatusOr<LoraOptions> again = ParseAdapterConfig(json, "written back");
  FUZZ_CHECK(again.ok(), "written back: %s\n%s", again.status().ToString().c_str(), json.c_str());
  for (int m = 0; m < kLoraModules; ++m) FUZZ_CHECK(again->targets(m) == lora->targets(m), "targets");
  FUZZ_CHECK(again->r == lora->r && again->alpha == lora->alpha && again->dropout == lora->dropout &&
                 again->base_model_name == lora->base_model_name,
             "written back reads as another adapter:\n%s", json.c_str());
  return 0;
}
