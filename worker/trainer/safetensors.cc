#include "safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "model_file.h"
#include "nlohmann/json.hpp"
#include "util.h"

namespace llamafleet::trainer {

using nlohmann::json;

namespace {
struct DtypeRow {
  StDtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeRow kDtypes[] = {
    {StDtype::kBool, "BOOL", 1},      {StDtype::kU8, "U8", 1},   {StDtype::kI8, "I8", 1},
    {StDtype::kF8E5M2, "F8_E5M2", 1}, {StDtype::kF8E4M3, "F8_E4M3", 1},
    {StDtype::kI16, "I16", 2},        {StDtype::kU16, "U16", 2}, {StDtype::kF16, "F16", 2},
    {StDtype::kBF16, "BF16", 2},      {StDtype::kI32, "I32", 4}, {StDtype::kU32, "U32", 4},
    {StDtype::kF32, "F32", 4},        {StDtype::kF64, "F64", 8}, {StDtype::kI64, "I64", 8},
    {StDtype::kU64, "U64", 8},
};
}  // namespace

const char* StDtypeName(StDtype d) {
  for (const auto& row : kDtypes) {
    if (row.dtype == d) return row.name;
  }
  return "?";
}

size_t StDtypeSize(StDtype d) {
  for (const auto& row : kDtypes) {
    if (row.dtype == d) return row.size;
  }
  return 0;
}

absl::StatusOr<StDtype> ParseStDtype(const std::string& name) {
  for (const auto& row : kDtypes) {
    if (name == row.name) return row.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", name, "\""));
}

absl::StatusOr<StDtype> ParseExportDtype(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (n == "f32" || n == "fp32" || n == "float32") return StDtype::kF32;
  if (n == "f16" || n == "fp16" || n == "float16") return StDtype::kF16;
  if (n == "bf16" || n == "bfloat16") return StDtype::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported export dtype \"", name, "\" (use fp32, fp16 or bf16)"));
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// A safetensors header read as SAX events straight into tensor entries, without a DOM: it
// holds the entries and their names (for duplicates), a small multiple of the header's
// bytes. Levels: 1 inside the header object, 2 inside an entry (or __metadata__), 3 inside
// an entry's shape, data_offsets or unknown field; anything nested deeper ends the parse
// at once, so a header of "[[[[..." costs nothing. Each entry is checked as it closes.
class HeaderReader : public nlohmann::json_sax<json> {
 public:
  HeaderReader(uint64_t buffer_size, std::map<std::string, std::string>* metadata)
      : buffer_size_(buffer_size), metadata_(metadata) {}

  // After sax_parse returned `parsed`: the entries, or why the header is refused.
  absl::StatusOr<std::vector<StTensorInfo>> Result(bool parsed) {
    if (!error_.ok()) return error_;
    if (!parsed) return absl::InvalidArgumentError("header is not valid JSON");
    return std::move(entries_);
  }

