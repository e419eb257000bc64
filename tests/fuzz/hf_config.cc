// An HF config.json as the trainer reads a model's (ParseConfigJson). Properties: an
// accepted config's parameter counts are computed without overflow (UBSan), and the
// config written back (ConfigToJson) reads as the same config, family, RoPE scaling,
// head_dim, biases and window included.
#include "config.h"
#include "fuzz_check.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<LlamaConfig> config = ParseConfigJson(llamafleet::fuzz::AbslText(data, size), "config.json");
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument, "%s",
               config.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(config->NumParameters() > 0 && config->NumNonEmbeddingParameters() > 0, "parameter count");
  const std::string json = ConfigToJson(*config, config->torch_dtype);
  absl::StatusOr<LlamaConfig> again = ParseConfigJson(json, "written back");
  FUZZ_CHECK(again.ok(), "written back: %s\n%s", again.status().ToString().c_str(), json.c_str());
  FUZZ_CHECK(again->hidden_size == config->hidden_size &&
                 again->intermediate_size == config->intermediate_size &&
                 again->num_hidden_layers == config->num_hidden_layers &&
                 again->num_attention_heads == config->num_attention_heads &&
                 again->num_key_value_heads == config->num_key_value_heads &&
                 again->vocab_size == config->vocab_size &&
                 again->max_position_embeddings == config->max_position_embeddings &&
                 again->rms_norm_eps == config->rms_norm_eps &&
                 again->rope_theta == config->rope_theta &&
                 again->tie_word_embeddings == config->tie_word_embeddings &&
                 again->bos_token_id == config->bos_token_id &&
                 again->eos_token_id == config->eos_token_id && again->family == config->family &&
                 again->head_dim() == config->head_dim() && again->qkv_bias == config->qkv_bias &&
                 again->sliding_window == config->sliding_window &&
                 again->rope_scaling.type == config->rope_scaling.type &&
                 again->rope_scaling.factor == config->rope_scaling.factor &&
                 again->rope_scaling.low_freq_factor == config->rope_scaling.low_freq_factor &&
                 again->rope_scaling.high_freq_factor == config->rope_scaling.high_freq_factor &&
                 again->rope_scaling.original_max_position_embeddings ==
                     config->rope_scaling.original_max_position_embeddings,
             "written back reads as another config:\n%s", json.c_str());
  return 0;
}
