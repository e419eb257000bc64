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

const char* ModelTypeName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama:
      return "llama";
    case ModelFamily::kMistral:
      return "mistral";
    case ModelFamily::kQwen2:
      return "qwen2";
  }
  return "?";
}

const char* ArchitectureName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama:
      return "LlamaForCausalLM";
    case ModelFamily::kMistral:
      return "MistralForCausalLM";
    case ModelFamily::kQwen2:
      return "Qwen2ForCausalLM";
  }
  return "?";
}

int64_t LlamaConfig::NumNonEmbeddingParameters() const {
  const int64_t h = hidden_size, q_dim = num_attention_heads * head_dim(),
                kv_dim = num_key_value_heads * head_dim();
  const int64_t per_layer = 2 * h                                  // two RMSNorm weights
                            + q_dim * h + 2 * kv_dim * h           // q, k, v
                            + (qkv_bias ? q_dim + 2 * kv_dim : 0)  // their biases
                            + h * q_dim                            // o
                            + 3 * intermediate_size * h;           // gate, up, down
  return num_hidden_layers * per_layer + h  // final norm
         + (tie_word_embeddings ? 0 : vocab_size * h);
}

int64_t LlamaConfig::NumParameters() const {
  return NumNonEmbeddingParameters() + vocab_size * hidden_size;
}

namespace {
// The llama3 scaling's fields; the error names the field as `object`.field.
absl::Status ValidateRopeScaling(const RopeScaling& r, const char* object) {
  if (r.type != RopeScaling::Type::kLlama3) return absl::OkStatus();
  auto bad = [object](const char* field, double v, const char* want) {
    return absl::InvalidArgumentError(
        absl::StrCat(object, ".", field, " must be ", want, ", got ", v));
  };
  if (!(r.factor >= 1) || r.factor > 1e6) return bad("factor", r.factor, "in [1, 1e6]");
  if (!(r.low_freq_factor > 0) || r.low_freq_factor > 1e6) {
    return bad("low_freq_factor", r.low_freq_factor, "in (0, 1e6]");
  }
  if (!(r.high_freq_factor > r.low_freq_factor) || r.high_freq_factor > 1e6) {
    return bad("high_freq_factor", r.high_freq_factor,
               "greater than low_freq_factor and at most 1e6");
  }
  if (r.original_max_position_embeddings <= 0 ||
      r.original_max_position_embeddings > kMaxPositionEmbeddings) {
    return bad("original_max_position_embeddings",
               static_cast<double>(r.original_max_position_embeddings), "in [1, 4194304]");
  }
  return absl::OkStatus();
}
}  // namespace

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
  if (c.explicit_head_dim < 0 || c.explicit_head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be in [1, ", kMaxHeadDim, "], got ", c.explicit_head_dim));
  }
  if (c.explicit_head_dim == 0 && c.hidden_size % c.num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden_size ", c.hidden_size, " is not divisible by num_attention_heads ",
                     c.num_attention_heads, " (and no head_dim is given)"));
  }
  if (c.head_dim() % 2 != 0 || c.head_dim() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim ", c.head_dim(), " must be even and > 0 for RoPE"));
  }
  if (c.num_attention_heads * c.head_dim() > kMaxHiddenSize * 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads * head_dim must be at most ", kMaxHiddenSize * 4,
                     ", got ", c.num_attention_heads * c.head_dim()));
  }
  if (c.sliding_window < 0 || c.sliding_window > kMaxSlidingWindow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sliding_window must be in [1, ", kMaxSlidingWindow, "] or null, got ", c.sliding_window));
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
  return ValidateRopeScaling(c.rope_scaling, "rope_scaling");
}

absl::Status CheckSequenceLength(const LlamaConfig& c, int64_t seq_len) {
  if (c.sliding_window > 0 && c.sliding_window < seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model's sliding_window ", c.sliding_window, " is shorter than the sequence length ",
        seq_len, ": sliding-window attention is not implemented (use seq_len <= ", c.sliding_window,
        ")"));
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

absl::Status Invalid(absl::string_view src, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(src, ": ", what));
}

absl::StatusOr<ModelFamily> ParseFamily(const json& j, absl::string_view src) {
  auto it = j.find("model_type");
  if (it == j.end()) return ModelFamily::kLlama;
  for (ModelFamily f : {ModelFamily::kLlama, ModelFamily::kMistral, ModelFamily::kQwen2}) {
    if (*it == ModelTypeName(f)) return f;
  }
  return Invalid(
      src, absl::StrCat("model_type ", it->dump(), " is not supported (llama, mistral or qwen2)"));
}

