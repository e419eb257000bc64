#include "gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

// A cursor over the file's bytes; every read checks what is left first.
class Cursor {
 public:
  Cursor(absl::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  uint64_t position() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": invalid GGUF at byte ", pos_, ": ", what));
  }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    if (left() < sizeof(T)) return Error(absl::StrCat("the file ends inside ", what));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  absl::StatusOr<std::string> ReadString(absl::string_view what, uint64_t max_length) {
    LF_ASSIGN_OR_RETURN(uint64_t n, Read<uint64_t>(what));
    if (n > left())
      return Error(absl::StrCat(what, " is ", n, " bytes long, past the end of the file"));
    if (n > max_length)
      return Error(absl::StrCat(what, " is ", n, " bytes long (at most ", max_length, ")"));
    std::string s(bytes_.data() + pos_, n);
    pos_ += n;
    return s;
  }

 private:
  absl::string_view bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

absl::Status ReadScalar(Cursor& c, GgufValueType type, GgufValue* out, absl::string_view what) {
  switch (type) {
    case GgufValueType::kU8: {
      LF_ASSIGN_OR_RETURN(uint8_t v, c.Read<uint8_t>(what));
      out->ints.push_back(v);
      break;
    }
    case GgufValueType::kI8: {
      LF_ASSIGN_OR_RETURN(int8_t v, c.Read<int8_t>(what));
      out->ints.push_back(v);
      break;
    }
    case GgufValueType::kU16: {
      LF_ASSIGN_OR_RETURN(uint16_t v, c.Read<uint16_t>(what));
      out->ints.push_back(v);
      break;
    }
    case GgufValueType::kI16: {
      LF_ASSIGN_OR_RETURN(int16_t v, c.Read<int16_t>(what));
      out->ints.push_back(v);
      break;
    }
    case GgufValueType::kU32: {
      LF_ASSIGN_OR_RETURN(uint32_t v, c.Read<uint32_t>(what));
      out->ints.push_back(v);
      break;
    }
    case GgufValueType::kI32: {
      LF_ASSIGN_OR_RETURN(int32_t v, c.Read<int32_t>(what));
      out->ints.push_back(v);
      break;
    }
    case GgufValueType::kU64: {
      LF_ASSIGN_OR_RETURN(uint64_t v, c.Read<uint64_t>(what));
      out->ints.push_back(static_cast<int64_t>(v));
      break;
    }
    case GgufValueType::kI64: {
      LF_ASSIGN_OR_RETURN(int64_t v, c.Read<int64_t>(what));
      out->ints.push_back(v);
      break;
    }
    case GgufValueType::kF32: {
      LF_ASSIGN_OR_RETURN(float v, c.Read<float>(what));
      out->floats.push_back(v);
      break;
    }
    case GgufValueType::kF64: {
      LF_ASSIGN_OR_RETURN(double v, c.Read<double>(what));
      out->floats.push_back(v);
      break;
    }
    case GgufValueType::kBool: {
      LF_ASSIGN_OR_RETURN(uint8_t v, c.Read<uint8_t>(what));
      if (v > 1) return c.Error(absl::StrCat(what, ": a bool of ", static_cast<int>(v)));
      out->ints.push_back(v);
      break;
    }
    case GgufValueType::kString: {
      LF_ASSIGN_OR_RETURN(std::string s, c.ReadString(what, std::numeric_limits<uint64_t>::max()));
      out->strings.push_back(std::move(s));
      break;
    }
    default:
      return c.Error(absl::StrCat(what, ": value type ", static_cast<uint32_t>(type)));
  }
  return absl::OkStatus();
}

