#include "lora_options.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llamafleet::trainer {

const std::array<const char*, kLoraModules> kLoraModuleNames = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                                "gate_proj", "up_proj", "down_proj"};

namespace {
int ModuleIndex(const std::string& name) {
  for (int m = 0; m < kLoraModules; ++m) {
    if (name == kLoraModuleNames[m]) return m;
  }
  return -1;
}
}  // namespace

bool LoraOptions::targets(int module) const {
  return std::find(target_modules.begin(), target_modules.end(), kLoraModuleNames[module]) != target_modules.end();
}

absl::Status ValidateLora(const LoraOptions& lora) {
  if (lora.r < 1 || lora.r > kMaxLoraRank) {
    return absl::InvalidArgumentError(absl::StrCat("peft.r must be in [1, ", kMaxLoraRank, "] (got ", lora.r, ")"));
  }
  if (!(lora.alpha > 0 && lora.alpha < kMaxLoraAlpha)) {
    return absl::InvalidArgumentError(
        absl::StrCat("peft.alpha must be > 0 and below ", kMaxLoraAlpha, " (got ", lora.alpha, ")"));
  }
  if (!(lora.dropout >= 0 && lora.dropout < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("peft.dropout must be in [0, 1) (got ", lora.dropout, ")"));
  }
  if (lora.target_modules.empty()) return absl::InvalidArgumentError("peft.target_modules must name at least one module");
  std::set<std::string> seen;
  for (const std::string& m : lora.target_modules) {
    if (ModuleIndex(m) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("peft.target_modules: unknown module \"", m, "\" (",
                                                     absl::StrJoin(kLoraModuleNames, ", "), ")"));
    }
    if (!seen.insert(m).second) {
      return absl::InvalidArgumentError(absl::StrCat("peft.target_modules: \"", m, "\" is listed twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::trainer
