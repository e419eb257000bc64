// A pre-tokenizer's regular expression (tokenizer.json's Split, ByteLevel's GPT-2 pattern,
// tiktoken's pattern) through PCRE2 with Unicode properties (UTF + UCP) and JIT.
//
// Patterns come from files others wrote, so matching is bounded: a match limit, a depth
// limit and a heap limit per match attempt, and a bounded JIT stack. A pattern that
// backtracks catastrophically on some text fails that text with an error naming the limit,
// in bounded time, instead of hanging a trainer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llamafleet::trainer {

// Longest pattern accepted (Llama 3's is 120 bytes).
inline constexpr size_t kMaxPretokenizerPatternBytes = 16 << 10;

class PretokenizerRegex {
 public:
  // Compiles `pattern` (PCRE2 syntax, which covers the Oniguruma and fancy-regex subsets
  // tokenizers use). INVALID_ARGUMENT with PCRE2's message and offset when it does not
  // compile or is longer than kMaxPretokenizerPatternBytes.
  static absl::StatusOr<std::unique_ptr<PretokenizerRegex>> Compile(absl::string_view pattern);
  ~PretokenizerRegex();
  PretokenizerRegex(const PretokenizerRegex&) = delete;
  PretokenizerRegex& operator=(const PretokenizerRegex&) = delete;

  // Appends to `pieces` the pattern's successive matches in `text` and the text between
  // them ("Isolated"), in order and none empty: together they are `text`. `text` must be
  // valid UTF-8 (see Utf8Error). Thread-safe. INVALID_ARGUMENT naming the limit when a
  // match attempt exceeds one.
  absl::Status Split(absl::string_view text, std::vector<absl::string_view>* pieces) const;

 private:
  PretokenizerRegex() = default;
  void* code_ = nullptr;     // pcre2_code_8
  void* context_ = nullptr;  // pcre2_match_context_8: the limits and the JIT stack callback
};

// The offset of the first byte of `text` that is not part of well-formed UTF-8, or -1.
int64_t Utf8Error(absl::string_view text);

}  // namespace llamafleet::trainer
