#include "hf_bpe_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "byte_pair_encoder.h"
#include "model_file.h"
#include "nlohmann/json.hpp"
#include "pretokenizer_regex.h"
#include "util.h"

namespace llamafleet::trainer {

namespace {

using nlohmann::json;

// GPT-2's pattern, which ByteLevel splits with when use_regex is true.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's byte-to-unicode map, inverted: code point -> byte (-1: not a byte's).
std::vector<int> UnicodeToByte() {
  std::vector<int> inv(512, -1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    inv[printable ? b : 256 + n++] = b;
  }
  return inv;
}

// The bytes a byte-level vocabulary string stands for; false when it holds a character
// outside the map.
bool ByteLevelDecode(const std::string& s, const std::vector<int>& inv, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c, i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu), i += 2;
    } else {
      return false;  // every mapped code point is below U+0200
    }
    if (cp >= inv.size() || inv[cp] < 0) return false;
    out->push_back(static_cast<char>(inv[cp]));
  }
  return !out->empty();
}

struct Step {
  std::unique_ptr<PretokenizerRegex> regex;  // Split, or ByteLevel's GPT-2 split (may be null)
  bool byte_level = false;
  bool add_prefix_space = false;
};

struct AddedToken {
  std::string content;
  int32_t id;
};

class HfBpeTokenizer final : public Tokenizer {
 public:
  HfBpeTokenizer(bool ignore_merges) : bpe_(BytePairEncoder::Rule::kMergeList, ignore_merges) {}
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const override;
  std::string Decode(absl::Span<const int32_t> ids) const override;
  absl::string_view kind() const override { return "tokenizer.json"; }

  // Ids must be below `id_limit` (the number of vocabulary and added entries), which
  // bounds what a few bytes of JSON can make the tables allocate.
  absl::Status ParseModel(const json& model, int64_t id_limit);
  // normalizer: null, NFC, NFD, NFKC or NFKD (Unicode normalization of the text between
  // added tokens, before pre-tokenization), or a Sequence of at most one of them.
  absl::Status ParseNormalizer(const json& n);
  absl::Status ParsePreTokenizer(const json& p);
  absl::Status ParseAddedTokens(const json& added, int64_t id_limit);
  absl::Status ParsePostProcessor(const json& p, int64_t id_limit);
  absl::Status ReadSidecars(const std::string& dir, Sha256* digest);
  void set_identity(const std::string& path, std::string sha256) {
    path_ = path;
    sha256_ = std::move(sha256);
  }
  void set_vocab(int32_t v) { vocab_ = v; }
  int32_t IdOf(const std::string& content) const;
  const std::vector<AddedToken>& added() const { return added_; }
  const BytePairEncoder& bpe() const { return bpe_; }
  bool byte_level() const {
    return std::any_of(steps_.begin(), steps_.end(), [](const Step& s) { return s.byte_level; });
  }

 private:
  absl::Status EncodeSegment(absl::string_view text, std::vector<int32_t>* ids) const;

  BytePairEncoder bpe_;
  int normalize_ = 0;  // utf8proc options of the normalizer; 0: none
  std::vector<Step> steps_;
  std::vector<AddedToken> added_;
  std::vector<const AddedToken*> in_text_;               // non-special added tokens, longest first
  std::unordered_map<int32_t, std::string> text_of_id_;  // added tokens, non-byte-level vocab
  std::unordered_map<std::string, int32_t> vocab_strings_;  // model.vocab, as written
  std::vector<int32_t> template_eos_;
  int32_t template_bos_ = -1;
};