// One RoPE description: `r` is a 4.x rope_scaling object (`field` "rope_scaling") or a
// 5.x rope_parameters object (`field` "rope_parameters", which also holds rope_theta).
absl::Status ParseRopeObject(const json& r, const char* field, absl::string_view src,
                             LlamaConfig& c) {
  if (!r.is_object()) return Invalid(src, absl::StrCat(field, " must be an object or null"));
  const bool v5 = std::string(field) == "rope_parameters";
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (auto it = r.find(key); it != r.end() && !it->is_null()) {
      if (!it->is_string()) return Invalid(src, absl::StrCat(field, ".", key, " must be a string"));
      type = it->get<std::string>();
    }
  }
  if (type != "default" && type != "llama3") {
    return Invalid(
        src, absl::StrCat(field, ".rope_type \"", type, "\" is not supported (default or llama3)"));
  }
  if (!v5 && type == "default" && r.find("rope_type") == r.end() && r.find("type") == r.end()) {
    return Invalid(src, absl::StrCat(field, " has no rope_type"));
  }
  const std::string where = absl::StrCat(src, ": ", field);
  for (const auto& [key, value] : r.items()) {
    static const char* kKnown[] = {"rope_type",
                                   "type",
                                   "rope_theta",
                                   "factor",
                                   "low_freq_factor",
                                   "high_freq_factor",
                                   "original_max_position_embeddings"};
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    const bool llama3_only = key != "rope_type" && key != "type" && key != "rope_theta";
    if (!known || (llama3_only && type != "llama3") || (key == "rope_theta" && !v5)) {
      return Invalid(src, absl::StrCat(field, ".", key, " is not supported with rope_type ", type));
    }
  }
  if (v5) {
    LF_ASSIGN_OR_RETURN(c.rope_theta, GetDouble(r, "rope_theta", where, nullptr));
  }
  if (type == "default") return absl::OkStatus();
  RopeScaling& s = c.rope_scaling;
  s.type = RopeScaling::Type::kLlama3;
  LF_ASSIGN_OR_RETURN(s.factor, GetDouble(r, "factor", where, nullptr));
  LF_ASSIGN_OR_RETURN(s.low_freq_factor, GetDouble(r, "low_freq_factor", where, nullptr));
  LF_ASSIGN_OR_RETURN(s.high_freq_factor, GetDouble(r, "high_freq_factor", where, nullptr));
  LF_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                      GetInt(r, "original_max_position_embeddings", where, nullptr));
  if (absl::Status bad = ValidateRopeScaling(s, field); !bad.ok())
    return Invalid(src, bad.message());
  return absl::OkStatus();
}

// RoPE from either layout (see ParseConfigJson); theta falls back to 10000 only when the
// config has no RoPE description at all.
absl::Status ParseRope(const json& j, absl::string_view src, LlamaConfig& c) {
  auto params = j.find("rope_parameters");
  auto scaling = j.find("rope_scaling");
  const bool has_params = params != j.end() && !params->is_null();
  const bool has_scaling = scaling != j.end() && !scaling->is_null();
  if (has_params) {
    if (has_scaling) return Invalid(src, "rope_scaling and rope_parameters are both given");
    if (j.contains("rope_theta"))
      return Invalid(src, "rope_theta and rope_parameters are both given");
    return ParseRopeObject(*params, "rope_parameters", src, c);
  }
  if (has_scaling) {
    LF_RETURN_IF_ERROR(ParseRopeObject(*scaling, "rope_scaling", src, c));
    if (!j.contains("rope_theta")) return Invalid(src, "rope_scaling is given without rope_theta");
  }
  const double theta = 10000.0;
  LF_ASSIGN_OR_RETURN(c.rope_theta, GetDouble(j, "rope_theta", src, &theta));
  return absl::OkStatus();
}

// Biases, head_dim and the attention window, which differ by family.
absl::Status ParseFamilyFields(const json& j, absl::string_view src, LlamaConfig& c) {
  // Llama's attention_bias puts a bias on q, k, v and o, mlp_bias on gate, up and down; no
  // released Llama or Mistral has either, and the engine holds q/k/v biases only.
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (auto it = j.find(bias); it != j.end() && !it->is_null() && *it != false) {
      return Invalid(src, absl::StrCat(bias, " ", it->dump(), " is not supported for model_type ",
                                       ModelTypeName(c.family), " (only false: ",
                                       std::string(bias) == "mlp_bias"
                                           ? "no bias on gate_proj, up_proj or down_proj"
                                           : "no bias on q_proj, k_proj, v_proj or o_proj",
                                       ")"));
    }
  }
  c.qkv_bias = c.family == ModelFamily::kQwen2;
  if (auto it = j.find("head_dim"); it != j.end() && !it->is_null()) {
    LF_ASSIGN_OR_RETURN(c.explicit_head_dim, GetInt(j, "head_dim", src, nullptr));
    if (c.explicit_head_dim <= 0)
      return Invalid(src, absl::StrCat("head_dim must be > 0, got ", c.explicit_head_dim));
  }
  // qwen2's window applies only with use_sliding_window (HF's Qwen2Config).
  bool windowed = c.family == ModelFamily::kMistral;
  if (c.family == ModelFamily::kQwen2) {
    if (auto it = j.find("use_sliding_window"); it != j.end() && !it->is_null()) {
      if (!it->is_boolean()) return Invalid(src, "field \"use_sliding_window\" must be a boolean");
      windowed = it->get<bool>();
    }
  }
  auto window = j.find("sliding_window");
  if (windowed && window != j.end() && !window->is_null()) {
    LF_ASSIGN_OR_RETURN(c.sliding_window, GetInt(j, "sliding_window", src, nullptr));
    if (c.sliding_window <= 0)
      return Invalid(src, absl::StrCat("sliding_window must be > 0, got ", c.sliding_window));
  } else if (c.family == ModelFamily::kLlama && window != j.end() && !window->is_null()) {
    return Invalid(src, "sliding_window is not supported for model_type llama");
  }
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return Invalid(src, "field \"layer_types\" must be an array");
    for (const json& t : *it) {
      if (t == "sliding_attention" && c.sliding_window > 0) continue;
      if (t != "full_attention") {
        return Invalid(
            src, absl::StrCat("layer_types entry ", t.dump(),
                              " is not supported (full_attention, or sliding_attention with a "
                              "sliding_window)"));
      }
    }
  }
  return absl::OkStatus();
}

