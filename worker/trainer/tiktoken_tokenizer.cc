#include "tiktoken_tokenizer.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "byte_pair_encoder.h"
#include "model_file.h"
#include "pretokenizer_regex.h"
#include "util.h"

namespace llamafleet::trainer {

namespace {

constexpr int kSpecialTokens = 256;

// Meta's llama3 tokenizer.py (Llama 3.1 and later): the named specials, then
// <|reserved_special_token_N|> for the rest of the 256.
std::string SpecialName(int i) {
  static const char* const kNamed[] = {"<|begin_of_text|>",
                                       "<|end_of_text|>",
                                       "<|reserved_special_token_0|>",
                                       "<|reserved_special_token_1|>",
                                       "<|finetune_right_pad_id|>",
                                       "<|step_id|>",
                                       "<|start_header_id|>",
                                       "<|end_header_id|>",
                                       "<|eom_id|>",
                                       "<|eot_id|>",
                                       "<|python_tag|>"};
  constexpr int kNamedCount = sizeof kNamed / sizeof kNamed[0];
  if (i < kNamedCount) return kNamed[i];
  return absl::StrCat("<|reserved_special_token_", i - kNamedCount + 2, "|>");
}

class TiktokenTokenizer final : public Tokenizer {
 public:
  TiktokenTokenizer() : bpe_(BytePairEncoder::Rule::kTokenRank, /*whole_piece_first=*/true) {}
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override;
  std::string Decode(absl::Span<const int32_t> ids) const override;
  absl::string_view kind() const override { return "tiktoken"; }
  absl::Status Parse(const std::string& path, const std::string& bytes);

 private:
  BytePairEncoder bpe_;
  std::unique_ptr<PretokenizerRegex> regex_;
  int32_t base_ = 0;  // ranks; the specials follow
};

absl::Status TiktokenTokenizer::Parse(const std::string& path, const std::string& bytes) {
  // Ranks are below the number of lines: what a few bytes can make the tables allocate.
  const int64_t lines = std::count(bytes.begin(), bytes.end(), '\n') + 1;
  if (lines - 1 > kMaxTokenizerVocab) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": more than ", kMaxTokenizerVocab,
                                                   " lines; a tiktoken file holds at most ",
                                                   kMaxTokenizerVocab, " ranks"));
  }
  absl::string_view rest = bytes;
  std::string token;
  for (int64_t line = 1; !rest.empty(); ++line) {
    const size_t nl = rest.find('\n');
    absl::string_view l = rest.substr(0, nl);
    rest = nl == absl::string_view::npos ? absl::string_view() : rest.substr(nl + 1);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", why));
    };
    const size_t sp = l.find(' ');
    int64_t rank = -1;
    if (sp == absl::string_view::npos || !absl::SimpleAtoi(l.substr(sp + 1), &rank)) {
      return bad("expected \"base64-token rank\"");
    }
    if (rank < 0 || rank >= lines) {
      return bad(absl::StrCat("rank ", rank, " out of range: the file has ", lines, " lines"));
    }
    if (!absl::Base64Unescape(l.substr(0, sp), &token) || token.empty()) {
      return bad(absl::StrCat("malformed base64 \"", l.substr(0, std::min<size_t>(sp, 40)), "\""));
    }
    if (absl::Status s = bpe_.AddToken(token, static_cast<int32_t>(rank)); !s.ok())
      return bad(s.message());
  }
  base_ = static_cast<int32_t>(bpe_.size());
  if (base_ == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no ranks"));
  if (bpe_.id_limit() != base_) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", base_, " ranks but the largest is ",
                                                   bpe_.id_limit() - 1, "; expected 0..",
                                                   base_ - 1));
  }
  bpe_.Finish(-1);
  LF_ASSIGN_OR_RETURN(regex_, PretokenizerRegex::Compile(kLlama3Pattern));
  vocab_ = base_ + kSpecialTokens;
  bos_ = base_;
  eos_ = base_ + 1;
  SetStopIds({base_ + 8, base_ + 9});  // <|eom_id|>, <|eot_id|>
  std::vector<std::pair<std::string, int32_t>> specials;
  for (int i = 0; i < kSpecialTokens; ++i) specials.emplace_back(SpecialName(i), base_ + i);
  SetTemplateTokens(std::move(specials));
  path_ = path;
  Sha256 digest;
  digest.Update(bytes.data(), bytes.size());
  sha256_ = digest.Hex();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> TiktokenTokenizer::Encode(absl::string_view text) const {
  if (const int64_t bad = Utf8Error(text); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("text is not UTF-8 at byte ", bad));
  }
  std::vector<absl::string_view> pieces;
  LF_RETURN_IF_ERROR(regex_->Split(text, &pieces));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  for (absl::string_view p : pieces) bpe_.EncodePiece(p, &ids);
  return ids;
}

std::string TiktokenTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (const std::string* b = bpe_.TokenBytes(id)) {
      out += *b;
    } else if (id >= base_ && id < vocab_) {
      out += SpecialName(id - base_);
    }
  }
  return out;
}

}  // namespace

bool LooksLikeTiktoken(const std::string& bytes) {
  size_t i = 0;
  while (i < bytes.size() && (std::isalnum(static_cast<unsigned char>(bytes[i])) ||
                              bytes[i] == '+' || bytes[i] == '/' || bytes[i] == '=')) {
    ++i;
  }
  if (i == 0 || i >= bytes.size() || bytes[i] != ' ') return false;
  const size_t d = ++i;
  while (i < bytes.size() && std::isdigit(static_cast<unsigned char>(bytes[i]))) ++i;
  return i > d && (i == bytes.size() || bytes[i] == '\n' || bytes[i] == '\r');
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTiktokenTokenizer(const std::string& path,
                                                                 const std::string& bytes) {
  auto t = std::make_unique<TiktokenTokenizer>();
  LF_RETURN_IF_ERROR(t->Parse(path, bytes));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace llamafleet::trainer
