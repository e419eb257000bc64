// The tokenizer equivalence corpus (tests/trainer/fixtures/tokenizers/corpus.py, in C++):
// the same documents from the same seed, so the fixtures' reference ids apply to them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llamafleet::trainer {

// The fixtures' folder in the source tree.
std::string TokenizerFixtureDir();

// Documents drawn from corpus_fragments.json with xorshift64 until their sizes sum to at
// least `total_bytes`, exactly as corpus.documents(seed, total_bytes) makes them.
absl::StatusOr<std::vector<std::string>> TokenizerCorpus(uint64_t seed, size_t total_bytes);

}  // namespace llamafleet::trainer