// bos_token_id and eos_token_id; a list of EOS ids (Llama 3.1) gives its first and is kept
// whole for the export, each one checked against the vocabulary by ValidateConfig's caller.
absl::Status ParseSpecialIds(const json& j, absl::string_view src, LlamaConfig& c) {
  const int64_t bos = 1, eos = 2;
  LF_ASSIGN_OR_RETURN(c.bos_token_id, GetInt(j, "bos_token_id", src, &bos));
  auto it = j.find("eos_token_id");
  if (it == j.end() || !it->is_array()) {
    LF_ASSIGN_OR_RETURN(c.eos_token_id, GetInt(j, "eos_token_id", src, &eos));
    return absl::OkStatus();
  }
  if (it->empty()) return Invalid(src, "field \"eos_token_id\" is an empty list");
  for (size_t i = 0; i < it->size(); ++i) {
    const json one = {{"eos_token_id", (*it)[i]}};
    LF_ASSIGN_OR_RETURN(int64_t id, GetInt(one, "eos_token_id", src, nullptr));
    if (id < 0 || id >= kMaxVocabSize)
      return Invalid(src, absl::StrCat("eos_token_id ", id, " is out of range"));
    if (i == 0) c.eos_token_id = id;
    c.eos_token_ids.push_back(id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaConfig> ParseConfigJson(absl::string_view text, absl::string_view src) {
  absl::StatusOr<json> parsed = ParseBoundedJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": ", parsed.status().message()));
  }
  const json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(src, ": not a JSON object"));
  LlamaConfig c;
  LF_ASSIGN_OR_RETURN(c.family, ParseFamily(j, src));
  if (auto it = j.find("hidden_act"); it != j.end() && *it != "silu") {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": hidden_act ", it->dump(), " is not supported (only \"silu\")"));
  }
  LF_RETURN_IF_ERROR(ParseRope(j, src, c));
  LF_RETURN_IF_ERROR(ParseFamilyFields(j, src, c));
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
  LF_RETURN_IF_ERROR(ParseSpecialIds(j, src, c));
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(src, ": field \"tie_word_embeddings\" must be a boolean"));
    }
    c.tie_word_embeddings = it->get<bool>();
  }
  // transformers 5.x writes "dtype" where 4.x wrote "torch_dtype".
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (auto it = j.find(key); it != j.end() && it->is_string())
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
  j["architectures"] = json::array({ArchitectureName(c.family)});
  j["model_type"] = ModelTypeName(c.family);
  j["hidden_act"] = "silu";
  if (c.family != ModelFamily::kQwen2) {
    j["attention_bias"] = false;  // qwen2's q/k/v biases are implied by its class
    j["mlp_bias"] = false;
  }
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim();
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    const RopeScaling& r = c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  }
  if (c.family == ModelFamily::kMistral) {
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  } else if (c.family == ModelFamily::kQwen2) {
    // Every layer windowed when there is a window: the trainer checks it on all of them.
    j["use_sliding_window"] = c.sliding_window > 0;
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    j["max_window_layers"] = 0;
  }
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  // A list stays a list: generation stops on any of them.
  j["eos_token_id"] = c.eos_token_ids.size() > 1 ? json(c.eos_token_ids) : json(c.eos_token_id);
  j["initializer_range"] = 0.02;
  if (c.family == ModelFamily::kLlama) j["pretraining_tp"] = 1;
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
  const absl::string_view type = p->model_type;
  c.family = type == "qwen2" ? ModelFamily::kQwen2 : type == "mistral" ? ModelFamily::kMistral : ModelFamily::kLlama;
  if (p->head_dim != p->hidden / p->heads) c.explicit_head_dim = p->head_dim;
  c.qkv_bias = p->qkv_bias;
  if (p->rope_llama3_factor > 0) {
    // Llama 3.1 and 3.2's rope_scaling, as released.
    c.rope_scaling.type = RopeScaling::Type::kLlama3;
    c.rope_scaling.factor = p->rope_llama3_factor;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
  }
  return c;
}

bool PresetTakesTokenizerVocab(absl::string_view name) {
  const sched::ModelPreset* p = sched::FindModelPreset(std::string(name));
  return p != nullptr && p->takes_tokenizer_vocab;
}

}  // namespace llamafleet::trainer
