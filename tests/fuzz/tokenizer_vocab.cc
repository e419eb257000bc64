// A tokenizer file as the coordinator sizes it (server/tokenizer_vocab.h) without loading
// it. Properties: the walk ends and stays bounded on any bytes, and whenever the trainer
// loads the same bytes as a tokenizer (Tokenizer::FromBytes), the coordinator reads the
// vocabulary size the trainer has: the dry run's estimate counts the trainer's vocabulary.
#include <memory>
#include <string>

#include "fuzz_check.h"
#include "server/tokenizer_vocab.h"
#include "tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<int64_t> vocab = llamafleet::TokenizerVocabSize(bytes, "fuzz/tokenizer");
  if (vocab.ok()) FUZZ_CHECK(*vocab > 0, "vocabulary of %lld", static_cast<long long>(*vocab));
  const absl::StatusOr<std::unique_ptr<llamafleet::trainer::Tokenizer>> t =
      llamafleet::trainer::Tokenizer::FromBytes("fuzz/tokenizer", bytes, "");
  if (!t.ok()) return 0;
  FUZZ_CHECK(vocab.ok(), "the trainer loads it, the coordinator says: %s",
             std::string(vocab.status().message()).c_str());
  FUZZ_CHECK(*vocab == (*t)->vocab_size(), "coordinator %lld, trainer %d",
             static_cast<long long>(*vocab), (*t)->vocab_size());
  return 0;
}
