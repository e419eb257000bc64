// SentencePiece tokenizer (Llama-2's tokenizer.model) through libsentencepiece.
//
// This header and tokenizer.cc deliberately include no absl header: Debian's
// sentencepiece_processor.h declares `absl::string_view` itself, which collides with the
// real absl in the same translation unit. Use LoadTokenizer() (data.h) for a Status.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace llamafleet::trainer {

class Tokenizer {
 public:
  // Loads a SentencePiece model file; nullptr with `*error` set on failure.
  static std::unique_ptr<Tokenizer> Load(const std::string& path, std::string* error);
  ~Tokenizer();

  // Token ids of `text` without BOS/EOS (callers add them, Llama-2 style).
  std::vector<int32_t> Encode(std::string_view text) const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t vocab_size() const;

 private:
  Tokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace llamafleet::trainer
