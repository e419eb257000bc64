#include "config.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "jobspec/model_presets.h"
#include "model_file.h"
#include "nlohmann/json.hpp"
#include "util.h"

namespace llamafleet::trainer {

using nlohmann::json;

int64_t LlamaConfig::NumNonEmbeddingParameters() const {
  const int64_t h = hidden_size, kv_dim = num_key_value_heads * head_dim();
  const int64_t per_layer = 2 * h                      // two RMSNorm weights
                            + h * h + 2 * kv_dim * h    // q, k, v
                            + h * h                     // o
                            + 3 * intermediate_size * h;  // gate, up, down
  return num_hidden_layers * per_layer + h  // final norm
         + (tie_word_embeddings ? 0 : vocab_size * h);
}

int64_t LlamaConfig::NumParameters() const {
  return NumNonEmbeddingParameters() + vocab_size * hidden_size;
}

absl::Status ValidateConfig(const LlamaConfig& c) {
  // Every dimension is bounded before anything is sized from it: the products the model,
  // the memory estimate and NumParameters form stay far inside int64.
  for (auto [name, v, max] : {std::tuple<const char*, int64_t, int64_t>{"hidden_size", c.hidden_size, kMaxHiddenSize},
                              {"intermediate_size", c.intermediate_size, kMaxIntermediateSize},
                              {"num_hidden_layers", c.num_hidden_layers, kMaxHiddenLayers},
                              {"num_attention_heads", c.num_attention_heads, kMaxAttentionHeads},
                              {"num_key_value_heads", c.num_key_value_heads, kMaxAttentionHeads},
                              {"vocab_size", c.vocab_size, kMaxVocabSize},
                              {"max_position_embeddings", c.max_position_embeddings, kMaxPositionEmbeddings}}) {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(name, " must be > 0, got ", v));
    if (v > max) return absl::InvalidArgumentError(absl::StrCat(name, " must be at most ", max, ", got ", v));
  }
  for (auto [name, v] : {std::pair<const char*, int64_t>{"bos_token_id", c.bos_token_id},
                         {"eos_token_id", c.eos_token_id}}) {
    if (v < 0 || v >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be in [0, vocab_size ", c.vocab_size, "), got ", v));
    }
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden_size ", c.hidden_size, " is not divisible by num_attention_heads ",
                     c.num_attention_heads));
  }
  if (c.head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", c.head_dim(), " must be even for RoPE"));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads ", c.num_attention_heads,
                     " is not divisible by num_key_value_heads ", c.num_key_value_heads));
  }
  if (!(c.rms_norm_eps > 0) || c.rms_norm_eps > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm_eps must be in (0, 1], got ", c.rms_norm_eps));
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat("rope_theta must be finite and > 0, got ", c.rope_theta));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<int64_t> GetInt(const json& j, const char* key, absl::string_view src,
                               const int64_t* fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(src, ": missing required field \"", key, "\""));
  }
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": field \"", key, "\" must be an integer (64-bit)"));
  }
  return it->get<int64_t>();
}

absl::StatusOr<double> GetDouble(const json& j, const char* key, absl::string_view src,
                                 const double* fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(src, ": missing required field \"", key, "\""));
  }
  if (!it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": field \"", key, "\" must be a number"));
  }
  return it->get<double>();
}

}  // namespace