// A member of `j` when it is of the type asked for, else `fallback` (json's value() throws
// on a member of another type; this file never lets nlohmann throw).
std::string StringOr(const json& j, const char* key, const std::string& fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
bool BoolOr(const json& j, const char* key, bool fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::Status HfBpeTokenizer::ParseModel(const json& model, int64_t id_limit) {
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>().empty()) &&
        !(it->is_number() && it->get<double>() == 0)) {
      return Bad(absl::StrCat("model.", key), "is not supported (only null)");
    }
  }
  if (auto it = model.find("byte_fallback");
      it != model.end() && it->is_boolean() && it->get<bool>()) {
    return Bad("model.byte_fallback", "is not supported (byte-level BPE needs none)");
  }
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) return Bad("model.vocab", "must be an object");
  const std::vector<int> inv = UnicodeToByte();
  std::string bytes;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() >= id_limit) {
      return Bad(absl::StrCat("model.vocab[\"", it.key(), "\"]"),
                 absl::StrCat("must be an id in [0, ", id_limit,
                              "): the vocabulary and added tokens number ", id_limit));
    }
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    vocab_strings_[it.key()] = id;
    if (!ByteLevelDecode(it.key(), inv, &bytes)) {
      text_of_id_[id] = it.key();  // never produced from text; decodes as written
      continue;
    }
    if (absl::Status s = bpe_.AddToken(bytes, id); !s.ok()) {
      return Bad(absl::StrCat("model.vocab[\"", it.key(), "\"]"), s.message());
    }
  }
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) return Bad("model.merges", "must be an array");
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string field = absl::StrCat("model.merges[", i, "]");
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return Bad(field, "must be two tokens separated by one space");
      }
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      return Bad(field, "must be \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = vocab_strings_.find(a), ib = vocab_strings_.find(b);
    if (ia == vocab_strings_.end() || ib == vocab_strings_.end()) {
      return Bad(field, absl::StrCat("\"", ia == vocab_strings_.end() ? a : b,
                                     "\" is not in model.vocab"));
    }
    if (absl::Status s = bpe_.AddMerge(ia->second, ib->second); !s.ok()) {
      return Bad(field, absl::StrCat("\"", a, "\" + \"", b, "\": ", s.message()));
    }
  }
  int32_t unk = -1;
  if (auto it = model.find("unk_token"); it != model.end() && it->is_string()) {
    auto u = vocab_strings_.find(it->get<std::string>());
    if (u == vocab_strings_.end()) return Bad("model.unk_token", "is not in model.vocab");
    unk = u->second;
  }
  bpe_.Finish(unk);
  return absl::OkStatus();
}

// A literal pattern for Split's {"String": s}.
std::string QuoteRegex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c)))
      out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

absl::Status HfBpeTokenizer::ParseNormalizer(const json& n) {
  if (n.is_null()) return absl::OkStatus();
  const json* form = &n;
  if (StringOr(n, "type", "") == "Sequence") {
    auto list = n.find("normalizers");
    if (list == n.end() || !list->is_array() || list->size() > 1) {
      return Bad("normalizer", "is a Sequence of more than one normalizer (only one is supported)");
    }
    if (list->empty()) return absl::OkStatus();
    form = &(*list)[0];
  }
  const std::string type = StringOr(*form, "type", "");
  if (type == "NFC") {
    normalize_ = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  } else if (type == "NFD") {
    normalize_ = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
  } else if (type == "NFKC") {
    normalize_ = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  } else if (type == "NFKD") {
    normalize_ = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  } else {
    return Bad("normalizer",
               absl::StrCat("\"", type, "\" is not supported (null, NFC, NFD, NFKC, NFKD)"));
  }
  return absl::OkStatus();
}

