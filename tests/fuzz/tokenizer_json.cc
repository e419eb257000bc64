// tokenizer.json (byte-level BPE) as the trainer loads it (LoadHfBpeTokenizer), then a
// short text encoded with what was accepted. Properties: loading and encoding end (the
// pre-tokenizer's regex within its match limits), every id is inside the vocabulary, and
// decoding what was encoded never reads outside the tables.
#include <memory>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "hf_bpe_tokenizer.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      LoadHfBpeTokenizer("fuzz/tokenizer.json", bytes, "");
  if (!t.ok()) return 0;
  for (const char* text :
       {"Hello, world! l'été 123456 <|eot_id|>\n\n  x", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"}) {
    absl::StatusOr<std::vector<int32_t>> ids = (*t)->Encode(text);
    if (!ids.ok()) continue;
    for (int32_t id : *ids)
      FUZZ_CHECK(id >= 0 && id < (*t)->vocab_size(), "id %d of %d", id, (*t)->vocab_size());
    (void)(*t)->Decode(*ids);
  }
  return 0;
}
