#ifndef LLAMAFLEET_SERVER_TOKENIZER_VOCAB_H_
#define LLAMAFLEET_SERVER_TOKENIZER_VOCAB_H_

// The vocabulary size the trainer gives a tokenizer (worker/trainer/tokenizer.h), read
// without loading the tokenizer: the coordinator sizes the presets that take the
// tokenizer's vocabulary (jobspec/model_presets.h) from it in its estimates. Nothing here
// validates the tokenizer; the trainer does when it loads it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llamafleet {

// The most of a tokenizer file read, as the trainer's bound.
inline constexpr size_t kMaxTokenizerVocabFileBytes = size_t{64} << 20;

// The vocabulary size of the tokenizer file `bytes`, by the trainer's rules:
//   - tokenizer.json (JSON): the largest id in model.vocab and added_tokens, plus one;
//   - a tiktoken ranks file (lines of "base64-token rank"): its ranks plus the 256
//     special tokens the trainer adds;
//   - a SentencePiece model (a ModelProto): its pieces.
// INVALID_ARGUMENT, naming `shown`, when the bytes are none of these or hold no piece.
absl::StatusOr<int64_t> TokenizerVocabSize(absl::string_view bytes, absl::string_view shown);

// The vocabulary size of the tokenizer file at `path`, below one of `roots` (links inside
// the roots resolved as the storage has them, server/path_resolution.h), opened without
// following a link below its root and read bounded. NOT_FOUND or FAILED_PRECONDITION
// naming the path when it cannot be read here; TokenizerVocabSize's errors.
absl::StatusOr<int64_t> ReadTokenizerVocabSize(const std::vector<std::string>& roots,
                                               const std::string& path);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_TOKENIZER_VOCAB_H_
