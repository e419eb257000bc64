#include "safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<std::vector<StTensorInfo>> ParseSafetensorsHeader(
    const std::string& header, uint64_t buffer_size, std::map<std::string, std::string>* metadata) {
  // nlohmann keeps the last of duplicate keys; catch duplicates at the top level while
  // parsing.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json j = json::parse(header, cb, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("header is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("header is not a JSON object");
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate tensor \"", duplicate, "\""));
  }
  std::vector<StTensorInfo> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return absl::InvalidArgumentError("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("__metadata__ value for \"", m.key(), "\" is not a string"));
        }
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": ", why));
    };
    if (!v.is_object()) return bad("entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return bad("missing or non-string dtype");
    if (sh == v.end() || !sh->is_array()) return bad("missing or non-array shape");
    if (off == v.end() || !off->is_array() || off->size() != 2) {
      return bad("data_offsets must be [begin, end]");
    }
    StTensorInfo info;
    info.name = name;
    auto dtype = ParseStDtype(dt->get<std::string>());
    if (!dtype.ok()) return bad(dtype.status().message());
    info.dtype = *dtype;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
        return bad("shape entries must be non-negative integers");
      }
      if (d.get<uint64_t>() > (1ull << 40)) return bad("shape entry too large");
      info.shape.push_back(d.get<int64_t>());
    }
    for (const json& o : *off) {
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0)) {
        return bad("data_offsets must be non-negative integers");
      }
    }
    info.begin = (*off)[0].get<uint64_t>();
    info.end = (*off)[1].get<uint64_t>();
    if (info.end < info.begin) return bad("data_offsets end before begin");
    if (info.end > buffer_size) {
      return bad(absl::StrCat("data_offsets [", info.begin, ", ", info.end,
                              ") extend past the end of the file (data buffer is ", buffer_size,
                              " bytes)"));
    }
    // numel * itemsize, overflow-checked: the running product (as numel() forms it, left
    // to right) stays below 2^63, so numel() and every byte count of the tensor fit int64.
    unsigned __int128 bytes = StDtypeSize(info.dtype);
    for (int64_t d : info.shape) {
      bytes *= static_cast<uint64_t>(d);
      if (bytes > static_cast<unsigned __int128>(INT64_MAX)) return bad("shape has too many elements");
    }
    if (bytes != info.end - info.begin) {
      return bad(absl::StrCat("shape and dtype imply ", static_cast<uint64_t>(bytes),
                              " bytes but data_offsets span ", info.end - info.begin));
    }
    out.push_back(std::move(info));
  }
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
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
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
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": cannot stat"));
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
    return err(absl::StrCat("header length ", n, " exceeds the 100 MB limit"));
  }
  if (n > size - 8) {
    return err(absl::StrCat("header length ", n, " exceeds the file size ", size));
  }
  std::string header(reinterpret_cast<const char*>(base + 8), n);
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
