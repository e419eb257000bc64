#include "server/tokenizer_vocab.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/dir_fd.h"
#include "common/safe_open.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/path_resolution.h"

namespace llamafleet {
namespace {

using json = nlohmann::json;

// Special tokens the trainer appends to a tiktoken vocabulary (tiktoken_tokenizer.cc).
constexpr int64_t kTiktokenSpecialTokens = 256;

// Walks a tokenizer.json without building it, keeping the largest id of model.vocab's
// values and of added_tokens[*].id.
class VocabIds : public nlohmann::json_sax<json> {
 public:
  int64_t limit() const { return limit_; }

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t v) override { return Id(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return Id(static_cast<int64_t>(std::min<number_unsigned_t>(v, INT64_MAX)));
  }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return Open(true); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(false); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    // Only the first three levels' keys matter.
    if (stack_.size() <= 3) stack_.back().key = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  struct Level {
    bool object;
    std::string key;
  };

  bool Open(bool object) {
    stack_.push_back(Level{object, ""});
    return true;
  }
  bool Close() {
    if (!stack_.empty()) stack_.pop_back();
    return true;
  }
  // A number inside the third level: {"model": {"vocab": {piece: id}}} or
  // {"added_tokens": [{"id": id}]}.
  bool Id(int64_t v) {
    if (stack_.size() != 3 || !stack_[0].object || v < 0) return true;
    const bool vocab = stack_[0].key == "model" && stack_[1].object && stack_[1].key == "vocab" &&
                       stack_[2].object;
    const bool added = stack_[0].key == "added_tokens" && !stack_[1].object && stack_[2].object &&
                       stack_[2].key == "id";
    if (vocab || added) limit_ = std::max(limit_, v + 1);
    return true;
  }

  std::vector<Level> stack_;
  int64_t limit_ = 0;
};

// A tiktoken ranks file, as the trainer recognises one: its first line is
// "base64-token rank".
bool LooksLikeTiktoken(absl::string_view bytes) {
  absl::string_view first = bytes.substr(0, bytes.find('\n'));
  absl::ConsumeSuffix(&first, "\r");
  const size_t space = first.find(' ');
  if (space == 0 || space == absl::string_view::npos) return false;
  const absl::string_view token = first.substr(0, space), rank = first.substr(space + 1);
  return token.find_first_not_of(
             "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") ==
             absl::string_view::npos &&
         !rank.empty() && rank.find_first_not_of("0123456789") == absl::string_view::npos;
}

int64_t TiktokenRanks(absl::string_view bytes) {
  int64_t ranks = 0;
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    absl::string_view line = bytes.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) ++ranks;
    bytes = nl == absl::string_view::npos ? absl::string_view() : bytes.substr(nl + 1);
  }
  return ranks;
}

std::optional<uint64_t> ReadVarint(absl::string_view bytes, size_t* pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && *pos < bytes.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(bytes[(*pos)++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  return std::nullopt;
}

// The top-level field-1 entries (ModelProto.pieces) of a protobuf message; nullopt when
// the bytes are not a well-formed message.
std::optional<int64_t> SentencePiecePieces(absl::string_view bytes) {
  int64_t pieces = 0;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const std::optional<uint64_t> tag = ReadVarint(bytes, &pos);
    if (!tag.has_value() || (*tag >> 3) == 0) return std::nullopt;
    size_t skip = 0;
    switch (*tag & 7) {
      case 0:
        if (!ReadVarint(bytes, &pos).has_value()) return std::nullopt;
        break;
      case 1:
        skip = 8;
        break;
      case 5:
        skip = 4;
        break;
      case 2: {
        const std::optional<uint64_t> n = ReadVarint(bytes, &pos);
        if (!n.has_value()) return std::nullopt;
        if (*n > bytes.size()) return std::nullopt;
        skip = static_cast<size_t>(*n);
        if ((*tag >> 3) == 1) ++pieces;
        break;
      }
      default:
        return std::nullopt;
    }
    if (skip > bytes.size() - pos) return std::nullopt;
    pos += skip;
  }
  return pieces;
}

}  // namespace

absl::StatusOr<int64_t> TokenizerVocabSize(absl::string_view bytes, absl::string_view shown) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(shown, ": ", why));
  };
  size_t i = bytes.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;  // a UTF-8 byte-order mark
  while (i < bytes.size() && std::isspace(static_cast<unsigned char>(bytes[i]))) ++i;
  if (i < bytes.size() && bytes[i] == '{') {
    VocabIds ids;
    if (!json::sax_parse(bytes.substr(i), &ids)) return bad("not valid JSON");
    if (ids.limit() == 0) return bad("a tokenizer.json with no ids in model.vocab or added_tokens");
    return ids.limit();
  }
  if (LooksLikeTiktoken(bytes)) return TiktokenRanks(bytes) + kTiktokenSpecialTokens;
  const std::optional<int64_t> pieces = SentencePiecePieces(bytes);
  if (!pieces.has_value() || *pieces == 0) {
    return bad("not a tokenizer.json, a tiktoken ranks file or a SentencePiece model");
  }
  return *pieces;
}

absl::StatusOr<int64_t> ReadTokenizerVocabSize(const std::vector<std::string>& roots,
                                               const std::string& path) {
  const std::optional<std::string> resolved = ResolveBelowRoot(roots, path);
  if (!resolved.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(path, " cannot be reached here"));
  }
  const size_t slash = resolved->rfind('/');
  LF_ASSIGN_OR_RETURN(
      UniqueFd dir,
      OpenDirInRoots(roots, slash == 0 ? "/" : resolved->substr(0, slash), std::nullopt));
  LF_ASSIGN_OR_RETURN(
      const std::string bytes,
      ReadRegularFile(dir.get(), resolved->substr(slash + 1), kMaxTokenizerVocabFileBytes, path));
  return TokenizerVocabSize(bytes, path);
}

}  // namespace llamafleet
