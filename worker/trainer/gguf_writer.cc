#include "gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

// The formats's integers are little-endian, as the hosts this builds for are.
template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

void PutString(std::string* out, absl::string_view s) {
  Put<uint64_t>(out, s.size());
  out->append(s.data(), s.size());
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

GgufWriter::GgufWriter() { AddU32("general.alignment", kGgufDefaultAlignment); }

GgufWriter::~GgufWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void GgufWriter::AddKey(absl::string_view key, GgufValueType type) {
  if (first_error_.empty() && file_ != nullptr) {
    first_error_ =
        absl::StrCat("GGUF metadata key \"", key, "\" added after the header was written");
  }
  if (!keys_.emplace(key).second && first_error_.empty()) {
    first_error_ = absl::StrCat("GGUF metadata key \"", key, "\" added twice");
  }
  ++metadata_count_;
  PutString(&metadata_, key);
  Put<uint32_t>(&metadata_, static_cast<uint32_t>(type));
}

void GgufWriter::AddString(absl::string_view key, absl::string_view value) {
  AddKey(key, GgufValueType::kString);
  PutString(&metadata_, value);
}

void GgufWriter::AddU32(absl::string_view key, uint32_t value) {
  AddKey(key, GgufValueType::kU32);
  Put(&metadata_, value);
}

void GgufWriter::AddI32(absl::string_view key, int32_t value) {
  AddKey(key, GgufValueType::kI32);
  Put(&metadata_, value);
}

void GgufWriter::AddF32(absl::string_view key, float value) {
  AddKey(key, GgufValueType::kF32);
  Put(&metadata_, value);
}

void GgufWriter::AddBool(absl::string_view key, bool value) {
  AddKey(key, GgufValueType::kBool);
  Put<uint8_t>(&metadata_, value ? 1 : 0);
}

void GgufWriter::AddStringArray(absl::string_view key, const std::vector<std::string>& values) {
  AddKey(key, GgufValueType::kArray);
  Put<uint32_t>(&metadata_, static_cast<uint32_t>(GgufValueType::kString));
  Put<uint64_t>(&metadata_, values.size());
  for (const std::string& v : values) PutString(&metadata_, v);
}

void GgufWriter::AddF32Array(absl::string_view key, const std::vector<float>& values) {
  AddKey(key, GgufValueType::kArray);
  Put<uint32_t>(&metadata_, static_cast<uint32_t>(GgufValueType::kF32));
  Put<uint64_t>(&metadata_, values.size());
  for (float v : values) Put(&metadata_, v);
}

void GgufWriter::AddI32Array(absl::string_view key, const std::vector<int32_t>& values) {
  AddKey(key, GgufValueType::kArray);
  Put<uint32_t>(&metadata_, static_cast<uint32_t>(GgufValueType::kI32));
  Put<uint64_t>(&metadata_, values.size());
  for (int32_t v : values) Put(&metadata_, v);
}

absl::Status GgufWriter::AddTensor(absl::string_view name, const std::vector<int64_t>& shape,
                                   GgufTensorType type) {
  if (file_ != nullptr)
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" added after Open()"));
  for (const TensorInfo& t : tensors_) {
    if (t.name == name)
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" added twice"));
  }
  if (shape.empty() || shape.size() > static_cast<size_t>(kGgufMaxDims)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor \"", name, "\": ", shape.size(), " dimensions (1 to 4)"));
  }
  uint64_t rows = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1)
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": a dimension < 1"));
    if (i + 1 < shape.size()) rows *= static_cast<uint64_t>(shape[i]);
  }
  const std::optional<uint64_t> row_bytes = GgufRowBytes(type, static_cast<uint64_t>(shape.back()));
  if (!row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": rows of ", shape.back(),
                                                   " values are not ", GgufTensorTypeName(type),
                                                   " blocks of 32"));
  }
  TensorInfo info{std::string(name), shape, type, rows * *row_bytes, data_bytes_};
  data_bytes_ = AlignUp(data_bytes_ + info.bytes, kGgufDefaultAlignment);
  tensors_.push_back(std::move(info));
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteBytes(absl::string_view bytes) {
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    return absl::InternalError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::WritePadding(uint64_t position) {
  return WriteBytes(std::string(AlignUp(position, kGgufDefaultAlignment) - position, '\0'));
}

absl::Status GgufWriter::Open(const std::string& path) {
  if (!first_error_.empty()) return absl::InvalidArgumentError(first_error_);
  if (file_ != nullptr) return absl::FailedPreconditionError("GGUF writer opened twice");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fdopen failed"));
  }
  path_ = path;
  std::string head;
  Put<uint32_t>(&head, kGgufMagic);
  Put<uint32_t>(&head, kGgufVersion);
  Put<uint64_t>(&head, tensors_.size());
  Put<uint64_t>(&head, metadata_count_);
  head += metadata_;
  for (const TensorInfo& t : tensors_) {
    PutString(&head, t.name);
    Put<uint32_t>(&head, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      Put<uint64_t>(&head, static_cast<uint64_t>(*it));
    Put<uint32_t>(&head, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&head, t.offset);
  }
  LF_RETURN_IF_ERROR(WriteBytes(head));
  return WritePadding(head.size());
}

absl::Status GgufWriter::WriteTensor(absl::string_view data) {
  if (file_ == nullptr)
    return absl::FailedPreconditionError("GGUF writer: WriteTensor before Open");
  if (next_tensor_ >= tensors_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": more tensors written than declared"));
  }
  const TensorInfo& t = tensors_[next_tensor_];
  if (data.size() != t.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor \"", t.name, "\" takes ",
                                                   t.bytes, " bytes, got ", data.size()));
  }
  LF_RETURN_IF_ERROR(WriteBytes(data));
  ++next_tensor_;
  return WritePadding(t.offset + t.bytes);
}

absl::Status GgufWriter::Finish() {
  if (file_ == nullptr) return absl::FailedPreconditionError("GGUF writer: Finish before Open");
  if (next_tensor_ != tensors_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": ", tensors_.size() - next_tensor_,
                                                      " declared tensors were not written"));
  }
  std::FILE* f = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!flushed || !closed)
    return absl::InternalError(absl::StrCat(path_, ": cannot flush: ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace llamafleet::trainer
