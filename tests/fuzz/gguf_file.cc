// GGUF files as the trainer's reader parses them (GgufFile::Parse: header, metadata,
// tensor infos, data section), and the same bytes as a SentencePiece model
// (ParseSentencePiecePieces, the GGUF export's tokenizer.model reader). Properties: every
// tensor accepted lies inside the input, its size is what its type and shape make, and it
// decodes to numel values; every metadata value holds one element unless it is an array.
#include "fuzz_check.h"
#include "gguf_codec.h"
#include "gguf_reader.h"
#include "gguf_vocab.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  GgufVocab vocab;
  (void)ParseSentencePiecePieces(bytes, "fuzz", &vocab);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(bytes, "fuzz");
  if (!file.ok()) return 0;
  for (const auto& [key, value] : (*file)->metadata()) {
    FUZZ_CHECK(value.type == GgufValueType::kArray || value.size() == 1,
               "%s: a scalar of %zu elements", key.c_str(), value.size());
  }
  for (const GgufTensorInfo& t : (*file)->tensors()) {
    const absl::string_view d = (*file)->TensorData(t);
    FUZZ_CHECK(d.size() == t.bytes, "%s: data of %zu bytes, info says %llu", t.name.c_str(),
               d.size(), static_cast<unsigned long long>(t.bytes));
    FUZZ_CHECK(t.offset + t.bytes <= size, "%s outside the input", t.name.c_str());
    const std::optional<uint64_t> row = GgufRowBytes(t.type, static_cast<uint64_t>(t.shape.back()));
    FUZZ_CHECK(row && *row * (t.numel() / static_cast<uint64_t>(t.shape.back())) == t.bytes,
               "%s: size", t.name.c_str());
    if (t.bytes <= (1 << 16)) {
      absl::StatusOr<std::vector<float>> values = DecodeGgufTensor(t.type, d, t.numel());
      FUZZ_CHECK(values.ok() && values->size() == t.numel(), "%s does not decode", t.name.c_str());
    }
  }
  return 0;
}
