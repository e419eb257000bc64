// A tokenizer file as the coordinator sizes it (server/tokenizer_vocab.h) without loading
// it. Properties: the walk ends and stays bounded on any bytes, and whenever the trainer
// loads the same bytes as a tokenizer.json or a tiktoken ranks file (the choice
// Tokenizer::FromBytes makes), the coordinator reads the vocabulary size the trainer has:
// the dry run's estimate counts the trainer's vocabulary. SentencePiece models are sized
// but not compared here: their library is loaded with RTLD_DEEPBIND, which the sanitizer
// runtime refuses (gguf_file covers the piece parser).
#include <memory>
#include <string>

#include "fuzz_check.h"
#include "hf_bpe_tokenizer.h"
#include "server/tokenizer_vocab.h"
#include "tiktoken_tokenizer.h"

using llamafleet::trainer::Tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<int64_t> vocab = llamafleet::TokenizerVocabSize(bytes, "fuzz/tokenizer");
  if (vocab.ok()) FUZZ_CHECK(*vocab > 0, "vocabulary of %lld", static_cast<long long>(*vocab));
  size_t i = bytes.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  while (i < bytes.size() && (bytes[i] == ' ' || bytes[i] == '\n' || bytes[i] == '\r' || bytes[i] == '\t'))
    ++i;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = absl::UnimplementedError("SentencePiece");
  if (i < bytes.size() && bytes[i] == '{') {
    t = llamafleet::trainer::LoadHfBpeTokenizer("fuzz/tokenizer.json", bytes, "");
  } else if (llamafleet::trainer::LooksLikeTiktoken(bytes)) {
    t = llamafleet::trainer::LoadTiktokenTokenizer("fuzz/tokenizer.model", bytes);
  }
  if (!t.ok()) return 0;
  FUZZ_CHECK(vocab.ok(), "the trainer loads it, the coordinator says: %s",
             std::string(vocab.status().message()).c_str());
  FUZZ_CHECK(*vocab == (*t)->vocab_size(), "coordinator %lld, trainer %d",
             static_cast<long long>(*vocab), (*t)->vocab_size());
  return 0;
}
