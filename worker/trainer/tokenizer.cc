#include "tokenizer.h"

#include <sentencepiece_processor.h>

namespace llamafleet::trainer {

std::unique_ptr<Tokenizer> Tokenizer::Load(const std::string& path, std::string* error) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto status = t->sp_->Load(path);
  if (!status.ok()) {
    *error = path + ": cannot load SentencePiece model: " + status.ToString();
    return nullptr;
  }
  return t;
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int> ids;
  sp_->Encode(text, &ids).IgnoreError();
  return std::vector<int32_t>(ids.begin(), ids.end());
}

int32_t Tokenizer::bos_id() const { return sp_->bos_id(); }
int32_t Tokenizer::eos_id() const { return sp_->eos_id(); }
int32_t Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }

}  // namespace llamafleet::trainer
