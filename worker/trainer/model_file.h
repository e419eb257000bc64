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
// Tokenizer files: Llama-2's SentencePiece model is 0.5 MB, Llama 3's tokenizer.json 9 MB,
// the largest released ones a few tens of MB.
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{64} << 20;
// Entries of a tokenizer's vocabulary (a tiktoken file's ranks, a tokenizer.json's
// model.vocab): the largest released vocabularies hold about 260K.
inline constexpr int64_t kMaxTokenizerVocab = int64_t{1} << 20;
// JSON values (every scalar, array, object and object key) of a tokenizer.json, counted
// before its DOM is built: Llama 3's and Qwen2.5's hold under 0.8M. The DOM costs at most
// about 110 bytes a value (4M empty objects), so parsing a tokenizer.json within
// kMaxTokenizerFileBytes stays under about 0.6 GB, its text and strings included.
inline constexpr uint64_t kMaxTokenizerJsonValues = uint64_t{1} << 22;
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

// `text` parsed into nlohmann's DOM when it nests at most `max_depth` levels and holds at
// most `max_values` JSON values (scalars, arrays, objects and object keys; counted by a
// SAX pass that allocates only one string at a time, before the DOM is built).
// INVALID_ARGUMENT "not valid JSON", "nested deeper than N levels" or "holds more than N
// JSON values" (no source named: callers prefix it).
absl::StatusOr<nlohmann::json> ParseBoundedJson(absl::string_view text,
                                                int max_depth = kMaxModelJsonDepth,
                                                uint64_t max_values = UINT64_MAX);

}  // namespace llamafleet::trainer
