#ifndef LLAMAFLEET_JOBSPEC_MODEL_PRESETS_H_
#define LLAMAFLEET_JOBSPEC_MODEL_PRESETS_H_

// The built-in model presets (`model.preset`): the released shapes of the models users
// finetune, as their Hugging Face config.json gives them. One table read by the job-spec
// validator (known names, max_position_embeddings), the memory and step-time estimates
// (PresetShape) and the trainer (PresetConfig), so a preset is added in one place.
// Plain data, no Torch, no protos.

#include <cstdint>
#include <string>
#include <vector>

namespace llamafleet::sched {

// One preset: the fields of config.json that shape the model.
struct ModelPreset {
  const char* name;        // the model.preset value, e.g. "llama3.1-8b"
  const char* model_type;  // config.json model_type: "llama", "mistral", "qwen2"
  int64_t hidden;          // hidden_size
  int64_t intermediate;    // intermediate_size (SwiGLU width)
  int64_t layers;          // num_hidden_layers
  int64_t heads;           // num_attention_heads
  int64_t kv_heads;        // num_key_value_heads
  int64_t head_dim;        // hidden / heads for every preset here
  int64_t vocab;           // vocab_size
  int64_t max_positions;   // max_position_embeddings: the longest training.seq_len
  double rope_theta;
  double rms_norm_eps;
  // rope_scaling {rope_type: llama3, factor, low_freq_factor 1, high_freq_factor 4,
  // original_max_position_embeddings 8192}; 0 = no scaling (default RoPE).
  double rope_llama3_factor;
  bool tied_embeddings;  // tie_word_embeddings: lm_head is the embedding matrix
  bool qkv_bias;         // biases on the q, k and v projections (Qwen2), not on o
  int64_t bos_token_id;
  int64_t eos_token_id;     // the base model's (instruct models stop on more: see docs)
  const char* torch_dtype;  // as released
  // The vocabulary is the tokenizer's size when there is one (the tiny presets, trained
  // from scratch with whatever tokenizer the data came with); otherwise `vocab`, the
  // released tokenizer's.
  bool takes_tokenizer_vocab;
};

// Every preset, Llama-2 first, in the order `KnownPresetNames` lists them.
const std::vector<ModelPreset>& ModelPresets();

// The preset called `name`; nullptr if there is none.
const ModelPreset* FindModelPreset(const std::string& name);

// "llama2-7b, llama2-13b, ..." for error messages.
std::string KnownPresetNames();

}  // namespace llamafleet::sched

#endif  // LLAMAFLEET_JOBSPEC_MODEL_PRESETS_H_
