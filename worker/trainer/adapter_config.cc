#include "adapter_config.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model_file.h"
#include "nlohmann/json.hpp"
#include "util.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string AdapterConfigJson(const LoraOptions& lora) {
  // PEFT writes target_modules as a list; its order carries no meaning.
  json targets = json::array();
  for (int m = 0; m < kLoraModules; ++m) {
    if (lora.targets(m)) targets.push_back(kLoraModuleNames[m]);
  }
  json j = {{"peft_type", "LORA"},
            {"task_type", "CAUSAL_LM"},
            {"r", lora.r},
            {"lora_alpha", lora.alpha},
            {"lora_dropout", lora.dropout},
            {"target_modules", targets},
            {"bias", "none"},
            {"fan_in_fan_out", false},
            {"inference_mode", true},
            {"modules_to_save", nullptr},
            {"base_model_name_or_path", lora.base_model_name}};
  return j.dump(2) + "\n";
}

absl::StatusOr<LoraOptions> ParseAdapterConfig(absl::string_view text, absl::string_view source) {
  absl::StatusOr<json> parsed = ParseBoundedJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  }
  const json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  auto bad = [&](absl::string_view key, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", key, " ", why));
  };
  // Every lookup checks the type first: json::value() and get() throw on a mismatch.
  auto find = [&](const char* key) -> const json* {
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  const json* peft_type = find("peft_type");
  if (peft_type == nullptr || *peft_type != "LORA") return bad("peft_type", "must be \"LORA\"");
  if (const json* bias = find("bias"); bias != nullptr && *bias != "none") {
    return bad("bias", "must be \"none\" (bias adapters are not supported)");
  }
  if (const json* m = find("modules_to_save"); m != nullptr && !m->is_null()) {
    return bad("modules_to_save", "is not supported (only LoRA matrices are trained)");
  }
  if (const json* f = find("fan_in_fan_out"); f != nullptr && !f->is_null() && *f != false) {
    return bad("fan_in_fan_out", "must be false (Llama's Linear layers)");
  }
  if (const json* d = find("use_dora"); d != nullptr && !d->is_null() && *d != false) {
    return bad("use_dora", "is not supported");
  }
  LoraOptions o;
  o.enabled = true;
  const json* r = find("r");
  if (r == nullptr || !r->is_number_integer()) return bad("r", "must be an integer");
  // An unsigned value above INT64_MAX would wrap to a negative rank; read it as the largest.
  o.r = r->is_number_unsigned() && r->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX
                                                                                         : r->get<int64_t>();
  const json* alpha = find("lora_alpha");
  if (alpha == nullptr || !alpha->is_number()) return bad("lora_alpha", "must be a number");
  o.alpha = alpha->get<double>();
  if (const json* d = find("lora_dropout"); d != nullptr && !d->is_null()) {
    if (!d->is_number()) return bad("lora_dropout", "must be a number");
    o.dropout = d->get<double>();
  }
  const json* t = find("target_modules");
  if (t == nullptr || !t->is_array()) return bad("target_modules", "must be a list of module names");
  o.target_modules.clear();
  for (const json& m : *t) {
    if (!m.is_string()) return bad("target_modules", "must be a list of module names");
    o.target_modules.push_back(m.get<std::string>());
  }
  if (const json* base = find("base_model_name_or_path"); base != nullptr && !base->is_null()) {
    if (!base->is_string()) return bad("base_model_name_or_path", "must be a string");
    o.base_model_name = base->get<std::string>();
  }
  absl::Status s = ValidateLora(o);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  return o;
}

absl::StatusOr<LoraOptions> ReadAdapterConfig(const std::string& dir) {
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  LF_ASSIGN_OR_RETURN(std::string text, ReadModelFile(path, kMaxConfigFileBytes));
  LF_ASSIGN_OR_RETURN(LoraOptions o, ParseAdapterConfig(text, path));
  o.adapter_path = dir;
  return o;
}

}  // namespace llamafleet::trainer
