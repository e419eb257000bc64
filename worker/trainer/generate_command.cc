#include "generate_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine.h"
#include "hf_io.h"
#include "lora.h"
#include "model.h"
#include "model_file.h"
#include "nlohmann/json.hpp"
#include "prompt_set.h"
#include "train_parts.h"
#include "util.h"

namespace llamafleet::trainer {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// eos_token_id of a config file: an id, a list of ids or absent.
absl::Status AddEosIds(const std::string& path, std::vector<int32_t>* out) {
  absl::StatusOr<std::string> text = ReadModelFile(path, 1 << 20);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();
  if (!text.ok()) return text.status();
  const json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return absl::OkStatus();
  const json& e = j["eos_token_id"];
  const json list = e.is_array() ? e : json::array({e});
  for (const json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": eos_token_id: expected an id or a list of ids"));
    }
    out->push_back(id.get<int32_t>());
  }
  return absl::OkStatus();
}

// The model's weights (fp32, CPU), with the adapter of `adapter_dir` folded in.
absl::StatusOr<std::vector<std::vector<at::Tensor>>> LoadWeights(
    const HfModelDir& hf, const std::vector<UnitLayout>& layout, const std::string& adapter_dir) {
  LF_ASSIGN_OR_RETURN(std::vector<std::vector<at::Tensor>> params, hf.ReadAll(layout));
  if (adapter_dir.empty()) return params;
  LF_ASSIGN_OR_RETURN(LoraOptions lora, ReadAdapterConfig(adapter_dir));
  lora.enabled = true;
  std::vector<UnitLayout> lora_layout = layout;
  ApplyLora(hf.config(), lora, lora_layout);
  LF_ASSIGN_OR_RETURN(auto source, AdapterSource(adapter_dir, lora_layout));
  for (size_t u = 0; u < lora_layout.size(); ++u) {
    const UnitLayout& unit = lora_layout[u];
    const int64_t n = unit.trainable_numel();
    if (n == 0) continue;
    at::Tensor flat = at::empty({n}, at::kFloat);
    LF_RETURN_IF_ERROR(source(static_cast<int>(u), 0, n, flat));
    std::vector<at::Tensor> tensors = params[u];
    int64_t at = 0;
    for (size_t i = 0; i < unit.shapes.size(); ++i) {
      if (unit.is_frozen(i)) continue;
      tensors.push_back(flat.narrow(0, at, unit.numel(i)).view(unit.shapes[i]));
      at += unit.numel(i);
    }
    params[u] = MergeUnit(lora, unit, tensors);
  }
  return params;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

absl::StatusOr<std::vector<int32_t>> ModelEosIds(const std::string& model_dir,
                                                 const std::vector<int32_t>& tokenizer_stop_ids) {
  std::vector<int32_t> ids = tokenizer_stop_ids;
  LF_RETURN_IF_ERROR(AddEosIds((fs::path(model_dir) / "config.json").string(), &ids));
  LF_RETURN_IF_ERROR(AddEosIds((fs::path(model_dir) / "generation_config.json").string(), &ids));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

absl::Status RunGenerate(const GenerateCommandOptions& opt) {
  if (opt.prompt.empty() == opt.prompts_file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --prompts");
  }
  if (opt.batch_size < 1 || opt.batch_size > kMaxGenerateBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch-size ", opt.batch_size, ": expected 1 to ", kMaxGenerateBatch));
  }
  LF_RETURN_IF_ERROR(ValidateGenerationOptions(opt.generation));
  return CatchTorch("generate", [&]() -> absl::Status {
    LF_ASSIGN_OR_RETURN(at::Device device, ResolveDevice(opt.device, 0));
    LF_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::Open(opt.model_dir));
    const LlamaConfig& config = hf->config();
    LF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                        Tokenizer::Load(opt.tokenizer.empty() ? opt.model_dir : opt.tokenizer));
    std::optional<ChatTemplate> chat;
    if (opt.chat) {
      const std::string dir = fs::path(tokenizer->path()).parent_path().string();
      LF_ASSIGN_OR_RETURN(chat, ResolveChatTemplate(opt.chat_template, dir.empty() ? "." : dir));
    }
    const PromptEncoding encoding{tokenizer.get(), chat ? &*chat : nullptr};
    std::vector<std::vector<int32_t>> prompts;
    if (!opt.prompt.empty()) {
      LF_ASSIGN_OR_RETURN(std::vector<int32_t> ids, EncodePromptText(opt.prompt, encoding));
      prompts.push_back(std::move(ids));
    } else {
      LF_ASSIGN_OR_RETURN(prompts, LoadPromptFile(opt.prompts_file, encoding));
    }
    GenerationOptions gen = opt.generation;
    LF_ASSIGN_OR_RETURN(gen.eos_ids, ModelEosIds(opt.model_dir, tokenizer->stop_ids()));

    std::vector<UnitLayout> layout = MakeLayout(config);
    for (UnitLayout& u : layout) u.frozen.assign(u.param_names.size(), true);  // no gradients
    LF_ASSIGN_OR_RETURN(auto params, LoadWeights(*hf, layout, opt.adapter_dir));
    LocalEngine engine(layout, std::move(params), device, at::kFloat, AdamWOptions{});
    LlamaModel model(config, device, at::kFloat);
    model.set_training(false);
    Generator generator(model, engine, tokenizer.get(), device, gen);

    const auto start = std::chrono::steady_clock::now();
    int64_t generated = 0, first = 0;
    while (first < static_cast<int64_t>(prompts.size())) {
      const int64_t n = std::min<int64_t>(opt.batch_size, prompts.size() - first);
      const std::vector<std::vector<int32_t>> batch(prompts.begin() + first,
                                                    prompts.begin() + first + n);
      auto on_token = [&](int64_t row, int32_t id, const std::string& piece) {
        EmitJsonLine(Dump(json{{"index", first + row}, {"token", id}, {"text", piece}}));
      };
      LF_ASSIGN_OR_RETURN(std::vector<GeneratedRow> rows,
                          generator.Generate(batch, on_token, first));
      for (int64_t r = 0; r < n; ++r) {
        generated += static_cast<int64_t>(rows[r].ids.size());
        EmitJsonLine(Dump(json{{"index", first + r},
                               {"text", rows[r].text},
                               {"tokens", rows[r].ids.size()},
                               {"stop_reason", rows[r].stop_reason}}));
      }
      first += n;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    LogInfo(absl::StrFormat("generate: %d prompts, %d tokens in %.3f s, %.1f tokens/s (%s, %s)",
                            prompts.size(), generated, seconds,
                            seconds > 0 ? generated / seconds : 0.0, device.str(),
                            gen.use_cache ? "kv cache" : "no cache"));
    return absl::OkStatus();
  });
}

}  // namespace llamafleet::trainer
