#ifndef LLAMAFLEET_TESTS_TRAINER_TINY_CONFIG_H_
#define LLAMAFLEET_TESTS_TRAINER_TINY_CONFIG_H_

// The model the trainer's in-process tests build: two layers, hidden size 32, 4 heads,
// vocabulary 50, 64 positions: small enough for a whole test in milliseconds.

#include <cstdint>

#include "config.h"

namespace llamafleet::trainer {

// That model with `kv_heads` key/value heads (4: plain attention, fewer: GQA) and, with
// `tied`, the output layer sharing the embedding.
inline LlamaConfig Tiny(int64_t kv_heads, bool tied = false) {
  LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.rms_norm_eps = 1e-5;
  c.vocab_size = 50;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  return c;
}

}  // namespace llamafleet::trainer

#endif  // LLAMAFLEET_TESTS_TRAINER_TINY_CONFIG_H_
