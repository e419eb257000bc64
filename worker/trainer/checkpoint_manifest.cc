#include "checkpoint_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/safe_open.h"
#include "model_file.h"
#include "util.h"

namespace llamafleet::trainer {

using nlohmann::json;

namespace {

// Reads one field of `object` into *out, leaving the default when the key is absent;
// `what` is set to why the field is malformed.
class FieldReader {
 public:
  explicit FieldReader(const json& object) : object_(object) {}

  bool Int(const char* key, int64_t min, int64_t max, int64_t* out) {
    const json* v = Find(key);
    if (v == nullptr) return true;
    // nlohmann reads every non-negative integer as unsigned: compare in that type first.
    const bool in_range = v->is_number_unsigned()
                              ? v->get<uint64_t>() <= static_cast<uint64_t>(max) &&
                                    (min <= 0 || v->get<uint64_t>() >= static_cast<uint64_t>(min))
                              : v->is_number_integer() && v->get<int64_t>() >= min && v->get<int64_t>() <= max;
    if (!in_range) {
      return Fail(key, absl::StrCat("must be an integer in [", min, ", ", max, "]"));
    }
    *out = v->get<int64_t>();
    return true;
  }
  bool Int(const char* key, int min, int max, int* out) {
    int64_t wide = *out;
    if (!Int(key, static_cast<int64_t>(min), static_cast<int64_t>(max), &wide)) return false;
    *out = static_cast<int>(wide);
    return true;
  }
  bool Unsigned(const char* key, uint64_t* out) {
    const json* v = Find(key);
    if (v == nullptr) return true;
    if (!v->is_number_unsigned()) return Fail(key, "must be a non-negative integer");
    *out = v->get<uint64_t>();
    return true;
  }
  // null reads as NaN: the writer dumps a NaN as null.
  bool Number(const char* key, double* out) {
    const json* v = Find(key);
    if (v == nullptr) return true;
    if (v->is_null()) {
      *out = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (!v->is_number()) return Fail(key, "must be a number");
    *out = v->get<double>();
    return true;
  }
  bool String(const char* key, std::string* out) {
    const json* v = Find(key);
    if (v == nullptr) return true;
    if (!v->is_string()) return Fail(key, "must be a string");
    *out = v->get<std::string>();
    return true;
  }
  bool Required(const char* key) {
    if (Find(key) == nullptr) return Fail(key, "is missing");
    return true;
  }
  const std::string& what() const { return what_; }

 private:
  const json* Find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  bool Fail(const char* key, absl::string_view why) {
    what_ = absl::StrCat(key, " ", why);
    return false;
  }
  const json& object_;
  std::string what_;
};

}  // namespace

absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(const std::string& text,
                                                           const std::string& source) {
  auto malformed = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(source, ": malformed manifest: ", what));
  };
  CheckpointManifest m;
  absl::StatusOr<json> parsed = ParseBoundedJson(text);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat(source, ": ", parsed.status().message()));
  }
  m.json = std::move(*parsed);
  const json& j = m.json;
  auto format = j.is_object() ? j.find("format") : j.end();
  if (!j.is_object() || format == j.end() || *format != kShardedCheckpointFormat || !j.contains("files") ||
      !j.contains("units")) {
    return absl::DataLossError(absl::StrCat(source, ": not a ", kShardedCheckpointFormat, " manifest"));
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  FieldReader r(j);
  if (!r.Int("step", 0, kMax, &m.step) || !r.Int("epoch", 0, kMax, &m.epoch) || !r.Number("loss", &m.loss) ||
      !r.Unsigned("seed", &m.seed) || !r.Int("tokens_seen", 0, kMax, &m.tokens_seen) ||
      !r.Int("rows_seen", 0, kMax, &m.rows_seen) || !r.Int("global_batch", 0, kMax, &m.global_batch) ||
      !r.Int("world_size", 1, kMaxManifestWorld, &m.world_size) || !r.String("strategy", &m.strategy) ||
      !r.Int("shard_group_size", 1, kMaxManifestWorld, &m.shard_group_size) ||
      !r.Int("tensor_parallel", 1, kMaxManifestTensorParallel, &m.tensor_parallel) ||
      !r.Int("optimizer_steps", 0, kMax, &m.optimizer_steps) || !r.Number("loss_scale", &m.loss_scale) ||
      !r.Number("eval_loss", &m.eval_loss) || !r.Number("best_eval_loss", &m.best_eval_loss) ||
      !r.Int("best_eval_step", 0, kMax, &m.best_eval_step) ||
      !r.Int("evals_without_improvement", 0, kMax, &m.evals_without_improvement)) {
    return malformed(r.what());
  }
  if (static_cast<int64_t>(m.shard_group_size) * m.tensor_parallel > kMaxManifestWorld) {
    return malformed(absl::StrCat("shard_group_size ", m.shard_group_size, " x tensor_parallel ",
                                  m.tensor_parallel, " shard files is more than ", kMaxManifestWorld));
  }
  const json& files = j.at("files");
  const json& units = j.at("units");
  if (!files.is_array()) return malformed("files must be a list");
  if (!units.is_array()) return malformed("units must be a list");
  for (size_t i = 0; i < files.size(); ++i) {
    if (!files[i].is_object()) return malformed(absl::StrCat("files[", i, "] must be an object"));
    FieldReader f(files[i]);
    CheckpointManifest::File& file = m.files.emplace_back();
    if (!f.Required("name") || !f.String("name", &file.name) || !f.Required("bytes") ||
        !f.Int("bytes", 0, kMax, &file.bytes)) {
      return malformed(absl::StrCat("files[", i, "].", f.what()));
    }
    if (file.name.empty() || file.name.find('/') != std::string::npos ||
        file.name.find("..") != std::string::npos) {
      return absl::DataLossError(absl::StrCat(source, ": bad file name \"", file.name, "\""));
    }
    file.checksum_kind = files[i].contains("crc32c") ? "crc32c" : "sha256";
    if (!files[i].contains(file.checksum_kind)) {
      return malformed(absl::StrCat("files[", i, "] has neither crc32c nor sha256"));
    }
    if (!f.String(file.checksum_kind.c_str(), &file.checksum)) return malformed(absl::StrCat("files[", i, "].", f.what()));
    const size_t digits = file.checksum_kind == "crc32c" ? 8 : 64;
    if (file.checksum.size() != digits ||
        file.checksum.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return malformed(absl::StrCat("files[", i, "].", file.checksum_kind, " must be ", digits,
                                    " lowercase hex digits"));
    }
  }
  for (size_t i = 0; i < units.size(); ++i) {
    if (!units[i].is_object()) return malformed(absl::StrCat("units[", i, "] must be an object"));
    FieldReader u(units[i]);
    CheckpointManifest::Unit& unit = m.units.emplace_back();
    if (!u.String("name", &unit.name) || !u.Int("numel", -1, kMax, &unit.numel) || !u.Required("padded") ||
        !u.Int("padded", 0, kMax, &unit.padded)) {
      return malformed(absl::StrCat("units[", i, "].", u.what()));
    }
  }
  return m;
}

