#include "lora.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "safetensors.h"
#include "util.h"

namespace llamafleet::trainer {

namespace fs = std::filesystem;

namespace {
// Position of each module's weight among a decoder layer's base tensors (model.h).
constexpr std::array<int, kLoraModules> kBaseIndex = {1, 2, 3, 4, 6, 7, 8};

std::string Replace(const std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.rfind(from);
  return at == std::string::npos ? s : s.substr(0, at) + to + s.substr(at + from.size());
}
}  // namespace

void ApplyLora(const LlamaConfig& config, const LoraOptions& lora, std::vector<UnitLayout>& layout) {
  for (UnitLayout& u : layout) u.frozen.assign(u.param_names.size(), true);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    UnitLayout& u = layout[LayerUnit(static_cast<int>(l))];
    for (int m = 0; m < kLoraModules; ++m) {
      if (!lora.targets(m)) continue;
      const std::string& base = u.param_names[kBaseIndex[m]];
      const std::vector<int64_t> shape = u.shapes[kBaseIndex[m]];  // [out, in]
      // Tensor parallelism: A follows the base's input split, B its output split.
      const bool row_parallel = u.split_of(kBaseIndex[m]) == TpSplit::kColumns;
      u.split.resize(u.param_names.size(), TpSplit::kReplicated);
      u.param_names.push_back(Replace(base, ".weight", ".lora_A.weight"));
      u.shapes.push_back({lora.r, shape[1]});
      u.frozen.push_back(false);
      u.split.push_back(row_parallel ? TpSplit::kColumns : TpSplit::kReplicated);
      u.param_names.push_back(Replace(base, ".weight", ".lora_B.weight"));
      u.shapes.push_back({shape[0], lora.r});
      u.frozen.push_back(false);
      u.split.push_back(row_parallel ? TpSplit::kReplicated : TpSplit::kRows);
    }
  }
}

int LoraIndex(const LoraOptions& lora, int module, int base_tensors) {
  if (!lora.enabled || !lora.targets(module)) return -1;
  int index = base_tensors;
  for (int m = 0; m < module; ++m) index += lora.targets(m) ? 2 : 0;
  return index;
}

std::function<bool(const std::string& name)> QloraQuantizes(const LoraOptions& lora) {
  std::vector<std::string> suffixes;
  for (int m = 0; m < kLoraModules; ++m) {
    if (lora.targets(m)) suffixes.push_back(absl::StrCat(".", kLoraModuleNames[m], ".weight"));
  }
  return [suffixes](const std::string& name) {
    if (name.find(".lora_") != std::string::npos) return false;
    return std::any_of(suffixes.begin(), suffixes.end(),
                       [&](const std::string& s) { return absl::EndsWith(name, s); });
  };
}

std::vector<std::pair<int, int>> AdapterTensors(const std::vector<UnitLayout>& layout) {
  std::vector<std::pair<int, int>> out;
  for (size_t u = 0; u < layout.size(); ++u) {
    for (size_t i = 0; i < layout[u].param_names.size(); ++i) {
      if (!layout[u].frozen.empty() && !layout[u].is_frozen(i)) out.emplace_back(static_cast<int>(u), static_cast<int>(i));
    }
  }
  return out;
}

int64_t AdapterParameters(const std::vector<UnitLayout>& layout) {
  int64_t n = 0;
  for (const auto& [u, i] : AdapterTensors(layout)) n += layout[u].numel(i);
  return n;
}

std::string PeftTensorName(const std::string& layout_name) { return "base_model.model." + layout_name; }

