// Writes a GGUF file (version 3; layout in gguf_types.h): metadata and tensor infos are
// declared first and kept in memory, then Open() writes them and the tensors' data is
// streamed in the order the tensors were declared, so only one tensor is held at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gguf_types.h"

namespace llamafleet::trainer {

class GgufWriter {
 public:
  // general.alignment is written with the default, 32.
  GgufWriter();
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Metadata, written in the order added. A key added twice, or after Open(), makes Open()
  // (or the call after it) fail with INVALID_ARGUMENT naming the key.
  void AddString(absl::string_view key, absl::string_view value);
  void AddU32(absl::string_view key, uint32_t value);
  void AddI32(absl::string_view key, int32_t value);
  void AddF32(absl::string_view key, float value);
  void AddBool(absl::string_view key, bool value);
  void AddStringArray(absl::string_view key, const std::vector<std::string>& values);
  void AddF32Array(absl::string_view key, const std::vector<float>& values);
  void AddI32Array(absl::string_view key, const std::vector<int32_t>& values);

  // Declares the next tensor: `shape` in Torch's order (outermost first; written
  // innermost first), 1 to 4 dimensions, each >= 1. INVALID_ARGUMENT for a duplicate name,
  // a bad shape, or a Q8_0 tensor whose rows are not a whole number of 32-value blocks.
  absl::Status AddTensor(absl::string_view name, const std::vector<int64_t>& shape,
                         GgufTensorType type);

  // Creates `path` (truncating a regular file; never through a link) and writes
  // everything before the data section.
  absl::Status Open(const std::string& path);
  // The data of the next declared tensor: exactly its size in bytes (GgufRowBytes).
  absl::Status WriteTensor(absl::string_view data);
  // Checks every tensor was written, then flushes, fsyncs and closes the file.
  absl::Status Finish();

 private:
  struct TensorInfo {
    std::string name;
    std::vector<int64_t> shape;
    GgufTensorType type;
    uint64_t bytes;
    uint64_t offset;  // from the data section's start
  };
  void AddKey(absl::string_view key, GgufValueType type);
  absl::Status WriteBytes(absl::string_view bytes);
  absl::Status WritePadding(uint64_t position);

  // Constant after Open().
  std::string metadata_;  // the encoded metadata entries
  uint64_t metadata_count_ = 0;
  std::set<std::string, std::less<>> keys_;
  std::vector<TensorInfo> tensors_;
  uint64_t data_bytes_ = 0;  // the data section's size so far (aligned ends)
  std::string first_error_;  // a metadata mistake, reported by Open()

  std::FILE* file_ = nullptr;
  std::string path_;
  size_t next_tensor_ = 0;
};

}  // namespace llamafleet::trainer
