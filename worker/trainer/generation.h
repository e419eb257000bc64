// The generator: text from a model, one batch of prompts at a time, with a KV cache
// (kv_cache.h): one prefill of the left-padded batch, then one token per row per step.
//
// Each step picks the next token of every row from its last logits (fp32): temperature 0
// takes the argmax (greedy); otherwise logits / temperature, then top-k (the k largest
// kept), then top-p (the smallest set of most likely tokens whose probability reaches p;
// the most likely token always stays), then one draw from the rest with a CPU generator
// seeded once per Generator: a seed gives the same text for the same prompts, batch and
// device (the draws never depend on the device). A row ends on one of `eos_ids` ("eos"),
// when its text contains a stop string (cut there: "stop") or after max_new_tokens
// ("length"); the others go on.
//
// Text is decoded from a row's generated ids as a whole each step, as the continuation of
// its prompt (continuation_decoder.h: a SentencePiece model's first generated piece keeps
// its leading space), and streamed in pieces of complete UTF-8 characters; a tail that
// may begin a stop string is held back until it cannot. The pieces of a row concatenate
// to its final text (an EOS token's piece is empty; only a row ended by length may end
// inside a character, its final piece then carries the incomplete bytes).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer.h"

namespace llamafleet::trainer {

class LlamaModel;
class ParamEngine;

inline constexpr int64_t kMaxNewTokens = 32768;  // --max-new-tokens
inline constexpr size_t kMaxStopStrings = 16;    // --stop
inline constexpr size_t kMaxStopStringBytes = 256;

struct GenerationOptions {
  int64_t max_new_tokens = 128;  // 1 .. kMaxNewTokens
  double temperature = 0;        // >= 0; 0: greedy
  int64_t top_k = 0;             // >= 0; 0: every token
  double top_p = 1;              // (0, 1]
  uint64_t seed = 0;
  std::vector<std::string> stop;  // non-empty strings
  std::vector<int32_t> eos_ids;
  // false: every step runs the whole sequence again without a cache (the same math; to
  // measure what the cache saves).
  bool use_cache = true;
};

// INVALID_ARGUMENT naming the flag (--max-new-tokens, --temperature, --top-k, --top-p,
// --stop) of the first option out of its range.
absl::Status ValidateGenerationOptions(const GenerationOptions& options);

// The next token of each row of `logits` [B, V] (fp32, any device) as the file comment
// says: [B] int64 on the CPU. `generator` is a CPU generator (used unless greedy).
at::Tensor PickNextTokens(const at::Tensor& logits, const GenerationOptions& options,
                          at::Generator& generator);

// Bytes of `text` up to its last complete UTF-8 character (a trailing incomplete
// sequence left out; invalid bytes elsewhere are kept).
size_t CompleteUtf8Prefix(const std::string& text);

struct GeneratedRow {
  std::string text;          // decoded, cut before a stop string, no EOS text
  std::vector<int32_t> ids;  // every generated id, an ending EOS included
  std::string stop_reason;   // "eos", "stop" or "length"
};

class Generator {
 public:
  // `on_token(row, id, piece)`: each generated token as it comes (row: index in the
  // batch Generate was given). `tokenizer` may be null: pieces and text stay empty and
  // stop strings are refused.
  using TokenCallback = std::function<void(int64_t row, int32_t id, const std::string& piece)>;

  // `model` runs in `engine`'s compute dtype on `device`; neither is owned.
  Generator(LlamaModel& model, ParamEngine& engine, const Tokenizer* tokenizer, at::Device device,
            GenerationOptions options);

  // Generates for each prompt (token ids, non-empty, each < vocab_size, each prompt's
  // length + max_new_tokens <= max_position_embeddings: INVALID_ARGUMENT naming prompt
  // `first_index + row` and the sizes otherwise).
  absl::StatusOr<std::vector<GeneratedRow>> Generate(
      const std::vector<std::vector<int32_t>>& prompts, const TokenCallback& on_token,
      int64_t first_index = 0);

  // Every step's last logits [B, V] (fp32, on the model's device), for tests: called
  // before each pick, after the prefill and after each step.
  void set_logits_observer(std::function<void(const at::Tensor&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  struct Row;
  // Takes `id` for `row`: updates its text and reason and reports the token.
  void Accept(Row& row, int64_t index, int32_t id, const TokenCallback& on_token) const;

  LlamaModel& model_;
  ParamEngine& engine_;
  const Tokenizer* tokenizer_;
  at::Device device_;
  GenerationOptions options_;
  at::Generator rng_;
  std::function<void(const at::Tensor&)> observer_;
};

}  // namespace llamafleet::trainer
