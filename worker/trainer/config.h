// Decoder model configuration: the fields of an HF `config.json` that LlamaForCausalLM,
// MistralForCausalLM and Qwen2ForCausalLM read (one architecture: RMSNorm, RoPE, GQA,
// SwiGLU; the families differ in RoPE scaling, head_dim, q/k/v biases and tying), parsed
// and validated, plus the built-in presets.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace llamafleet::trainer {

// The `model_type`s read, each with its HF class (`architectures`).
enum class ModelFamily : uint8_t {
  kLlama = 0,    // "llama": Llama 2, 3, 3.1, 3.2, 3.3 (LlamaForCausalLM)
  kMistral = 1,  // "mistral" (MistralForCausalLM)
  kQwen2 = 2,    // "qwen2": Qwen2 and Qwen2.5 (Qwen2ForCausalLM): q/k/v biases
};
const char* ModelTypeName(ModelFamily family);     // "llama", "mistral", "qwen2"
const char* ArchitectureName(ModelFamily family);  // "LlamaForCausalLM", ...

// RoPE's frequencies (HF's rope_type): kDefault inv_freq = 1 / theta^(2i / head_dim);
// kLlama3 rescales them as Llama 3.1 does (LlamaModel, model.h). Other types are refused.
struct RopeScaling {
  enum class Type : uint8_t { kDefault = 0, kLlama3 = 1 };
  Type type = Type::kDefault;
  double factor = 0;                             // kLlama3: low frequencies divided by it
  double low_freq_factor = 0;                    // kLlama3: 0 < low < high
  double high_freq_factor = 0;                   // kLlama3
  int64_t original_max_position_embeddings = 0;  // kLlama3: the pretraining context
};

struct LlamaConfig {
  ModelFamily family = ModelFamily::kLlama;  // model_type; written back by ConfigToJson
  int64_t hidden_size = 0;              // h: width of the residual stream.
  int64_t intermediate_size = 0;        // ffn: width of the SwiGLU hidden layer.
  int64_t num_hidden_layers = 0;        // L: decoder layers.
  int64_t num_attention_heads = 0;      // H: query heads.
  int64_t num_key_value_heads = 0;      // KV: key/value heads (GQA when KV < H); H % KV == 0.
  double rms_norm_eps = 0;              // epsilon inside RMSNorm (Llama-2: 1e-5).
  double rope_theta = 10000.0;          // RoPE base.
  RopeScaling rope_scaling;             // rope_scaling / rope_parameters' rope_type
  int64_t explicit_head_dim = 0;        // config's head_dim (0: absent, h / H)
  bool qkv_bias = false;                // q, k, v projections carry biases (qwen2)
  int64_t sliding_window = 0;           // attention window (0: none); see CheckSequenceLength
  int64_t vocab_size = 0;               // V: embedding rows and lm_head outputs.
  int64_t max_position_embeddings = 0;  // longest sequence the model accepts.
  bool tie_word_embeddings = false;     // lm_head shares the embedding matrix.
  int64_t bos_token_id = 1;             // prepended to each tokenized example.
  int64_t eos_token_id = 2;             // appended to each tokenized example (a config's
                                        // list of EOS ids: its first).
  std::vector<int64_t> eos_token_ids;   // a config's list of EOS ids as written (Llama
                                        // 3.1: end of text, end of message, end of turn);
                                        // empty for a single id.
  std::string torch_dtype = "float32";  // dtype recorded in config.json (informational).

  // d: width of one attention head (q is H*d wide, k and v KV*d, o maps H*d to h).
  int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads;
  }
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
inline constexpr int64_t kMaxHeadDim = 1 << 12;
inline constexpr int64_t kMaxSlidingWindow = 1 << 30;

// Checks the invariants above and every dimension against its bound (and the token ids
// against vocab_size); the error names the offending field.
absl::Status ValidateConfig(const LlamaConfig& config);

// Whether rows of `seq_len` tokens compute what the HF model computes: a sliding window
// shorter than the sequence is not implemented. The error names sliding_window.
absl::Status CheckSequenceLength(const LlamaConfig& config, int64_t seq_len);

// Parses the text of an HF config.json. Required: hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, vocab_size, max_position_embeddings,
// rms_norm_eps (Llama-2 uses 1e-5, the HF class default is 1e-6: never guessed).
// model_type: llama (the default), mistral or qwen2. num_key_value_heads defaults to
// num_attention_heads, head_dim to h / H, tie_word_embeddings to false.
// RoPE from either layout: transformers 4.x's top-level rope_theta and rope_scaling (with
// neither, theta 10000, HF's default), or 5.x's rope_parameters {rope_theta, rope_type,
// ...} (then rope_theta is required in it); rope_type default or llama3 with all four of
// its fields. Unsupported features (another rope_type or an unknown rope field,
// attention_bias or mlp_bias on llama/mistral, hidden_act other than silu, another
// model_type) are errors naming the field. `source` names the file in error messages.
absl::StatusOr<LlamaConfig> ParseConfigJson(absl::string_view text, absl::string_view source);
absl::StatusOr<LlamaConfig> LoadConfigFile(const std::string& path);

// Serializes to an HF-compatible config.json for the family's class (transformers 4.x's
// layout, which 5.x reads too): model_type, architectures, head_dim, RoPE, and the
// family's own fields (qwen2: use_sliding_window; mistral: sliding_window).
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
