// SentencePiece tokenizer (Llama-2's tokenizer.model) through libsentencepiece.
//
// libsentencepiece is reached through a small module (spm_shim.cc, built as
// libllamafleet_spm.so next to the executables) that is dlopen()ed with local, deep
// binding: Debian's libsentencepiece exports an embedded protobuf-lite that crashes a
// process which also loads libprotobuf (as LibTorch does). The module is found through
// $LLAMAFLEET_SPM_SHIM, else next to the running executable, else on the loader path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llamafleet::trainer {

class Tokenizer {
 public:
  // Loads a SentencePiece model file, a regular file of at most kMaxTokenizerFileBytes
  // (model_file.h); errors name the path.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` without BOS/EOS (callers add them, Llama-2 style).
  std::vector<int32_t> Encode(absl::string_view text) const;
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t vocab_size() const { return vocab_; }
  const std::string& path() const { return path_; }  // the model file it was loaded from
  // Lowercase hex SHA-256 of the bytes it was loaded from (read once: the file may have
  // changed since).
  const std::string& sha256() const { return sha256_; }

 private:
  Tokenizer() = default;
  void* handle_ = nullptr;  // SentencePieceProcessor inside the shim
  int32_t bos_ = -1, eos_ = -1, vocab_ = 0;
  std::string path_;
  std::string sha256_;
};

}  // namespace llamafleet::trainer
