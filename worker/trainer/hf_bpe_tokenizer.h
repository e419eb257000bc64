// Hugging Face tokenizer.json with a byte-level BPE model (Llama 3, Qwen2.5, GPT-2 style).
//
// What is read, and everything else in those sections refused by name:
//   model          type "BPE"; vocab; merges as "a b" strings or [a, b] pairs;
//                  ignore_merges; unk_token. No dropout, subword prefix or suffix, or
//                  byte_fallback.
//   normalizer     null only.
//   pre_tokenizer  Split (a Regex or String pattern, behavior Isolated, not inverted) and
//                  ByteLevel (add_prefix_space, use_regex: GPT-2's pattern), alone or in a
//                  Sequence; a ByteLevel step is required (the vocabulary is byte-level).
//   added_tokens   special ones are text when they occur in a record; non-special ones
//                  are matched in text, leftmost-longest, as Hugging Face does (without
//                  lstrip, rstrip or single_word, which are refused).
//   post_processor TemplateProcessing (alone or in a Sequence): the special token before
//                  $A is BOS, the one after it EOS.
// Beside it, when present: tokenizer_config.json's eos_token (the EOS appended to a
// record; its bos_token is not used: the template says whether there is one) and
// generation_config.json's eos_token_id (an id or a list: the stop ids).
#pragma once

#include <memory>
#include <string>

#include "tokenizer.h"

namespace llamafleet::trainer {

// `bytes` is the tokenizer.json at `path`; `dir` ("" for none) holds its sidecar files.
// INVALID_ARGUMENT naming the file and the field for anything malformed or unsupported,
// e.g. a merge naming a token that is not in model.vocab.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfBpeTokenizer(const std::string& path,
                                                              const std::string& bytes,
                                                              const std::string& dir);

}  // namespace llamafleet::trainer
