#include "gguf_vocab.h"

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model_file.h"
#include "tokenizer.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Llama 3's and Qwen2's pre-tokenizer patterns (tokenizer.json's Split regex), by the
// names llama.cpp gives them.
constexpr absl::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr absl::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A protobuf wire-format reader over a bounded span.
class ProtoReader {
 public:
  explicit ProtoReader(absl::string_view bytes)
      : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  bool done() const { return p_ >= end_; }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) return false;
      const uint8_t b = static_cast<uint8_t>(*p_++);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // The next field: its number, wire type, and (wire types 0, 1, 5) value or (2) bytes.
  bool Next(uint32_t* field, uint32_t* wire, uint64_t* value, absl::string_view* bytes) {
    uint64_t key;
    if (!Varint(&key)) return false;
    *field = static_cast<uint32_t>(key >> 3);
    *wire = static_cast<uint32_t>(key & 7);
    switch (*wire) {
      case 0:
        return Varint(value);
      case 1:
      case 5: {
        const size_t n = *wire == 1 ? 8 : 4;
        if (static_cast<size_t>(end_ - p_) < n) return false;
        *value = 0;
        std::memcpy(value, p_, n);
        p_ += n;
        return true;
      }
      case 2: {
        uint64_t n;
        if (!Varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
        *bytes = absl::string_view(p_, n);
        p_ += n;
        return true;
      }
      default:
        return false;
    }
  }

 private:
  const char* p_;
  const char* end_;
};

// The text of a tokenizer_config.json token entry: a string or {"content": ...}.
std::string TokenText(const json& entry) {
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) {
    return entry["content"].get<std::string>();
  }
  return "";
}

absl::StatusOr<std::string> PreTokenizerName(const json& pre, const std::string& path) {
  const json* split = nullptr;
  bool byte_level_regex = false;
  auto visit = [&](const json& step) {
    if (!step.is_object() || !step.contains("type") || !step["type"].is_string()) return;
    const std::string type = step["type"].get<std::string>();
    if (type == "Split") split = &step;
    if (type == "ByteLevel") byte_level_regex = step.value("use_regex", true);
  };
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array()) {
    for (const json& step : pre["pretokenizers"]) visit(step);
  } else {
    visit(pre);
  }
  if (split != nullptr) {
    const json& pattern = (*split).contains("pattern") ? (*split)["pattern"] : json();
    const std::string regex =
        pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()
            ? pattern["Regex"].get<std::string>()
            : "";
    if (regex == kLlama3Pattern) return std::string("llama-bpe");
    if (regex == kQwen2Pattern) return std::string("qwen2");
  } else if (byte_level_regex) {
    return std::string("gpt-2");
  }
  return absl::FailedPreconditionError(
      absl::StrCat(path,
                   ": pre_tokenizer is none llama.cpp knows by name (Llama 3's \"llama-bpe\", "
                   "\"qwen2\", GPT-2's "
                   "\"gpt-2\"), so a GGUF could not tokenize as training did"));
}

absl::Status ReadBpeVocab(const std::string& path, GgufVocab* vocab) {
  LF_ASSIGN_OR_RETURN(std::string text, ReadModelFile(path, kMaxTokenizerFileBytes));
  absl::StatusOr<json> parsed = ParseBoundedJson(text);
  if (!parsed.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  const json& j = *parsed;
  auto bad = [&](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", field, " ", why));
  };
  if (!j.contains("model") || !j["model"].is_object() || j["model"].value("type", "") != "BPE") {
    return bad("model.type", "must be \"BPE\"");
  }
  const json& model = j["model"];
  if (!model.contains("vocab") || !model["vocab"].is_object())
    return bad("model.vocab", "must be an object");
  auto place = [&](int64_t id, const std::string& token, GgufTokenType type) -> absl::Status {
    if (id < 0 || id >= static_cast<int64_t>(vocab->tokens.size())) {
      return bad("token ids", absl::StrCat("include ", id, ", outside the model's ",
                                           vocab->tokens.size(), " rows"));
    }
    vocab->tokens[id] = token;
    vocab->token_types[id] = static_cast<int32_t>(type);
    return absl::OkStatus();
  };
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer())
      return bad("model.vocab", absl::StrCat("\"", token, "\" has no integer id"));
    LF_RETURN_IF_ERROR(place(id.get<int64_t>(), token, GgufTokenType::kNormal));
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& added : j["added_tokens"]) {
      if (!added.is_object() || !added.contains("id") || !added["id"].is_number_integer() ||
          !added.contains("content") || !added["content"].is_string()) {
        return bad("added_tokens", "entries need an integer id and a string content");
      }
      LF_RETURN_IF_ERROR(place(
          added["id"].get<int64_t>(), added["content"].get<std::string>(),
          added.value("special", false) ? GgufTokenType::kControl : GgufTokenType::kUserDefined));
    }
  }
  if (model.contains("merges") && model["merges"].is_array()) {
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        vocab->merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        vocab->merges.push_back(
            absl::StrCat(m[0].get<std::string>(), " ", m[1].get<std::string>()));
      } else {
        return bad("model.merges", "entries must be \"a b\" strings or [a, b] pairs");
      }
    }
  }
  LF_ASSIGN_OR_RETURN(
      vocab->pre,
      PreTokenizerName(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), path));
  vocab->model = "gpt2";
  return absl::OkStatus();
}

