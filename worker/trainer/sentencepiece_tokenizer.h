// SentencePiece tokenizer (Llama-2's tokenizer.model) through libsentencepiece.
//
// libsentencepiece is reached through a small module (spm_shim.cc, built as
// libllamafleet_spm.so next to the executables) that is dlopen()ed with local, deep
// binding: Debian's libsentencepiece exports an embedded protobuf-lite that crashes a
// process which also loads libprotobuf (as LibTorch does). The module is found through
// $LLAMAFLEET_SPM_SHIM, else next to the running executable, else on the loader path.
#pragma once

#include <memory>
#include <string>

#include "tokenizer.h"

namespace llamafleet::trainer {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // A SentencePiece model from the bytes of its file (a serialized ModelProto); `path`
  // names it in errors. FAILED_PRECONDITION when the module cannot be loaded.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromBytes(const std::string& path,
                                                              const std::string& bytes);
  ~SentencePieceTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override;
  std::string Decode(absl::Span<const int32_t> ids) const override;
  absl::string_view kind() const override { return "sentencepiece"; }
  bool exact_pieces() const override { return false; }

 private:
  SentencePieceTokenizer() = default;
  void* handle_ = nullptr;  // SentencePieceProcessor inside the shim
};

}  // namespace llamafleet::trainer