std::string Crc32cHex(uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return hex;
}

absl::StatusOr<std::string> FileChecksum(const std::string& path, const std::string& kind) {
  if (kind != "crc32c" && kind != "sha256") return absl::InvalidArgumentError(absl::StrCat("no checksum ", kind));
  // Links are followed (a resumed checkpoint may be reached through one inside the roots);
  // a FIFO or device in a checkpoint's place is refused before it is opened.
  absl::StatusOr<UniqueFd> fd = OpenRegularFile(AT_FDCWD, path, path, LastLink::kFollow);
  if (!fd.ok()) return fd.status();
  uint32_t crc = 0;
  Sha256 sha;
  std::vector<char> buffer(size_t{4} << 20);
  while (true) {
    const ssize_t n = ::read(fd->get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat(path, ": read error: ", std::strerror(errno)));
    }
    if (n == 0) break;
    if (kind == "crc32c") {
      crc = Crc32cExtend(crc, buffer.data(), static_cast<size_t>(n));
    } else {
      sha.Update(buffer.data(), static_cast<size_t>(n));
    }
  }
  return kind == "crc32c" ? Crc32cHex(crc) : sha.Hex();
}

absl::Status CheckFileChecksum(const std::string& path, const CheckpointManifest::File& file) {
  LF_ASSIGN_OR_RETURN(const std::string got, FileChecksum(path, file.checksum_kind));
  if (got != file.checksum) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", file.checksum_kind, " does not match the manifest (damaged checkpoint)"));
  }
  return absl::OkStatus();
}

}  // namespace llamafleet::trainer