absl::Status HfBpeTokenizer::ParsePreTokenizer(const json& p) {
  if (!p.is_object())
    return Bad("pre_tokenizer", "must be an object (byte-level BPE needs ByteLevel)");
  const std::string type = StringOr(p, "type", "");
  if (type == "Sequence") {
    auto list = p.find("pretokenizers");
    if (list == p.end() || !list->is_array())
      return Bad("pre_tokenizer.pretokenizers", "must be an array");
    for (const json& q : *list) LF_RETURN_IF_ERROR(ParsePreTokenizer(q));
    return absl::OkStatus();
  }
  Step step;
  if (type == "Split") {
    if (StringOr(p, "behavior", "") != "Isolated")
      return Bad("pre_tokenizer Split.behavior", "only Isolated is supported");
    if (BoolOr(p, "invert", false))
      return Bad("pre_tokenizer Split.invert", "only false is supported");
    auto pat = p.find("pattern");
    std::string pattern;
    if (pat != p.end() && pat->is_object() && pat->contains("Regex") &&
        (*pat)["Regex"].is_string()) {
      pattern = (*pat)["Regex"].get<std::string>();
    } else if (pat != p.end() && pat->is_object() && pat->contains("String") &&
               (*pat)["String"].is_string()) {
      pattern = QuoteRegex((*pat)["String"].get<std::string>());
    } else {
      return Bad("pre_tokenizer Split.pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
    }
    auto re = PretokenizerRegex::Compile(pattern);
    if (!re.ok()) return Bad("pre_tokenizer Split.pattern", re.status().message());
    step.regex = *std::move(re);
  } else if (type == "ByteLevel") {
    step.byte_level = true;
    step.add_prefix_space = BoolOr(p, "add_prefix_space", false);
    if (BoolOr(p, "use_regex", true)) {
      auto re = PretokenizerRegex::Compile(kGpt2Pattern);
      if (!re.ok()) return re.status();
      step.regex = *std::move(re);
    }
  } else {
    return Bad("pre_tokenizer.type",
               absl::StrCat("\"", type, "\" is not supported (Split, ByteLevel, Sequence)"));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status HfBpeTokenizer::ParseAddedTokens(const json& added, int64_t id_limit) {
  if (added.is_null()) return absl::OkStatus();
  if (!added.is_array()) return Bad("added_tokens", "must be an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return Bad(field, "must have an integer id and a string content");
    }
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id >= id_limit) {
      return Bad(field, absl::StrCat("id must be in [0, ", id_limit,
                                     "): the vocabulary and added tokens number ", id_limit));
    }
    AddedToken a{t["content"].get<std::string>(), static_cast<int32_t>(id)};
    if (a.content.empty()) return Bad(field, "content is empty");
    const bool special = BoolOr(t, "special", false);
    if (!special && (BoolOr(t, "lstrip", false) || BoolOr(t, "rstrip", false) ||
                     BoolOr(t, "single_word", false))) {
      return Bad(field, "lstrip, rstrip and single_word are not supported on a non-special token");
    }
    text_of_id_[a.id] = a.content;
    added_.push_back(std::move(a));
  }
  std::vector<std::pair<std::string, int32_t>> template_tokens;
  for (const AddedToken& a : added_) template_tokens.emplace_back(a.content, a.id);
  SetTemplateTokens(std::move(template_tokens));
  // added_ no longer moves: point at the tokens matched in text.
  for (size_t i = 0; i < added.size(); ++i) {
    if (!BoolOr(added[i], "special", false)) in_text_.push_back(&added_[i]);
  }
  std::stable_sort(in_text_.begin(), in_text_.end(), [](const AddedToken* a, const AddedToken* b) {
    return a->content.size() > b->content.size();
  });
  return absl::OkStatus();
}

int32_t HfBpeTokenizer::IdOf(const std::string& content) const {
  for (const AddedToken& a : added_) {
    if (a.content == content) return a.id;
  }
  auto it = vocab_strings_.find(content);
  return it == vocab_strings_.end() ? -1 : it->second;
}

absl::Status HfBpeTokenizer::ParsePostProcessor(const json& p, int64_t id_limit) {
  if (!p.is_object()) return absl::OkStatus();
  const std::string type = StringOr(p, "type", "");
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& q : p["processors"]) LF_RETURN_IF_ERROR(ParsePostProcessor(q, id_limit));
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") return absl::OkStatus();
  auto single = p.find("single");
  if (single == p.end() || !single->is_array())
    return Bad("post_processor.single", "must be an array");
  bool seen_sequence = false;
  for (const json& piece : *single) {
    if (piece.is_object() && piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") ||
        !piece["SpecialToken"].is_object()) {
      return Bad("post_processor.single", "holds something other than SpecialToken and Sequence");
    }
    const std::string name = StringOr(piece["SpecialToken"], "id", "");
    int32_t id = -1;
    const json* st = p.contains("special_tokens") ? &p["special_tokens"] : nullptr;
    if (st && st->is_object() && st->contains(name) && (*st)[name].is_object() &&
        (*st)[name].contains("ids") && (*st)[name]["ids"].is_array() &&
        (*st)[name]["ids"].size() == 1 && (*st)[name]["ids"][0].is_number_integer()) {
      const int64_t v = (*st)[name]["ids"][0].get<int64_t>();
      if (v < 0 || v >= id_limit) {
        return Bad("post_processor.special_tokens",
                   absl::StrCat("\"", name, "\" has id ", v, ", not a token"));
      }
      id = static_cast<int32_t>(v);
    } else {
      return Bad("post_processor.special_tokens",
                 absl::StrCat("\"", name, "\" needs exactly one id"));
    }
    if (!seen_sequence && template_bos_ < 0) template_bos_ = id;
    if (seen_sequence) template_eos_.push_back(id);
  }
  return absl::OkStatus();
}