  bool null() override { return Other(); }
  bool boolean(bool) override { return Other(); }
  bool number_integer(number_integer_t v) override {
    return v >= 0 ? Number(static_cast<uint64_t>(v)) : Other();
  }
  bool number_unsigned(number_unsigned_t v) override { return Number(v); }
  bool number_float(number_float_t, const string_t&) override { return Other(); }
  bool binary(binary_t&) override { return Other(); }
  bool string(string_t& v) override {
    if (depth_ == 2 && in_metadata_) {
      if (metadata_ != nullptr) (*metadata_)[key_] = std::move(v);
      return true;
    }
    if (depth_ == 2 && field_ == Field::kDtype) {
      absl::StatusOr<StDtype> dtype = ParseStDtype(v);
      if (!dtype.ok()) return Fail(Bad(dtype.status().message()));
      entry_.dtype = *dtype;
      has_dtype_ = true;
      return true;
    }
    return Other();
  }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      if (!names_.insert(k).second) {
        return Fail(absl::InvalidArgumentError(absl::StrCat("duplicate tensor \"", k, "\"")));
      }
      name_ = std::move(k);
    } else if (depth_ == 2) {
      field_ = k == "dtype"          ? Field::kDtype
               : k == "shape"        ? Field::kShape
               : k == "data_offsets" ? Field::kOffsets
                                     : Field::kOther;
      if (in_metadata_) key_ = std::move(k);
    }
    return true;
  }
  bool start_object(std::size_t) override { return Open(/*object=*/true); }
  bool start_array(std::size_t) override { return Open(/*object=*/false); }
  bool end_object() override {
    if (depth_ == 2 && !in_metadata_) {
      absl::Status s = CheckEntry();
      if (!s.ok()) return Fail(std::move(s));
      entries_.push_back(std::move(entry_));
    }
    return Close();
  }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  enum class Field { kDtype, kShape, kOffsets, kOther };

  absl::Status Bad(absl::string_view why) const {
    return absl::InvalidArgumentError(absl::StrCat("tensor \"", name_, "\": ", why));
  }
  bool Fail(absl::Status s) {
    if (error_.ok()) error_ = std::move(s);
    return false;
  }
  // Why a value that is not what the format has at this place is refused; OK for the value
  // of a field the format does not know (ignored).
  absl::Status Misplaced() const {
    switch (depth_) {
      case 0:
        return absl::InvalidArgumentError("header is not a JSON object");
      case 1:
        return name_ == "__metadata__" ? absl::InvalidArgumentError("__metadata__ is not an object")
                                       : Bad("entry is not an object");
      case 2:
        if (in_metadata_) {
          return absl::InvalidArgumentError(
              absl::StrCat("__metadata__ value for \"", key_, "\" is not a string"));
        }
        if (field_ == Field::kDtype) return Bad("missing or non-string dtype");
        if (field_ == Field::kShape) return Bad("missing or non-array shape");
        if (field_ == Field::kOffsets) return Bad("data_offsets must be [begin, end]");
        return absl::OkStatus();
      default:
        if (array_ == Field::kShape) return Bad("shape entries must be non-negative integers");
        if (array_ == Field::kOffsets) return Bad("data_offsets must be non-negative integers");
        return absl::OkStatus();
    }
  }
  bool Other() {
    absl::Status s = Misplaced();
    return s.ok() || Fail(std::move(s));
  }

  bool Number(uint64_t v) {
    if (depth_ == 3 && array_ == Field::kShape) {
      if (v > (uint64_t{1} << 40)) return Fail(Bad("shape entry too large"));
      entry_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (depth_ == 3 && array_ == Field::kOffsets) {
      if (++offsets_ > 2) return Fail(Bad("data_offsets must be [begin, end]"));
      (offsets_ == 1 ? entry_.begin : entry_.end) = v;
      return true;
    }
    return Other();
  }

  bool Open(bool object) {
    if (depth_ == 3) {
      absl::Status s = Misplaced();
      return Fail(s.ok() ? Bad("nested deeper than a safetensors header (3 levels)")
                         : std::move(s));
    }
    const bool expected =
        depth_ < 2 ? object : !in_metadata_ && (field_ == Field::kOther || !object);
    if (!expected || (depth_ == 2 && field_ == Field::kDtype)) {
      absl::Status s = Misplaced();
      return Fail(s.ok() ? absl::InvalidArgumentError("header is not a JSON object")
                         : std::move(s));
    }
    if (depth_ == 1) {  // an entry
      in_metadata_ = name_ == "__metadata__";
      entry_ = StTensorInfo();
      entry_.name = name_;
      has_dtype_ = has_shape_ = false;
      offsets_ = -1;
    } else if (depth_ == 2) {  // a field's array (or an unknown field's value)
      array_ = field_;
      if (field_ == Field::kShape) {
        entry_.shape.clear();
        has_shape_ = true;
      } else if (field_ == Field::kOffsets) {
        offsets_ = 0;
      }
    }
    ++depth_;
    return true;
  }

  bool Close() {
    if (--depth_ == 2) array_ = Field::kOther;
    if (depth_ == 1) in_metadata_ = false;
    return true;
  }

  // The entry just closed: every field present, offsets inside the buffer, its bytes those
  // of its shape and dtype.
  absl::Status CheckEntry() const {
    if (!has_dtype_) return Bad("missing or non-string dtype");
    if (!has_shape_) return Bad("missing or non-array shape");
    if (offsets_ != 2) return Bad("data_offsets must be [begin, end]");
    if (entry_.end < entry_.begin) return Bad("data_offsets end before begin");
    if (entry_.end > buffer_size_) {
      return Bad(absl::StrCat("data_offsets [", entry_.begin, ", ", entry_.end,
                              ") extend past the end of the file (data buffer is ", buffer_size_,
                              " bytes)"));
    }
    // numel * itemsize, overflow-checked: the running product (as numel() forms it, left
    // to right) stays below 2^63, so numel() and every byte count of the tensor fit int64.
    unsigned __int128 bytes = StDtypeSize(entry_.dtype);
    for (int64_t d : entry_.shape) {
      bytes *= static_cast<uint64_t>(d);
      if (bytes > static_cast<unsigned __int128>(INT64_MAX)) {
        return Bad("shape has too many elements");
      }
    }
    if (bytes != entry_.end - entry_.begin) {
      return Bad(absl::StrCat("shape and dtype imply ", static_cast<uint64_t>(bytes),
                              " bytes but data_offsets span ", entry_.end - entry_.begin));
    }
    return absl::OkStatus();
  }

  // Constant after construction.
  const uint64_t buffer_size_;
  std::map<std::string, std::string>* const metadata_;

  int depth_ = 0;                // containers open
  std::string name_;             // the entry's key (level 1)
  std::string key_;              // the __metadata__ key whose value comes next
  bool in_metadata_ = false;     // the entry open is __metadata__
  Field field_ = Field::kOther;  // the field whose value comes next (level 2)
  Field array_ = Field::kOther;  // the field whose array is open (level 3)
  StTensorInfo entry_;           // the entry open
  bool has_dtype_ = false, has_shape_ = false;
  int offsets_ = -1;  // data_offsets read; -1: no data_offsets array
  std::set<std::string> names_;
  std::vector<StTensorInfo> entries_;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<std::vector<StTensorInfo>> ParseSafetensorsHeader(
    absl::string_view header, uint64_t buffer_size, std::map<std::string, std::string>* metadata) {
  HeaderReader reader(buffer_size, metadata);
  const bool parsed = json::sax_parse(header.begin(), header.end(), &reader);
  LF_ASSIGN_OR_RETURN(std::vector<StTensorInfo> out, reader.Result(parsed));
  std::vector<const StTensorInfo*> by_offset;
  for (const auto& t : out) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const StTensorInfo* a, const StTensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  for (const StTensorInfo* t : by_offset) {
    if (t->begin != cursor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor \"", t->name, "\": data_offsets begin at ", t->begin, " but the previous tensor ends at ",
          cursor, " (data must be contiguous without gaps or overlap)"));
    }
    cursor = t->end;
  }
  if (cursor != buffer_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors cover ", cursor, " bytes but the data buffer holds ", buffer_size,
                     " bytes (trailing or missing data)"));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseSafetensorsIndex(const std::string& text,
                                                                          const std::string& source) {
  absl::StatusOr<json> parsed = ParseBoundedJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  }
  const json& j = *parsed;
  auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (!j.is_object() || wm == j.end() || !wm->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a safetensors index (needs a \"weight_map\" object)"));
  }
  std::map<std::string, std::string> weight_map;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": weight_map entry \"", it.key(), "\" is not a file name"));
    }
    const std::string& file = it.value().get_ref<const std::string&>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return absl::InvalidArgumentError(absl::StrCat(source, ": weight_map entry \"", it.key(),
                                                     "\" names a bad file \"", file, "\""));
    }
    weight_map[it.key()] = file;
  }
  return weight_map;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  // O_NONBLOCK: a FIFO put where a file belongs is refused below instead of waited on.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot stat"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto err = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": invalid safetensors: ", why));
  };
  if (size < 8) {
    ::close(fd);
    return err(absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_size_ = size;
  f->map_ = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (f->map_ == MAP_FAILED) {
    f->map_ = nullptr;
    return absl::InternalError(absl::StrCat(path, ": mmap failed"));
  }
  const uint8_t* base = static_cast<const uint8_t*>(f->map_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];
  if (n > kMaxSafetensorsHeader) {
    return err(absl::StrCat("header length ", n, " exceeds the ",
                            FormatBytes(static_cast<int64_t>(kMaxSafetensorsHeader)),
                            " a safetensors header may hold"));
  }
  if (n > size - 8) {
    return err(absl::StrCat("header length ", n, " exceeds the file size ", size));
  }
  const absl::string_view header(reinterpret_cast<const char*>(base + 8), n);
  auto infos = ParseSafetensorsHeader(header, size - 8 - n, &f->metadata_);
  if (!infos.ok()) return err(infos.status().message());
  f->data_ = base + 8 + n;
  for (auto& t : *infos) f->tensors_.emplace(t.name, std::move(t));
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const StTensorInfo* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::string> SafetensorsWriter::Prefix(const std::vector<Entry>& entries,
                                                      const std::map<std::string, std::string>& metadata,
                                                      uint64_t* data_bytes) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Entry& e : entries) {
    if (header.contains(e.name)) return absl::InvalidArgumentError(absl::StrCat("duplicate tensor \"", e.name, "\""));
    uint64_t bytes = StDtypeSize(e.dtype);
    for (int64_t d : e.shape) bytes *= static_cast<uint64_t>(d);
    header[e.name] = {{"dtype", StDtypeName(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  *data_bytes = offset;
  return prefix + text;
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Open(
    const std::string& path, const std::vector<Entry>& entries,
    const std::map<std::string, std::string>& metadata) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  absl::StatusOr<std::string> prefix = Prefix(entries, metadata, &w->expected_);
  if (!prefix.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", prefix.status().message()));
  w->path_ = path;
  LF_ASSIGN_OR_RETURN(w->file_, DirectFileWriter::Create(path));
  LF_RETURN_IF_ERROR(w->file_->Append(prefix->data(), prefix->size()));
  return w;
}

SafetensorsWriter::~SafetensorsWriter() = default;

absl::Status SafetensorsWriter::Append(const void* data, size_t nbytes) {
  LF_RETURN_IF_ERROR(file_->Append(data, nbytes));
  written_ += nbytes;
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Finish() {
  if (written_ != expected_) {
    return absl::InternalError(absl::StrCat(path_, ": wrote ", written_, " data bytes, header declares ",
                                            expected_));
  }
  return file_->Finish();
}

}  // namespace llamafleet::trainer
