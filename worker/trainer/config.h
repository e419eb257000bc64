// Llama-2 model configuration: the fields of an HF `config.json` that LlamaForCausalLM
// reads, parsed and validated, plus the built-in presets.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace llamafleet::trainer {

struct LlamaConfig {
  int64_t hidden_size = 0;              // h: width of the residual stream.
  int64_t intermediate_size = 0;        // ffn: width of the SwiGLU hidden layer.
  int64_t num_hidden_layers = 0;        // L: decoder layers.
  int64_t num_attention_heads = 0;      // H: query heads; head_dim = h / H.
  int64_t num_key_value_heads = 0;      // KV: key/value heads (GQA when KV < H); H % KV == 0.
  double rms_norm_eps = 0;              // epsilon inside RMSNorm (Llama-2: 1e-5).
  double rope_theta = 10000.0;          // RoPE base.
  int64_t vocab_size = 0;               // V: embedding rows and lm_head outputs.
  int64_t max_position_embeddings = 0;  // longest sequence the model accepts.
  bool tie_word_embeddings = false;     // lm_head shares the embedding matrix.
  int64_t bos_token_id = 1;             // prepended to each tokenized example.
  int64_t eos_token_id = 2;             // appended to each tokenized example.
  std::string torch_dtype = "float32";  // dtype recorded in config.json (informational).

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // Parameters of the whole model (lm_head counted once when tied).
  int64_t NumParameters() const;
  // Parameters excluding the token embedding (used by the MFU formula).
  int64_t NumNonEmbeddingParameters() const;
};

// The largest dimensions accepted (a few times the largest released Llama shapes), so a
// config.json cannot make the trainer allocate what no machine has.
inline constexpr int64_t kMaxHiddenSize = 1 << 16;
inline constexpr int64_t kMaxIntermediateSize = 1 << 18;
inline constexpr int64_t kMaxHiddenLayers = 1024;
inline constexpr int64_t kMaxAttentionHeads = 1024;
inline constexpr int64_t kMaxVocabSize = 1 << 22;
inline constexpr int64_t kMaxPositionEmbeddings = 1 << 22;

// Checks the invariants above and every dimension against its bound (and the token ids
// against vocab_size); the error names the offending field.
absl::Status ValidateConfig(const LlamaConfig& config);

// Parses the text of an HF config.json. Required: hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, vocab_size, max_position_embeddings,
// rms_norm_eps (Llama-2 uses 1e-5, the HF class default is 1e-6: never guessed).
// num_key_value_heads defaults to num_attention_heads, rope_theta to 10000,
// tie_word_embeddings to false. Unsupported features (rope_scaling, attention_bias,
// hidden_act other than silu, model_type other than llama) are errors. `source` names the
// file in error messages.
absl::StatusOr<LlamaConfig> ParseConfigJson(absl::string_view text, absl::string_view source);
absl::StatusOr<LlamaConfig> LoadConfigFile(const std::string& path);

// Serializes to an HF-compatible config.json (architectures LlamaForCausalLM).
std::string ConfigToJson(const LlamaConfig& config, absl::string_view torch_dtype);

// Built-in shapes, from the table the job-spec validator and the estimates read
// (jobspec/model_presets.h): llama2-7b, llama2-13b, llama2-70b, llama3.1-8b,
// llama3.1-70b, llama3.1-405b, llama3.2-1b, llama3.2-3b, mistral-7b, qwen2.5-7b,
// qwen2.5-72b (the released config.json of each: shape, vocabulary,
// max_position_embeddings, rope_theta, rms_norm_eps, tied embeddings, BOS/EOS), tiny
// (2 layers, dim 64, 4 heads), tiny-gqa (2 layers, dim 64, 4 heads / 2 kv heads). An
// unknown name is InvalidArgument listing the known ones.
absl::StatusOr<LlamaConfig> PresetConfig(absl::string_view name);

// Whether a preset's vocabulary is the tokenizer's size when there is one: true of the
// tiny presets, which are trained from scratch with whatever tokenizer the data came
// with (rows past its size would never be used, only stored). Never true of the released
// shapes, whose vocabulary is the released tokenizer's; false for an unknown name.
bool PresetTakesTokenizerVocab(absl::string_view name);

}  // namespace llamafleet::trainer
