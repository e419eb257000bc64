// safetensors files: a validating, memory-mapped reader and a streaming writer.
// Format: 8-byte little-endian u64 N, N bytes of JSON header, then the data buffer.
// Header: name -> {"dtype", "shape", "data_offsets": [begin, end)} relative to the buffer,
// plus an optional "__metadata__" string map. No Torch here: tensors are byte ranges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "direct_file_writer.h"

namespace llamafleet::trainer {

enum class StDtype { kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64 };

// "F32", "BF16", ...; and back (INVALID_ARGUMENT for an unknown name).
const char* StDtypeName(StDtype dtype);
absl::StatusOr<StDtype> ParseStDtype(const std::string& name);
size_t StDtypeSize(StDtype dtype);
// User-facing float dtype names: fp32/f32/float32, fp16/f16/float16, bf16/bfloat16.
absl::StatusOr<StDtype> ParseExportDtype(const std::string& name);

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;  // C order
  uint64_t begin = 0;          // byte offsets in the data buffer, [begin, end)
  uint64_t end = 0;
  int64_t numel() const;
};

// The largest header accepted. The reference implementation takes 100 MB; the headers this
// trainer reads are far smaller (an entry is ~130 bytes: Llama-2-70B's files hold ~100 KB
// of header in all, a model at config.h's largest bounds or a LoRA adapter of it ~2 MB), and
// parsing a header takes a multiple of its size, so the bound is 16 MiB.
inline constexpr uint64_t kMaxSafetensorsHeader = uint64_t{16} << 20;

// A memory-mapped safetensors file. Open() validates the whole header: size limit, JSON,
// known dtypes, shapes whose byte size equals the offsets, offsets inside the file, no
// duplicate names, data contiguous from 0 without gaps or overlap, last offset = end of
// file. Pages are only touched when a tensor's bytes are read. Thread-compatible.
class SafetensorsFile {
 public:
  // Errors name the path and, where it applies, the tensor.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Sorted by name.
  const std::map<std::string, StTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Nullptr when absent.
  const StTensorInfo* Find(const std::string& name) const;
  // The tensor's bytes, valid while this object lives (little-endian, C order).
  const uint8_t* Data(const StTensorInfo& info) const { return data_ + info.begin; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data buffer inside the mapping
  std::map<std::string, StTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Parses and validates a header (exposed for tests). `buffer_size` is the file size
// minus 8 minus the header length. Parsed as it is read, without a DOM: its memory is a small
// multiple of the header's bytes, and nesting deeper than the format's 3 levels is refused
// as soon as it is met.
absl::StatusOr<std::vector<StTensorInfo>> ParseSafetensorsHeader(
    absl::string_view header, uint64_t buffer_size, std::map<std::string, std::string>* metadata);

// The weight_map of a sharded model's model.safetensors.index.json: tensor name -> file
// name, each a plain name in the index's directory (not empty, no '/', not "." or "..").
// INVALID_ARGUMENT naming `source` and the entry otherwise.
absl::StatusOr<std::map<std::string, std::string>> ParseSafetensorsIndex(const std::string& text,
                                                                          const std::string& source);

// Streams one safetensors file: the header is written by Open() from the declared
// tensors (offsets assigned in the given order), then each tensor's bytes are appended
// in that order with Append(), then Finish() checks everything was written and fsyncs.
// Written around the page cache where the filesystem allows it (direct_file_writer.h).
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    StDtype dtype;
    std::vector<int64_t> shape;
  };
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Open(
      const std::string& path, const std::vector<Entry>& entries,
      const std::map<std::string, std::string>& metadata);
  // The bytes such a file starts with: the 8-byte little-endian header length and the
  // JSON header (space-padded so the data starts 8-byte aligned). *data_bytes: the size of
  // the data that follows, `entries` in order. INVALID_ARGUMENT for a duplicate name.
  static absl::StatusOr<std::string> Prefix(const std::vector<Entry>& entries,
                                            const std::map<std::string, std::string>& metadata,
                                            uint64_t* data_bytes);
  ~SafetensorsWriter();
  // Appends bytes (may be called several times per tensor).
  absl::Status Append(const void* data, size_t nbytes);
  absl::Status Finish();

 private:
  SafetensorsWriter() = default;
  std::string path_;
  std::unique_ptr<DirectFileWriter> file_;
  uint64_t expected_ = 0;
  uint64_t written_ = 0;  // data bytes, after the header
};

}  // namespace llamafleet::trainer
