// manifest.json of a sharded checkpoint (sharded_checkpoint.h has the layout): read and
// checked here, without Torch, so that everything a manifest says has its type and range
// before the reader acts on it. checkpoint_writer.cc writes it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llamafleet::trainer {

inline constexpr char kShardedCheckpointFormat[] = "llamafleet-sharded-v1";

// Bounds on a manifest's world: larger values are refused as malformed (they would size
// the reader's tables).
inline constexpr int kMaxManifestWorld = 1 << 20;     // world_size, shard files
inline constexpr int kMaxManifestTensorParallel = 1024;

struct CheckpointManifest {
  struct File {
    std::string name;  // a plain name in the checkpoint directory (no '/', no "..")
    int64_t bytes = 0;
    // How the file's contents are checked: "crc32c" (8 hex digits; what the writer puts)
    // or "sha256" (64 hex digits; manifests written before CRC-32C). The checksum catches a
    // damaged, torn or replaced file; it is no defence against a writer of the directory,
    // whose protection is the directory's owner and mode.
    std::string checksum_kind;
    std::string checksum;  // lowercase hex
  };
  struct Unit {
    std::string name;
    int64_t numel = -1;  // trainable elements of one tensor-parallel rank; -1 when absent
    int64_t padded = 0;
  };
  // Absent fields read as these defaults; a NaN loss (written as null) reads as NaN.
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;
  uint64_t seed = 0;
  int64_t tokens_seen = 0;
  int64_t rows_seen = 0;
  int64_t global_batch = 0;
  double eval_loss = std::numeric_limits<double>::quiet_NaN();       // absent: no eval at the step
  double best_eval_loss = std::numeric_limits<double>::quiet_NaN();  // absent: no eval yet
  int64_t best_eval_step = 0;
  int64_t evals_without_improvement = 0;
  int world_size = 1;
  std::string strategy = "?";
  int shard_group_size = 1;  // shard_group_size x tensor_parallel <= kMaxManifestWorld
  int tensor_parallel = 1;
  int64_t optimizer_steps = 0;
  double loss_scale = 1.0;
  std::vector<Unit> units;
  std::vector<File> files;
  nlohmann::json json;  // the whole document as read
};

// Parses the text of a manifest.json. DATA_LOSS "<source>: ..." for anything but a
// manifest of kShardedCheckpointFormat whose every field has its type: counts are
// non-negative integers, world sizes in range, files and units lists of objects. Never
// throws.
absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(const std::string& text,
                                                           const std::string& source);

// The lowercase hex `kind` checksum ("crc32c" or "sha256") of the file at `path`, streamed.
// A regular file only: a FIFO or device is FAILED_PRECONDITION, never opened
// (common/safe_open.h).
absl::StatusOr<std::string> FileChecksum(const std::string& path, const std::string& kind);
// 8 lowercase hex digits, most significant first.
std::string Crc32cHex(uint32_t crc);
// OK when the file at `path` has `file`'s checksum; DATA_LOSS naming the path otherwise.
absl::Status CheckFileChecksum(const std::string& path, const CheckpointManifest::File& file);

}  // namespace llamafleet::trainer
