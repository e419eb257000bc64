// Reading the files of a model directory (config.json, model.safetensors.index.json,
// adapter_config.json, a checkpoint's manifest.json, tokenizer.model): others write them,
// so a hostile one must neither make the trainer read gigabytes nor build gigabytes from a
// few. Each file is read only if its descriptor's fstat shows a regular file within the
// bound given for it, and no more than that bound is read; JSON is parsed into a DOM only
// when its nesting stays within a few levels, which keeps the DOM's size a bounded
// multiple of the text's (about 30x at worst, where the DOM of an unbounded "[[[[..." is
// 85x).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace llamafleet::trainer {

// Bounds on what is read whole from a model directory. A config is a few KB.
inline constexpr uint64_t kMaxConfigFileBytes =
    uint64_t{1} << 20;  // config.json, adapter_config.json, a rank's state
// Files that list every tensor or shard file: Llama-2-70B's index is ~60 KB, an index of
// the largest model config.h accepts (1024 layers) under 1 MB, a manifest of 50,000 ranks
// ~12 MB.
inline constexpr uint64_t kMaxListingFileBytes =
    uint64_t{16} << 20;  // model.safetensors.index.json, manifest.json
// SentencePiece models: Llama-2's is 0.5 MB, the largest released ones a few MB.
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{64} << 20;
// Nesting accepted in those JSON files (HF configs use 3 or 4 levels).
inline constexpr int kMaxModelJsonDepth = 16;

// The whole file at `path` (links followed: a hub snapshot's files are links to blobs),
// read as common/safe_open.h reads: a regular file only (a FIFO is never waited on), its
// size checked on the descriptor against `max_bytes` before anything is read. NOT_FOUND
// when it does not exist, FAILED_PRECONDITION otherwise; every message names the path.
absl::StatusOr<std::string> ReadModelFile(const std::string& path, uint64_t max_bytes);

// Whether the JSON `text` nests arrays and objects deeper than `max_depth` levels ("{}" is
// one). A byte scan outside strings, without allocating: for a valid text its nesting, for
// an invalid one at least the depth a parser reaches before it fails.
bool JsonNestsDeeperThan(absl::string_view text, int max_depth);

// `text` parsed into nlohmann's DOM when it nests at most `max_depth` levels.
// INVALID_ARGUMENT "not valid JSON" or "nested deeper than N levels" (no source named:
// callers prefix it).
absl::StatusOr<nlohmann::json> ParseBoundedJson(absl::string_view text,
                                                int max_depth = kMaxModelJsonDepth);

}  // namespace llamafleet::trainer
