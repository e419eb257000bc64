// Token cache files as the trainer maps them (TokenFile::Open: the header, the sizes, the
// offsets), then rows and batches over them (TokenRows), from an in-memory file.
// Properties: an accepted file's size is what its header says, its offsets increase from 0
// to its token count, and every batch holds only its rows' tokens, each inside the
// vocabulary (or the batch is refused).
#include <memory>
#include <vector>

#include "fuzz_check.h"
#include "token_cache.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<TokenFile>> opened = TokenFile::Open(llamafleet::fuzz::InMemoryFile(data, size));
  if (!opened.ok()) return 0;
  std::shared_ptr<const TokenFile> file = std::move(*opened);
  const int64_t sequences = file->num_sequences(), tokens = file->num_tokens();
  FUZZ_CHECK(sequences > 0 && size == 64 + static_cast<size_t>(sequences + 1) * 8 + static_cast<size_t>(tokens) * 5,
             "%zu bytes, %lld sequences, %lld tokens", size, static_cast<long long>(sequences),
             static_cast<long long>(tokens));
  FUZZ_CHECK(file->sequence_begin(0) == 0 && file->sequence_end(sequences - 1) == tokens, "offsets span");
  for (int64_t s = 0; s < sequences; ++s) FUZZ_CHECK(file->sequence_begin(s) < file->sequence_end(s), "empty sequence");
  constexpr int64_t kSeqLen = 16, kVocab = 1000;
  for (BatchingMode mode : {BatchingMode::kPacking, BatchingMode::kPadding}) {
    absl::StatusOr<TokenRows> rows = TokenRows::Create(file, mode, kSeqLen, "fuzz");
    if (!rows.ok()) continue;
    std::vector<int64_t> indices;
    for (int64_t r = rows->size() - 1; r >= 0 && indices.size() < 4; --r) indices.push_back(r);
    absl::StatusOr<Batch> batch = rows->MakeBatch(indices, 0, kVocab);
    if (!batch.ok()) continue;
    FUZZ_CHECK(batch->rows == static_cast<int64_t>(indices.size()) && batch->seq_len <= kSeqLen, "batch shape");
    FUZZ_CHECK(batch->tokens.size() == static_cast<size_t>(batch->rows * batch->seq_len), "batch size");
    for (int32_t id : batch->tokens) FUZZ_CHECK(id >= 0 && id < kVocab, "token %d", id);
  }
  return 0;
}