absl::StatusOr<std::function<absl::Status(int, int64_t, int64_t, at::Tensor)>> AdapterSource(
    const std::string& dir, const std::vector<UnitLayout>& layout) {
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  LF_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> opened, SafetensorsFile::Open(path));
  std::shared_ptr<SafetensorsFile> file(std::move(opened));
  for (const auto& [u, i] : AdapterTensors(layout)) {
    const std::string name = PeftTensorName(layout[u].param_names[i]);
    const StTensorInfo* info = file->Find(name);
    if (info == nullptr) return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", name, "\" is missing"));
    if (info->shape != layout[u].shapes[i]) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", name, "\" has shape [",
                                                     absl::StrJoin(info->shape, ", "), "], the adapter needs [",
                                                     absl::StrJoin(layout[u].shapes[i], ", "), "]"));
    }
    if (info->dtype != StDtype::kF32 && info->dtype != StDtype::kF16 && info->dtype != StDtype::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", name, "\" is not F32, F16 or BF16"));
    }
  }
  return [file, layout, path](int unit, int64_t begin, int64_t end, at::Tensor out) -> absl::Status {
    const UnitLayout& u = layout[unit];
    int64_t offset = 0;
    for (size_t i = 0; i < u.param_names.size(); ++i) {
      if (u.is_frozen(i)) continue;
      const int64_t n = u.numel(i);
      const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
      if (lo < hi) {
        const StTensorInfo* info = file->Find(PeftTensorName(u.param_names[i]));
        at::Tensor all = at::from_blob(const_cast<uint8_t*>(file->Data(*info)), {n}, ToTorchDtype(info->dtype));
        out.narrow(0, lo - begin, hi - lo).copy_(all.narrow(0, lo - offset, hi - lo));
      }
      offset += n;
    }
    return absl::OkStatus();
  };
}

std::vector<at::Tensor> MergeUnit(const LoraOptions& lora, const UnitLayout& unit,
                                  const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  const size_t base = unit.frozen.empty() ? tensors.size()
                                          : static_cast<size_t>(std::count(unit.frozen.begin(), unit.frozen.end(), true));
  for (size_t i = 0; i < base; ++i) out.push_back(tensors[i].to(at::kFloat));
  // A layer unit: its base tensors, then the adapters.
  if (base >= kQkvBiasIndex && tensors.size() > base) {
    for (int m = 0; m < kLoraModules; ++m) {
      const int a = LoraIndex(lora, m, static_cast<int>(base));
      if (a < 0) continue;
      at::Tensor A = tensors[a].to(at::kFloat), B = tensors[a + 1].to(at::kFloat);
      out[kBaseIndex[m]] = out[kBaseIndex[m]] + at::matmul(B, A) * lora.scale();
    }
  }
  return out;
}

absl::Status ExportLora(ParamEngine& engine, const LlamaConfig& config, const std::vector<UnitLayout>& layout,
                        const LoraOptions& lora, bool merge, const std::string& out_dir,
                        const ExportOptions& options) {
  const bool writer = engine.rank() == 0;
  // The adapter: one unit per layout unit that has adapter tensors, under PEFT's names.
  std::vector<UnitLayout> peft;
  std::vector<int> source_unit;
  for (const auto& [u, i] : AdapterTensors(layout)) {
    if (source_unit.empty() || source_unit.back() != u) {
      peft.push_back(UnitLayout{layout[u].name, {}, {}, {}, {}});
      source_unit.push_back(u);
    }
    peft.back().param_names.push_back(PeftTensorName(layout[u].param_names[i]));
    peft.back().shapes.push_back(layout[u].shapes[i]);
  }
  auto adapter_of = [&](int p) -> absl::StatusOr<std::vector<at::Tensor>> {
    const int u = source_unit[p];
    std::vector<at::Tensor> all = engine.FullUnit(u, /*with_frozen=*/false), out;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!layout[u].is_frozen(i)) out.push_back(all[i]);
    }
    return out;
  };
  ExportOptions ao = options;
  ao.weights_name = "adapter_model";
  ao.write_config = false;
  ao.max_shard_bytes = ~0ull;  // PEFT loads a single adapter_model.safetensors
  ao.extra_files["adapter_config.json"] = AdapterConfigJson(lora);
  ao.before_commit = nullptr;  // only the merged model is a whole model (a GGUF goes there)
  if (writer) {
    LF_RETURN_IF_ERROR(ExportHfDir(config, peft, adapter_of, out_dir, ao));
  } else {
    for (size_t p = 0; p < peft.size(); ++p) (void)adapter_of(static_cast<int>(p));
  }
  if (!merge) return absl::OkStatus();
  const std::vector<UnitLayout> base = MakeLayout(config);
  auto merged_of = [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> {
    return MergeUnit(lora, layout[u], engine.FullUnit(u));
  };
  if (writer) return ExportHfDir(config, base, merged_of, (fs::path(out_dir) / "merged").string(), options);
  for (size_t u = 0; u < layout.size(); ++u) (void)engine.FullUnit(static_cast<int>(u));
  return absl::OkStatus();
}

}  // namespace llamafleet::trainer
