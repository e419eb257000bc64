// Reads a GGUF file (version 3; layout in gguf_types.h) back: its metadata and tensor
// infos, and each tensor's bytes. Written for files from anywhere: every count, string
// length, dimension and offset is checked against the bytes that are really there before
// anything is allocated for it, so a hostile file gets INVALID_ARGUMENT naming the file and
// what is wrong, never a crash or an allocation larger than the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gguf_types.h"

namespace llamafleet::trainer {

// One metadata value. Scalars hold one element; arrays (of scalars or strings; arrays of
// arrays are refused) hold theirs. Integer and bool values are in `ints` (a u64 above
// INT64_MAX bit-cast), f32/f64 in `floats`, strings in `strings`.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;       // kArray for an array
  GgufValueType elem_type = GgufValueType::kU8;  // the scalar type (the elements' for an array)
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  // The number of elements (1 for a scalar).
  size_t size() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // Torch's order, outermost first (the file's dims reversed)
  GgufTensorType type = GgufTensorType::kF32;
  uint64_t offset = 0;  // from the data section's start
  uint64_t bytes = 0;   // its data's size
  uint64_t numel() const;
};

// The largest tensor count, dimensions and name length accepted (GGML_MAX_NAME is 64).
inline constexpr uint64_t kGgufMaxTensors = 1 << 20;
inline constexpr size_t kGgufMaxTensorName = 64;

class GgufFile {
 public:
  // Maps the file at `path` (a regular file) and parses it. Errors name the path.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes already in memory (a copy is kept); `name` names them in errors.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::string bytes,
                                                         const std::string& name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // Keys in file order, and their values by key (keys are unique: a repeated one is refused).
  const std::vector<std::string>& keys() const { return keys_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* Find(absl::string_view key) const;
  // Tensors in file order, names unique, data in bounds and laid out as llama.cpp requires
  // (each at the previous one's end rounded up to the alignment).
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(absl::string_view name) const;
  // The bytes of `tensor` (one of tensors()).
  absl::string_view TensorData(const GgufTensorInfo& tensor) const;

 private:
  GgufFile() = default;
  absl::Status ParseAll();

  std::string name_;
  std::string owned_;    // Parse()'s bytes
  void* map_ = nullptr;  // Open()'s mapping
  uint64_t map_size_ = 0;
  absl::string_view bytes_;  // the whole file
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_start_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace llamafleet::trainer
