// The text of generated token ids as the continuation of their prompt. No Torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "tokenizer.h"

namespace llamafleet::trainer {

// Decodes what a model generated after `prompt` as Hugging Face's text-generation pipeline
// returns it without the prompt: decode(prompt + generated)[len(decode(prompt)):], special
// tokens skipped. A SentencePiece model drops the space marker of the first piece of a
// whole sequence only, so a continuation's first piece keeps its space ("▁Paris" after
// "The capital is" is " Paris") unless the prompt holds nothing but control tokens (BOS
// alone), where it is the sequence's first piece and loses it. Where a tokenizer's pieces
// are exact (Tokenizer::exact_pieces: byte-level BPE, tiktoken) this is
// tokenizer.Decode(generated).
class ContinuationDecoder {
 public:
  // `tokenizer` must outlive this decoder.
  ContinuationDecoder(const Tokenizer& tokenizer, absl::Span<const int32_t> prompt);

  // The text of `generated` (the ids that followed the prompt, in order). Not necessarily
  // UTF-8 when `generated` ends inside a character.
  std::string Decode(absl::Span<const int32_t> generated) const;

 private:
  const Tokenizer& tokenizer_;
  // The prompt's ids from its last one that decodes to text (all of it when none does):
  // decoded before the generated ones so that the sequence's first piece lies in them.
  std::vector<int32_t> context_;
  std::string context_text_;  // tokenizer_.Decode(context_)
};

}  // namespace llamafleet::trainer
