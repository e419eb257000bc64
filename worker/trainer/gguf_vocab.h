// The tokenizer of an HF model directory as GGUF metadata (tokenizer.ggml.*), the way
// llama.cpp's convert_hf_to_gguf.py writes it:
//   SentencePiece tokenizer.model   model "llama", pre "default": tokens, scores and token
//                                   types from the model's pieces
//   byte-level BPE tokenizer.json   model "gpt2", pre named by its pre-tokenizer pattern
//                                   ("llama-bpe" for Llama 3's, "qwen2", "gpt-2"): tokens
//                                   (added tokens included), token types (special added
//                                   tokens CONTROL, other added ones USER_DEFINED), merges
// Ids the tokenizer does not fill up to the model's vocabulary are "[PAD<id>]", UNUSED.
// BOS/EOS and whether BOS is added are the trainer's (Tokenizer), so llama.cpp tokenizes a
// prompt as training did; the chat template is chat_template.jinja or
// tokenizer_config.json's chat_template, copied as is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config.h"
#include "gguf_writer.h"

namespace llamafleet::trainer {

struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre;                   // tokenizer.ggml.pre
  std::vector<std::string> tokens;   // one per id, vocab_size of them
  std::vector<float> scores;         // "llama" only: one per id
  std::vector<int32_t> token_types;  // GgufTokenType, one per id
  std::vector<std::string> merges;   // "gpt2" only: "left right", by rank
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;  // -1: none
  bool add_bos = false;
  std::string chat_template;      // "" = none
  std::vector<int32_t> stop_ids;  // every id that ends generation (EOS first)
};

// Reads the tokenizer of `model_dir` (tokenizer.model, else tokenizer.json, as
// Tokenizer::Load chooses) for the model `config` describes (its vocab_size rows; its
// BOS/EOS where the tokenizer has none, as training uses them). INVALID_ARGUMENT or
// FAILED_PRECONDITION naming the file for a tokenizer llama.cpp could not use: tiktoken's
// format, a BPE pre-tokenizer llama.cpp does not know, more tokens than embedding rows.
absl::StatusOr<GgufVocab> ReadGgufVocab(const std::string& model_dir, const LlamaConfig& config);

// Parses a SentencePiece ModelProto's pieces (bytes of a tokenizer.model) into `vocab`'s
// tokens, scores and token types, and its trainer spec's unk/pad ids. Bounded by the bytes
// given; INVALID_ARGUMENT naming `path` for a malformed protobuf.
absl::Status ParseSentencePiecePieces(absl::string_view bytes, const std::string& path,
                                      GgufVocab* vocab);

// Adds tokenizer.ggml.* (and tokenizer.chat_template when there is one) to `writer`.
void AddGgufVocabMetadata(const GgufVocab& vocab, GgufWriter* writer);

}  // namespace llamafleet::trainer