absl::Status HfBpeTokenizer::ReadSidecars(const std::string& dir, Sha256* digest) {
  bos_ = template_bos_;
  std::vector<int32_t> stops = template_eos_;
  if (!template_eos_.empty()) eos_ = template_eos_.front();
  if (dir.empty()) {
    SetStopIds(stops);
    return absl::OkStatus();
  }
  const std::string tc = dir + "/tokenizer_config.json";
  auto bytes = ReadModelFile(tc, kMaxListingFileBytes);
  if (bytes.ok()) {
    digest->Update("\ntokenizer_config.json\n", 23);
    digest->Update(bytes->data(), bytes->size());
    auto j = ParseBoundedJson(*bytes);
    if (!j.ok() || !j->is_object())
      return absl::InvalidArgumentError(absl::StrCat(tc, ": not a JSON object"));
    auto eos = j->find("eos_token");
    if (eos != j->end() && !eos->is_null()) {
      const json c =
          eos->is_object() ? (eos->contains("content") ? (*eos)["content"] : json()) : *eos;
      if (!c.is_string())
        return absl::InvalidArgumentError(absl::StrCat(tc, ": eos_token must be a string"));
      const int32_t id = IdOf(c.get<std::string>());
      if (id < 0) {
        return absl::InvalidArgumentError(absl::StrCat(tc, ": eos_token \"", c.get<std::string>(),
                                                       "\" is not a token of the tokenizer.json"));
      }
      eos_ = id;
    }
  } else if (!absl::IsNotFound(bytes.status())) {
    return bytes.status();
  }
  const std::string gc = dir + "/generation_config.json";
  bytes = ReadModelFile(gc, kMaxConfigFileBytes);
  if (bytes.ok()) {
    digest->Update("\ngeneration_config.json\n", 24);
    digest->Update(bytes->data(), bytes->size());
    auto j = ParseBoundedJson(*bytes);
    if (!j.ok() || !j->is_object())
      return absl::InvalidArgumentError(absl::StrCat(gc, ": not a JSON object"));
    auto eos = j->find("eos_token_id");
    if (eos != j->end() && !eos->is_null()) {
      const json list = eos->is_array() ? *eos : json::array({*eos});
      for (const json& v : list) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_) {
          return absl::InvalidArgumentError(
              absl::StrCat(gc, ": eos_token_id must be token ids below ", vocab_));
        }
        stops.push_back(v.get<int32_t>());
      }
      if (eos_ < 0 && !stops.empty()) eos_ = stops.front();
    }
  } else if (!absl::IsNotFound(bytes.status())) {
    return bytes.status();
  }
  SetStopIds(stops);
  return absl::OkStatus();
}