absl::StatusOr<GgufValue> ReadValue(Cursor& c, const std::string& key) {
  const std::string what = absl::StrCat("the value of \"", key, "\"");
  LF_ASSIGN_OR_RETURN(uint32_t raw_type, c.Read<uint32_t>(what));
  GgufValue value;
  value.type = static_cast<GgufValueType>(raw_type);
  value.elem_type = value.type;
  if (GgufValueTypeName(value.type) == nullptr)
    return c.Error(absl::StrCat(what, ": unknown value type ", raw_type));
  if (value.type != GgufValueType::kArray) {
    LF_RETURN_IF_ERROR(ReadScalar(c, value.type, &value, what));
    return value;
  }
  LF_ASSIGN_OR_RETURN(uint32_t raw_elem, c.Read<uint32_t>(what));
  value.elem_type = static_cast<GgufValueType>(raw_elem);
  if (GgufValueTypeName(value.elem_type) == nullptr || value.elem_type == GgufValueType::kArray) {
    return c.Error(absl::StrCat(what, ": an array of element type ", raw_elem,
                                " (arrays of arrays are not read)"));
  }
  LF_ASSIGN_OR_RETURN(uint64_t count, c.Read<uint64_t>(what));
  // Every element takes at least its scalar size (a string its 8-byte length).
  const uint64_t least =
      value.elem_type == GgufValueType::kString ? 8 : GgufScalarSize(value.elem_type);
  if (count > c.left() / least) {
    return c.Error(
        absl::StrCat(what, ": an array of ", count, " elements, more than the file holds"));
  }
  for (uint64_t i = 0; i < count; ++i)
    LF_RETURN_IF_ERROR(ReadScalar(c, value.elem_type, &value, what));
  return value;
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

size_t GgufValue::size() const { return ints.size() + floats.size() + strings.size(); }

uint64_t GgufTensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::string bytes,
                                                          const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = name;
  f->owned_ = std::move(bytes);
  f->bytes_ = f->owned_;
  LF_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  // O_NONBLOCK: a FIFO put where a file belongs is refused below instead of waited on.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = path;
  if (st.st_size > 0) {
    f->map_size_ = static_cast<uint64_t>(st.st_size);
    f->map_ = ::mmap(nullptr, f->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map_ == MAP_FAILED) {
      f->map_ = nullptr;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed"));
    }
    f->bytes_ = absl::string_view(static_cast<const char*>(f->map_), f->map_size_);
  }
  ::close(fd);
  LF_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

absl::Status GgufFile::ParseAll() {
  Cursor c(bytes_, name_);
  LF_ASSIGN_OR_RETURN(uint32_t magic, c.Read<uint32_t>("the magic"));
  if (magic != kGgufMagic) return c.Error("not a GGUF file (the magic is not \"GGUF\")");
  LF_ASSIGN_OR_RETURN(version_, c.Read<uint32_t>("the version"));
  if (version_ != kGgufVersion) return c.Error(absl::StrCat("version ", version_, " (3 is read)"));
  LF_ASSIGN_OR_RETURN(uint64_t tensor_count, c.Read<uint64_t>("the tensor count"));
  LF_ASSIGN_OR_RETURN(uint64_t kv_count, c.Read<uint64_t>("the metadata count"));
  // A metadata entry takes at least 13 bytes (key length, type, a 1-byte value); a tensor
  // info at least 32 (name length, n_dims, one dim, type, offset).
  if (kv_count > c.left() / 13)
    return c.Error(absl::StrCat(kv_count, " metadata entries, more than the file holds"));
  if (tensor_count > kGgufMaxTensors || tensor_count > c.left() / 32) {
    return c.Error(absl::StrCat(tensor_count, " tensors, more than the file holds (or than ",
                                kGgufMaxTensors, ")"));
  }
  for (uint64_t i = 0; i < kv_count; ++i) {
    LF_ASSIGN_OR_RETURN(std::string key, c.ReadString(absl::StrCat("metadata key ", i), 1 << 16));
    if (metadata_.count(key))
      return c.Error(absl::StrCat("metadata key \"", key, "\" appears twice"));
    LF_ASSIGN_OR_RETURN(GgufValue value, ReadValue(c, key));
    keys_.push_back(key);
    metadata_.emplace(std::move(key), std::move(value));
  }
  if (const GgufValue* a = Find("general.alignment")) {
    if (a->type != GgufValueType::kU32 || a->ints[0] == 0 || (a->ints[0] & (a->ints[0] - 1)) != 0) {
      return c.Error("general.alignment is not a u32 power of two");
    }
    alignment_ = static_cast<uint32_t>(a->ints[0]);
  }
  std::set<std::string, std::less<>> names;
  uint64_t expected_offset = 0;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    LF_ASSIGN_OR_RETURN(t.name,
                        c.ReadString(absl::StrCat("the name of tensor ", i), kGgufMaxTensorName));
    if (!names.insert(t.name).second)
      return c.Error(absl::StrCat("tensor \"", t.name, "\" appears twice"));
    const std::string what = absl::StrCat("tensor \"", t.name, "\"");
    LF_ASSIGN_OR_RETURN(uint32_t n_dims, c.Read<uint32_t>(what));
    if (n_dims < 1 || n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
      return c.Error(absl::StrCat(what, " has ", n_dims, " dimensions (1 to 4)"));
    }
    t.shape.resize(n_dims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      LF_ASSIGN_OR_RETURN(uint64_t dim, c.Read<uint64_t>(what));
      // Each bound keeps the element count below 2^62, so sizes cannot overflow.
      if (dim < 1 || dim > (uint64_t{1} << 62) / numel)
        return c.Error(absl::StrCat(what, " has a dimension of ", dim));
      numel *= dim;
      t.shape[n_dims - 1 - d] = static_cast<int64_t>(dim);
    }
    LF_ASSIGN_OR_RETURN(uint32_t raw_type, c.Read<uint32_t>(what));
    if (!IsKnownGgufTensorType(raw_type)) {
      return c.Error(
          absl::StrCat(what, " has tensor type ", raw_type, " (F32, F16, BF16 and Q8_0 are read)"));
    }
    t.type = static_cast<GgufTensorType>(raw_type);
    const std::optional<uint64_t> row_bytes =
        GgufRowBytes(t.type, static_cast<uint64_t>(t.shape.back()));
    if (!row_bytes)
      return c.Error(
          absl::StrCat(what, ": rows of ", t.shape.back(), " values are not Q8_0 blocks"));
    t.bytes = *row_bytes * (numel / static_cast<uint64_t>(t.shape.back()));
    LF_ASSIGN_OR_RETURN(t.offset, c.Read<uint64_t>(what));
    if (t.offset != expected_offset) {
      return c.Error(absl::StrCat(what, " is at offset ", t.offset, ", expected ", expected_offset,
                                  " (the previous tensor's end, aligned)"));
    }
    if (t.bytes > bytes_.size()) return c.Error(absl::StrCat(what, " is larger than the file"));
    expected_offset = AlignUp(t.offset + t.bytes, alignment_);
    tensors_.push_back(std::move(t));
  }
  data_start_ = AlignUp(c.position(), alignment_);
  for (const GgufTensorInfo& t : tensors_) {
    if (data_start_ > bytes_.size() || t.offset > bytes_.size() - data_start_ ||
        t.bytes > bytes_.size() - data_start_ - t.offset) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": invalid GGUF: tensor \"", t.name,
                                                     "\" ends past the end of the file"));
    }
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::string_view GgufFile::TensorData(const GgufTensorInfo& tensor) const {
  return bytes_.substr(data_start_ + tensor.offset, tensor.bytes);
}

}  // namespace llamafleet::trainer