// tokenizer_config.json's pad token and chat template, and chat_template.jinja.
absl::Status ReadTokenizerConfig(const std::string& dir, GgufVocab* vocab) {
  const std::string jinja = (fs::path(dir) / "chat_template.jinja").string();
  absl::StatusOr<std::string> template_file = ReadModelFile(jinja, kMaxTokenizerFileBytes);
  if (template_file.ok()) {
    vocab->chat_template = *std::move(template_file);
  } else if (!absl::IsNotFound(template_file.status())) {
    return template_file.status();
  }
  const std::string path = (fs::path(dir) / "tokenizer_config.json").string();
  absl::StatusOr<std::string> text = ReadModelFile(path, kMaxTokenizerFileBytes);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();
  LF_RETURN_IF_ERROR(text.status());
  absl::StatusOr<json> j = ParseBoundedJson(*text);
  if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", j.status().message()));
  if (!j->is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  if (vocab->chat_template.empty() && j->contains("chat_template")) {
    const json& t = (*j)["chat_template"];
    if (t.is_string()) {
      vocab->chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // named templates: the one called "default"
      for (const json& named : t) {
        if (named.is_object() && named.value("name", "") == "default" &&
            named.contains("template") && named["template"].is_string()) {
          vocab->chat_template = named["template"].get<std::string>();
        }
      }
    }
  }
  if (j->contains("pad_token")) {
    const std::string pad = TokenText((*j)["pad_token"]);
    for (size_t id = 0; !pad.empty() && id < vocab->tokens.size(); ++id) {
      if (vocab->tokens[id] == pad) {
        vocab->pad_id = static_cast<int32_t>(id);
        break;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseSentencePiecePieces(absl::string_view bytes, const std::string& path,
                                      GgufVocab* vocab) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed SentencePiece model: ", why));
  };
  vocab->tokens.clear();
  vocab->scores.clear();
  vocab->token_types.clear();
  ProtoReader model(bytes);
  uint32_t field, wire;
  uint64_t value;
  absl::string_view sub;
  while (!model.done()) {
    if (!model.Next(&field, &wire, &value, &sub)) return bad("truncated field");
    if (field == 1 && wire == 2) {  // SentencePiece {piece = 1, score = 2, type = 3}
      std::string piece;
      float score = 0;
      uint64_t type = static_cast<uint64_t>(GgufTokenType::kNormal);
      ProtoReader p(sub);
      while (!p.done()) {
        uint32_t f, w;
        uint64_t v;
        absl::string_view b;
        if (!p.Next(&f, &w, &v, &b))
          return bad(absl::StrCat("piece ", vocab->tokens.size(), " is truncated"));
        if (f == 1 && w == 2) piece = std::string(b);
        if (f == 2 && w == 5) std::memcpy(&score, &v, 4);
        if (f == 3 && w == 0) type = v;
      }
      if (type < 1 || type > 6)
        return bad(absl::StrCat("piece ", vocab->tokens.size(), " has type ", type));
      vocab->tokens.push_back(std::move(piece));
      vocab->scores.push_back(score);
      vocab->token_types.push_back(static_cast<int32_t>(type));
    } else if (field == 2 && wire == 2) {  // TrainerSpec: unk_id = 40, pad_id = 43
      ProtoReader t(sub);
      while (!t.done()) {
        uint32_t f, w;
        uint64_t v;
        absl::string_view b;
        if (!t.Next(&f, &w, &v, &b)) return bad("trainer_spec is truncated");
        if (f == 40 && w == 0) vocab->unk_id = static_cast<int32_t>(v);
        if (f == 43 && w == 0) vocab->pad_id = static_cast<int32_t>(v);
      }
    }
  }
  if (vocab->tokens.empty()) return bad("no pieces");
  return absl::OkStatus();
}

absl::StatusOr<GgufVocab> ReadGgufVocab(const std::string& model_dir, const LlamaConfig& config) {
  LF_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(model_dir));
  GgufVocab vocab;
  const int64_t rows = config.vocab_size;
  if (tokenizer->kind() == "tiktoken") {
    return absl::FailedPreconditionError(absl::StrCat(
        tokenizer->path(),
        ": a tiktoken tokenizer.model; GGUF export reads a SentencePiece tokenizer.model or a "
        "tokenizer.json (put the model's tokenizer.json in the directory instead)"));
  }
  if (tokenizer->kind() == "sentencepiece") {
    LF_ASSIGN_OR_RETURN(std::string bytes,
                        ReadModelFile(tokenizer->path(), kMaxTokenizerFileBytes));
    vocab.unk_id = 0;  // SentencePiece's defaults
    LF_RETURN_IF_ERROR(ParseSentencePiecePieces(bytes, tokenizer->path(), &vocab));
    if (static_cast<int64_t>(vocab.tokens.size()) > rows) {
      return absl::InvalidArgumentError(absl::StrCat(tokenizer->path(), ": ", vocab.tokens.size(),
                                                     " pieces, more than the model's vocab_size ",
                                                     rows));
    }
    vocab.model = "llama";
    vocab.pre = "default";
    for (int64_t id = static_cast<int64_t>(vocab.tokens.size()); id < rows; ++id) {
      vocab.tokens.push_back(absl::StrCat("[PAD", id, "]"));
      vocab.scores.push_back(-1000.0f);
      vocab.token_types.push_back(static_cast<int32_t>(GgufTokenType::kUnused));
    }
  } else {
    if (tokenizer->vocab_size() > rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(tokenizer->path(), ": ", tokenizer->vocab_size(),
                       " tokens, more than the model's vocab_size ", rows));
    }
    vocab.tokens.resize(rows);
    vocab.token_types.assign(rows, static_cast<int32_t>(GgufTokenType::kUnused));
    LF_RETURN_IF_ERROR(ReadBpeVocab(tokenizer->path(), &vocab));
    for (int64_t id = 0; id < rows; ++id) {
      if (vocab.token_types[id] == static_cast<int32_t>(GgufTokenType::kUnused))
        vocab.tokens[id] = absl::StrCat("[PAD", id, "]");
    }
  }
  // As training tokenizes (train.cc): a SentencePiece model without a BOS takes the
  // config's; a tokenizer.json's post-processor alone says whether there is one.
  vocab.bos_id = tokenizer->bos_id() >= 0 || tokenizer->kind() != "sentencepiece"
                     ? tokenizer->bos_id()
                     : static_cast<int32_t>(config.bos_token_id);
  vocab.add_bos = vocab.bos_id >= 0;
  vocab.eos_id =
      tokenizer->eos_id() >= 0 ? tokenizer->eos_id() : static_cast<int32_t>(config.eos_token_id);
  vocab.stop_ids = {vocab.eos_id};
  for (int32_t id : tokenizer->stop_ids()) {
    if (id != vocab.eos_id) vocab.stop_ids.push_back(id);
  }
  LF_RETURN_IF_ERROR(ReadTokenizerConfig(model_dir, &vocab));
  return vocab;
}

void AddGgufVocabMetadata(const GgufVocab& vocab, GgufWriter* writer) {
  writer->AddString("tokenizer.ggml.model", vocab.model);
  writer->AddString("tokenizer.ggml.pre", vocab.pre);
  writer->AddStringArray("tokenizer.ggml.tokens", vocab.tokens);
  if (!vocab.scores.empty()) writer->AddF32Array("tokenizer.ggml.scores", vocab.scores);
  writer->AddI32Array("tokenizer.ggml.token_type", vocab.token_types);
  if (!vocab.merges.empty()) writer->AddStringArray("tokenizer.ggml.merges", vocab.merges);
  const int64_t n = static_cast<int64_t>(vocab.tokens.size());
  auto id = [&](absl::string_view key, int32_t value) {
    if (value >= 0 && value < n) writer->AddU32(key, static_cast<uint32_t>(value));
  };
  id("tokenizer.ggml.bos_token_id", vocab.bos_id);
  id("tokenizer.ggml.eos_token_id", vocab.eos_id);
  id("tokenizer.ggml.unknown_token_id", vocab.unk_id);
  id("tokenizer.ggml.padding_token_id", vocab.pad_id);
  writer->AddBool("tokenizer.ggml.add_bos_token", vocab.add_bos);
  writer->AddBool("tokenizer.ggml.add_eos_token", false);
  if (!vocab.chat_template.empty())
    writer->AddString("tokenizer.chat_template", vocab.chat_template);
}

}  // namespace llamafleet::trainer