absl::Status HfBpeTokenizer::EncodeSegment(absl::string_view text,
                                           std::vector<int32_t>* ids) const {
  std::string normalized;
  if (normalize_ != 0) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &out,
                                            static_cast<utf8proc_option_t>(normalize_));
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("text cannot be normalized: ", utf8proc_errmsg(n)));
    }
    normalized.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    text = normalized;
  }
  std::vector<absl::string_view> pieces{text}, next;
  std::deque<std::string> prefixed;  // pieces given a leading space by ByteLevel
  for (const Step& step : steps_) {
    next.clear();
    for (absl::string_view p : pieces) {
      if (step.byte_level && step.add_prefix_space && p[0] != ' ') {
        prefixed.push_back(absl::StrCat(" ", p));
        p = prefixed.back();
      }
      if (step.regex) {
        LF_RETURN_IF_ERROR(step.regex->Split(p, &next));
      } else {
        next.push_back(p);
      }
    }
    pieces.swap(next);
  }
  for (absl::string_view p : pieces) bpe_.EncodePiece(p, ids);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> HfBpeTokenizer::Encode(absl::string_view text) const {
  if (const int64_t bad = Utf8Error(text); bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("text is not UTF-8 at byte ", bad));
  }
  std::vector<int32_t> ids;
  size_t start = 0;  // of the text not yet encoded
  for (size_t i = 0; i < text.size() && !in_text_.empty(); ++i) {
    for (const AddedToken* a : in_text_) {
      if (text.substr(i, a->content.size()) != a->content) continue;
      if (i > start) LF_RETURN_IF_ERROR(EncodeSegment(text.substr(start, i - start), &ids));
      ids.push_back(a->id);
      start = i + a->content.size();
      i = start - 1;
      break;
    }
  }
  if (start < text.size()) LF_RETURN_IF_ERROR(EncodeSegment(text.substr(start), &ids));
  return ids;
}

std::string HfBpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (auto it = text_of_id_.find(id); it != text_of_id_.end()) {
      out += it->second;
    } else if (const std::string* b = bpe_.TokenBytes(id)) {
      out += *b;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfBpeTokenizer(const std::string& path,
                                                              const std::string& bytes,
                                                              const std::string& dir) {
  auto fail = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  };
  auto parsed = ParseBoundedJson(bytes, kMaxModelJsonDepth, kMaxTokenizerJsonValues);
  if (!parsed.ok()) return fail(parsed.status());
  const json& j = *parsed;
  if (!j.is_object()) return fail(absl::InvalidArgumentError("not a JSON object"));
  auto model = j.find("model");
  if (model == j.end() || !model->is_object()) return fail(Bad("model", "missing"));
  if (StringOr(*model, "type", "") != "BPE") {
    return fail(Bad("model.type", absl::StrCat("is \"", StringOr(*model, "type", ""),
                                               "\"; only \"BPE\" (byte-level) is supported")));
  }
  bool ignore_merges = false;
  if (auto im = model->find("ignore_merges"); im != model->end() && im->is_boolean())
    ignore_merges = im->get<bool>();
  auto t = std::make_unique<HfBpeTokenizer>(ignore_merges);
  if (auto n = j.find("normalizer"); n != j.end()) {
    if (absl::Status s = t->ParseNormalizer(*n); !s.ok()) return fail(s);
  }
  auto added = j.find("added_tokens");
  const json no_added = json::array();
  const json& added_list = added == j.end() || added->is_null() ? no_added : *added;
  auto vocab = model->find("vocab");
  if (vocab != model->end() && vocab->size() > static_cast<size_t>(kMaxTokenizerVocab)) {
    return fail(Bad("model.vocab", absl::StrCat("has ", vocab->size(), " entries; at most ",
                                                kMaxTokenizerVocab, " are accepted")));
  }
  const int64_t id_limit =
      static_cast<int64_t>((vocab == model->end() ? 0 : vocab->size()) + added_list.size());
  if (absl::Status s = t->ParseModel(*model, id_limit); !s.ok()) return fail(s);
  auto pre = j.find("pre_tokenizer");
  if (absl::Status s = t->ParsePreTokenizer(pre == j.end() ? json() : *pre); !s.ok())
    return fail(s);
  if (!t->byte_level()) {
    return fail(Bad("pre_tokenizer", "has no ByteLevel step: only byte-level BPE is supported"));
  }
  if (absl::Status s = t->ParseAddedTokens(added_list, id_limit); !s.ok()) return fail(s);
  auto post = j.find("post_processor");
  if (absl::Status s = t->ParsePostProcessor(post == j.end() ? json() : *post, id_limit); !s.ok())
    return fail(s);
  int32_t size = t->bpe().id_limit();
  for (const AddedToken& a : t->added()) size = std::max(size, a.id + 1);
  t->set_vocab(size);
  Sha256 digest;
  digest.Update(bytes.data(), bytes.size());
  LF_RETURN_IF_ERROR(t->ReadSidecars(dir, &digest));
  t->set_identity(path, digest.Hex());
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace llamafleet::trainer
