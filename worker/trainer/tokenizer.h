// Tokenizers the trainer reads text with: one interface, three kinds, one file each.
//
//   SentencePiece      Llama-2's tokenizer.model (sentencepiece_tokenizer.h)
//   tokenizer.json     Hugging Face's byte-level BPE: Llama 3, Qwen2.5 (hf_bpe_tokenizer.h)
//   tiktoken           Meta's Llama 3 tokenizer.model, base64 token and rank per line
//                      (tiktoken_tokenizer.h)
//
// The kind is chosen by what a file holds, never by its name: JSON whose model.type is
// "BPE", lines of "base64 rank", or a SentencePiece protobuf. Special-token strings inside
// text are encoded as ordinary text (a user's record cannot inject control tokens); only
// a tokenizer.json's non-special added tokens are matched in text, as Hugging Face does.
// A chat template's own text is the exception: template_tokens() lists the strings that
// stand for one id there (chat_encoding.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace llamafleet::trainer {

class Tokenizer {
 public:
  // Loads the tokenizer at `path`: a file of one of the three kinds (at most
  // kMaxTokenizerFileBytes, model_file.h), or a model directory, where tokenizer.model is
  // taken when present (Llama 2's and Mistral's hold a SentencePiece one beside a
  // tokenizer.json) and tokenizer.json otherwise. A tokenizer.json also reads
  // tokenizer_config.json and generation_config.json beside it when they exist. Errors
  // name the file and, for a file of no known kind, what was expected.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  // The same from bytes already read (`path` only names them in messages and path()):
  // what the fuzz harnesses and tests use. `dir` holds the sidecar files of a
  // tokenizer.json ("" for none).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromBytes(const std::string& path,
                                                              const std::string& bytes,
                                                              const std::string& dir);
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` without BOS/EOS (callers add them). Thread-safe. Errors
  // (INVALID_ARGUMENT) for text that is not UTF-8 where a kind needs it, and when a
  // pre-tokenizer's regular expression exceeds its match limits on this text.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const = 0;
  // The bytes `ids` stand for (special tokens as their text; ids out of range are
  // skipped). Not necessarily UTF-8 when `ids` ends inside a character.
  virtual std::string Decode(absl::Span<const int32_t> ids) const = 0;

  // The strings a chat template writes that stand for one token each, with their ids:
  // every added token of a tokenizer.json (special or not, as Hugging Face matches them in
  // a rendered template), tiktoken's 256 special tokens, a SentencePiece model's "<s>"
  // and "</s>" (its BOS and EOS) and its other control pieces (Mistral v3's [INST] and
  // [/INST]). Longest first.
  const std::vector<std::pair<std::string, int32_t>>& template_tokens() const {
    return template_tokens_;
  }
  // Whether Decode({id}) is exactly the bytes `id` stood for in the text it was encoded
  // from, so that token boundaries are byte offsets (byte-level BPE: yes; SentencePiece:
  // no, its pieces carry a space marker and a leading-space convention).
  virtual bool exact_pieces() const { return true; }

  // "sentencepiece", "tokenizer.json" or "tiktoken".
  virtual absl::string_view kind() const = 0;
  int32_t bos_id() const { return bos_; }  // -1: the tokenizer has none
  int32_t eos_id() const { return eos_; }  // the one appended after a record; -1: none
  // Every id that ends generation (eos_id and, e.g., generation_config.json's list).
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  int32_t vocab_size() const { return vocab_; }
  const std::string& path() const { return path_; }  // the file it was loaded from
  // Lowercase hex SHA-256 of the bytes it was loaded from (read once: the file may have
  // changed since); with a tokenizer.json, of its sidecar files' bytes too.
  const std::string& sha256() const { return sha256_; }
  // The files an HF directory holds this tokenizer in, name -> bytes, re-read from where
  // it was loaded (for an export): tokenizer.model (SentencePiece, tiktoken), or
  // tokenizer.json with the tokenizer_config.json, generation_config.json and
  // special_tokens_map.json beside it where they exist.
  absl::StatusOr<std::map<std::string, std::string>> ExportFiles() const;

 protected:
  Tokenizer() = default;
  // Sets stop_ids_ to eos_ (when set) and `more`, sorted and without duplicates.
  void SetStopIds(std::vector<int32_t> more);
  // Sets template_tokens_ to `tokens`, longest string first (ties by id).
  void SetTemplateTokens(std::vector<std::pair<std::string, int32_t>> tokens);

  int32_t bos_ = -1, eos_ = -1, vocab_ = 0;
  std::vector<int32_t> stop_ids_;
  std::vector<std::pair<std::string, int32_t>> template_tokens_;
  std::string path_;
  std::string sha256_;
};

}  // namespace llamafleet::trainer