absl::StatusOr<LlamaConfig> ParseConfigJson(absl::string_view text, absl::string_view src) {
  absl::StatusOr<json> parsed = ParseBoundedJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": ", parsed.status().message()));
  }
  const json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(src, ": not a JSON object"));
  if (auto it = j.find("model_type"); it != j.end() && *it != "llama") {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": model_type ", it->dump(), " is not supported (only \"llama\")"));
  }
  if (auto it = j.find("hidden_act"); it != j.end() && *it != "silu") {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": hidden_act ", it->dump(), " is not supported (only \"silu\")"));
  }
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": rope_scaling is not supported"));
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (auto it = j.find(bias); it != j.end() && *it != false) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": ", bias, " is not supported"));
    }
  }
  LlamaConfig c;
  LF_ASSIGN_OR_RETURN(c.hidden_size, GetInt(j, "hidden_size", src, nullptr));
  LF_ASSIGN_OR_RETURN(c.intermediate_size, GetInt(j, "intermediate_size", src, nullptr));
  LF_ASSIGN_OR_RETURN(c.num_hidden_layers, GetInt(j, "num_hidden_layers", src, nullptr));
  LF_ASSIGN_OR_RETURN(c.num_attention_heads, GetInt(j, "num_attention_heads", src, nullptr));
  LF_ASSIGN_OR_RETURN(c.num_key_value_heads,
                      GetInt(j, "num_key_value_heads", src, &c.num_attention_heads));
  LF_ASSIGN_OR_RETURN(c.vocab_size, GetInt(j, "vocab_size", src, nullptr));
  LF_ASSIGN_OR_RETURN(c.max_position_embeddings,
                      GetInt(j, "max_position_embeddings", src, nullptr));
  LF_ASSIGN_OR_RETURN(c.rms_norm_eps, GetDouble(j, "rms_norm_eps", src, nullptr));
  const double theta = 10000.0;
  LF_ASSIGN_OR_RETURN(c.rope_theta, GetDouble(j, "rope_theta", src, &theta));
  const int64_t bos = 1, eos = 2;
  LF_ASSIGN_OR_RETURN(c.bos_token_id, GetInt(j, "bos_token_id", src, &bos));
  LF_ASSIGN_OR_RETURN(c.eos_token_id, GetInt(j, "eos_token_id", src, &eos));
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(src, ": field \"tie_word_embeddings\" must be a boolean"));
    }
    c.tie_word_embeddings = it->get<bool>();
  }
  if (auto it = j.find("torch_dtype"); it != j.end() && it->is_string()) {
    c.torch_dtype = it->get<std::string>();
  }
  if (absl::Status s = ValidateConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": ", s.message()));
  }
  return c;
}

absl::StatusOr<LlamaConfig> LoadConfigFile(const std::string& path) {
  LF_ASSIGN_OR_RETURN(std::string text, ReadModelFile(path, kMaxConfigFileBytes));
  return ParseConfigJson(text, path);
}

std::string ConfigToJson(const LlamaConfig& c, absl::string_view torch_dtype) {
  json j = json::object();
  j["architectures"] = json::array({"LlamaForCausalLM"});
  j["model_type"] = "llama";
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["initializer_range"] = 0.02;
  j["pretraining_tp"] = 1;
  j["use_cache"] = true;
  j["torch_dtype"] = std::string(torch_dtype);
  return j.dump(2) + "\n";
}

absl::StatusOr<LlamaConfig> PresetConfig(absl::string_view name) {
  const sched::ModelPreset* p = sched::FindModelPreset(std::string(name));
  if (p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown model preset \"", name,
                                                   "\" (known: ", sched::KnownPresetNames(), ")"));
  }
  LlamaConfig c;
  c.hidden_size = p->hidden;
  c.intermediate_size = p->intermediate;
  c.num_hidden_layers = p->layers;
  c.num_attention_heads = p->heads;
  c.num_key_value_heads = p->kv_heads;
  c.rms_norm_eps = p->rms_norm_eps;
  c.rope_theta = p->rope_theta;
  c.vocab_size = p->vocab;
  c.max_position_embeddings = p->max_positions;
  c.tie_word_embeddings = p->tied_embeddings;
  c.bos_token_id = p->bos_token_id;
  c.eos_token_id = p->eos_token_id;
  c.torch_dtype = p->torch_dtype;
  // TODO(families): set from the same preset the fields the model families add to
  // LlamaConfig: the model type (p->model_type: llama, mistral, qwen2), head_dim
  // (p->head_dim), the q/k/v biases (p->qkv_bias: Qwen2.5) and llama3 RoPE scaling
  // (p->rope_llama3_factor: 8 for Llama 3.1, 32 for 3.2; low_freq_factor 1,
  // high_freq_factor 4, original_max_position_embeddings 8192). Until then a Llama 3.x or
  // Qwen2.5 preset builds the shape without them.
  return c;
}

bool PresetTakesTokenizerVocab(absl::string_view name) {
  const sched::ModelPreset* p = sched::FindModelPreset(std::string(name));
  return p != nullptr && p->takes_tokenizer_vocab;
}

}  // namespace llamafleet::trainer
