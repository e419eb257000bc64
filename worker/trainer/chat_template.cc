#include "chat_template.h"

#include <ctime>

#include "absl/strings/str_cat.h"
#include "model_file.h"
#include "util.h"

namespace llamafleet::trainer {

namespace {

constexpr char kQwenSystem[] =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr char kLlama31Header[] =
    "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    "Today Date: ";
constexpr char kRenderers[] = "llama2, llama3, chatml or mistral";

// Templates recognised exactly: SHA-256 of the verbatim string -> renderer. The strings
// and where they were copied from are in tests/trainer/fixtures/chat/templates.
struct KnownTemplate {
  const char* sha256;
  const char* model;
  ChatTemplate::Family family;
  const char* name;
  bool dated_system;
  const char* default_system;
  bool today;  // dated_system with today's date (strftime_now) instead of 26 Jul 2024
};
constexpr KnownTemplate kKnown[] = {
    {"e8d5b5a546d3f19df16a5320c614fab05bdc4edd50e850f1afd947b503ea41cf", "Llama 2 chat",
     ChatTemplate::Family::kLlama2, "llama2", false, "", false},
    {"ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122", "Llama 3 Instruct",
     ChatTemplate::Family::kLlama3, "llama3.0", false, "", false},
    {"e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65", "Llama 3.1 Instruct",
     ChatTemplate::Family::kLlama3, "llama3.1", true, "", false},
    {"26a59556925c987317ce5291811ba3b7f32ec4c647c400c6cc7e3a9993007ba7", "Mistral 7B Instruct v0.1",
     ChatTemplate::Family::kMistral, "mistral", false, "", false},
    {"cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f", "Qwen2.5 Instruct",
     ChatTemplate::Family::kChatml, "qwen2.5", false, kQwenSystem, false},
    {"5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4", "Llama 3.2 Instruct",
     ChatTemplate::Family::kLlama3, "llama3.2", true, "", true},
    {"796853172235ab3aaa4810013ddfe2eab481bda3306dad4f700c00d436eed596", "Mistral 7B Instruct v0.2",
     ChatTemplate::Family::kMistralV02, "mistral-v0.2", false, "", false},
    {"e16746b40344d6c5b5265988e0328a0bf7277be86f1c335156eae07e29c82826", "Mistral 7B Instruct v0.3",
     ChatTemplate::Family::kMistralV03, "mistral-v0.3", false, "", false},
};

// Today's local date as Python's strftime("%d %b %Y") writes it in the C locale.
std::string TodayDate() {
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  return absl::StrCat(tm.tm_mday < 10 ? "0" : "", tm.tm_mday, " ", kMonths[tm.tm_mon], " ",
                      1900 + tm.tm_year);
}

// Python's str.isspace() for one code point (what jinja's trim and str.strip() remove).
bool IsPyWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Code point starting at s[i] and its length in bytes (1 for a byte that starts none).
std::pair<uint32_t, size_t> DecodeAt(absl::string_view s, size_t i) {
  const unsigned char b = s[i];
  size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) return {b, 1};
  uint32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return {c, n};
}

// [begin, end) of `s` without Python whitespace at either end.
std::pair<size_t, size_t> StripBounds(absl::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    auto [c, n] = DecodeAt(s, b);
    if (!IsPyWhitespace(c)) break;
    b += n;
  }
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;  // back to the first byte of the last code point
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    auto [c, n] = DecodeAt(s, start);
    if (start + n != e || !IsPyWhitespace(c)) break;
    e = start;
  }
  return {b, e};
}

// Appends pieces of text, each written by the template (literal) or taken from a message.
class Writer {
 public:
  struct Piece {
    std::string text;
    bool literal;
  };
  void Lit(absl::string_view s) { Add({std::string(s), true}); }
  void Content(absl::string_view s) { Add({std::string(s), false}); }
  // Writes `pieces` as one string stripped of Python whitespace at both ends.
  void Stripped(const std::vector<Piece>& pieces) {
    std::string all;
    for (const Piece& p : pieces) all += p.text;
    auto [b, e] = StripBounds(all);
    size_t at = 0;
    for (const Piece& p : pieces) {
      const size_t lo = std::max(at, b), hi = std::min(at + p.text.size(), e);
      if (lo < hi) Add({p.text.substr(lo - at, hi - lo), p.literal});
      at += p.text.size();
    }
  }
  size_t size() const { return out_.text.size(); }
  void Span(size_t begin) { out_.assistant.emplace_back(begin, out_.text.size()); }
  RenderedChat Take() { return std::move(out_); }

 private:
  void Add(const Piece& p) {
    if (p.text.empty()) return;
    if (p.literal) {
      if (!out_.literal.empty() && out_.literal.back().second == out_.text.size()) {
        out_.literal.back().second += p.text.size();
      } else {
        out_.literal.emplace_back(out_.text.size(), out_.text.size() + p.text.size());
      }
    }
    out_.text += p.text;
  }
  RenderedChat out_;
};

absl::string_view Trimmed(absl::string_view s) {
  auto [b, e] = StripBounds(s);
  return s.substr(b, e - b);
}

void RenderLlama3(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, Writer& w) {
  w.Lit("<|begin_of_text|>");
  size_t first = 0;
  if (t.dated_system) {
    w.Lit(absl::StrCat(kLlama31Header, t.date, "\n\n"));
    if (!msgs.empty() && msgs[0].role == ChatRole::kSystem) {
      w.Content(Trimmed(msgs[0].content));
      first = 1;
    }
    w.Lit("<|eot_id|>");
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    w.Lit(absl::StrCat("<|start_header_id|>", ChatRoleName(msgs[i].role), "<|end_header_id|>\n\n"));
    const size_t begin = w.size();
    w.Content(Trimmed(msgs[i].content));
    w.Lit("<|eot_id|>");
    if (msgs[i].role == ChatRole::kAssistant) w.Span(begin);
  }
}

void RenderChatml(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, Writer& w) {
  size_t first = 0;
  if (!msgs.empty() && msgs[0].role == ChatRole::kSystem) {
    w.Lit("<|im_start|>system\n");
    w.Content(msgs[0].content);
    w.Lit("<|im_end|>\n");
    first = 1;
  } else if (!t.default_system.empty()) {
    w.Lit(absl::StrCat("<|im_start|>system\n", t.default_system, "<|im_end|>\n"));
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    w.Lit(absl::StrCat("<|im_start|>", ChatRoleName(msgs[i].role), "\n"));
    const size_t begin = w.size();
    w.Content(msgs[i].content);
    w.Lit("<|im_end|>");
    if (msgs[i].role == ChatRole::kAssistant) w.Span(begin);
    w.Lit("\n");
  }
}

absl::Status CheckAlternating(
    const ChatTemplate& t, const std::vector<ChatMessage>& msgs, size_t first,
    absl::string_view raises =
        "Conversation roles must alternate user/assistant/user/assistant/...") {
  for (size_t i = first; i < msgs.size(); ++i) {
    const bool want_user = (i - first) % 2 == 0;
    if ((msgs[i].role == ChatRole::kUser) != want_user) {
      return absl::InvalidArgumentError(absl::StrCat(
          "message ", i, " is ", ChatRoleName(msgs[i].role), ": the ", t.name,
          " template needs user and assistant messages to alternate, starting with user (it raises "
          "\"",
          raises, "\")"));
    }
  }
  return absl::OkStatus();
}

absl::Status RenderLlama2(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, Writer& w) {
  const bool system = !msgs.empty() && msgs[0].role == ChatRole::kSystem;
  const size_t first = system ? 1 : 0;
  LF_RETURN_IF_ERROR(CheckAlternating(t, msgs, first));
  for (size_t i = first; i < msgs.size(); ++i) {
    if (msgs[i].role == ChatRole::kUser) {
      std::vector<Writer::Piece> content;
      if (i == first && system) {
        content = {{"<<SYS>>\n", true}, {msgs[0].content, false}, {"\n<</SYS>>\n\n", true}};
      }
      content.push_back({msgs[i].content, false});
      w.Lit("<s>[INST] ");
      w.Stripped(content);
      w.Lit(" [/INST]");
    } else {
      const size_t begin = w.size();
      w.Lit(" ");
      w.Content(Trimmed(msgs[i].content));
      w.Lit(" </s>");
      w.Span(begin);
    }
  }
  return absl::OkStatus();
}

absl::Status RenderMistral(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, Writer& w) {
  if (!msgs.empty() && msgs[0].role == ChatRole::kSystem) {
    return absl::InvalidArgumentError(absl::StrCat("message 0 is system: the ", t.name,
                                                   " template has no system role (it raises \"Only "
                                                   "user and assistant roles are supported!\")"));
  }
  LF_RETURN_IF_ERROR(CheckAlternating(t, msgs, 0));
  w.Lit("<s>");
  for (const ChatMessage& m : msgs) {
    if (m.role == ChatRole::kUser) {
      w.Lit("[INST] ");
      w.Content(m.content);
      w.Lit(" [/INST]");
    } else {
      const size_t begin = w.size();
      w.Content(m.content);
      w.Lit("</s>");
      w.Span(begin);
    }
  }
  return absl::OkStatus();
}

constexpr char kMistralRaises[] =
    "After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...";

// Mistral 7B Instruct v0.2's and v0.3's templates (chat_template.h).
absl::Status RenderMistralV02V03(const ChatTemplate& t, const std::vector<ChatMessage>& msgs,
                                 Writer& w) {
  const bool v3 = t.family == ChatTemplate::Family::kMistralV03;
  const bool system = !msgs.empty() && msgs[0].role == ChatRole::kSystem;
  const size_t first = system ? 1 : 0;
  LF_RETURN_IF_ERROR(CheckAlternating(t, msgs, first, kMistralRaises));
  // v0.2 puts the system message into the first message, v0.3 into the last (when it is a
  // user turn: the alternation makes the first one a user turn).
  const size_t system_at = !system ? msgs.size() : v3 ? msgs.size() - 1 : first;
  w.Lit("<s>");
  for (size_t i = first; i < msgs.size(); ++i) {
    if (msgs[i].role == ChatRole::kUser) {
      w.Lit(v3 ? "[INST] " : " [INST] ");
      if (i == system_at) {
        w.Content(msgs[0].content);
        w.Lit("\n\n");
      }
      w.Content(msgs[i].content);
      w.Lit(v3 ? "[/INST]" : " [/INST]");
    } else {
      const size_t begin = w.size();
      w.Lit(" ");
      w.Content(v3 ? Trimmed(msgs[i].content) : absl::string_view(msgs[i].content));
      w.Lit("</s>");
      w.Span(begin);
    }
  }
  return absl::OkStatus();
}

std::string HowToChoose() {
  return absl::StrCat("set data.chat_template to ", kRenderers, " to choose a renderer");
}

}  // namespace

absl::StatusOr<RenderedChat> RenderChat(const ChatTemplate& tmpl,
                                        const std::vector<ChatMessage>& messages) {
  Writer w;
  switch (tmpl.family) {
    case ChatTemplate::Family::kLlama3:
      RenderLlama3(tmpl, messages, w);
      break;
    case ChatTemplate::Family::kChatml:
      RenderChatml(tmpl, messages, w);
      break;
    case ChatTemplate::Family::kLlama2:
      LF_RETURN_IF_ERROR(RenderLlama2(tmpl, messages, w));
      break;
    case ChatTemplate::Family::kMistral:
      LF_RETURN_IF_ERROR(RenderMistral(tmpl, messages, w));
      break;
    case ChatTemplate::Family::kMistralV02:
    case ChatTemplate::Family::kMistralV03:
      LF_RETURN_IF_ERROR(RenderMistralV02V03(tmpl, messages, w));
      break;
  }
  return w.Take();
}

void AppendGenerationPrompt(const ChatTemplate& tmpl, RenderedChat* chat) {
  std::string prompt;
  if (tmpl.family == ChatTemplate::Family::kLlama3) {
    prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  } else if (tmpl.family == ChatTemplate::Family::kChatml) {
    prompt = "<|im_start|>assistant\n";
  }
  if (prompt.empty()) return;
  const size_t begin = chat->text.size();
  chat->text += prompt;
  chat->literal.push_back({begin, chat->text.size()});
}

absl::StatusOr<ChatTemplate> ChatTemplateByName(const std::string& name) {
  ChatTemplate t;
  t.name = name;
  t.origin = absl::StrCat("data.chat_template: ", name);
  if (name == "llama2") {
    t.family = ChatTemplate::Family::kLlama2;
  } else if (name == "llama3") {
    t.family = ChatTemplate::Family::kLlama3;
    t.dated_system = true;
  } else if (name == "chatml") {
    t.family = ChatTemplate::Family::kChatml;
  } else if (name == "mistral") {
    t.family = ChatTemplate::Family::kMistral;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("data.chat_template \"", name.substr(0, 64),
                                                   "\": expected model, ", kRenderers));
  }
  return t;
}

absl::StatusOr<ChatTemplate> ChatTemplateFromString(const std::string& jinja,
                                                    const std::string& where) {
  Sha256 digest;
  digest.Update(jinja.data(), jinja.size());
  const std::string hex = digest.Hex();
  for (const KnownTemplate& k : kKnown) {
    if (hex != k.sha256) continue;
    ChatTemplate t;
    t.family = k.family;
    t.name = k.name;
    t.dated_system = k.dated_system;
    t.default_system = k.default_system;
    if (k.today) t.date = TodayDate();
    t.origin = absl::StrCat(where, " (", k.model, ")");
    return t;
  }
  std::string known;
  for (const KnownTemplate& k : kKnown) absl::StrAppend(&known, known.empty() ? "" : ", ", k.model);
  return absl::InvalidArgumentError(
      absl::StrCat(where, " (", jinja.size(), " bytes, sha256 ", hex.substr(0, 16),
                   ") is not a template llamafleet renders exactly (it knows those of ", known,
                   "); ", HowToChoose()));
}

absl::StatusOr<ChatTemplate> ChatTemplateFromModelDir(const std::string& dir) {
  const std::string jinja_path = absl::StrCat(dir, "/chat_template.jinja");
  absl::StatusOr<std::string> jinja = ReadModelFile(jinja_path, kMaxConfigFileBytes);
  if (jinja.ok()) return ChatTemplateFromString(*jinja, jinja_path);
  if (!absl::IsNotFound(jinja.status())) return jinja.status();
  const std::string path = absl::StrCat(dir, "/tokenizer_config.json");
  absl::StatusOr<std::string> bytes = ReadModelFile(path, kMaxListingFileBytes);
  if (absl::IsNotFound(bytes.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir,
                     " has no tokenizer_config.json or chat_template.jinja "
                     "to take the model's chat template from; ",
                     HowToChoose()));
  }
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<nlohmann::json> j = ParseBoundedJson(*bytes);
  if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", j.status().message()));
  if (!j->is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  auto it = j->find("chat_template");
  if (it == j->end() || it->is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " has no chat_template; ", HowToChoose()));
  }
  const std::string where = absl::StrCat(path, "'s chat_template");
  if (it->is_string()) return ChatTemplateFromString(it->get<std::string>(), where);
  if (it->is_array()) {
    for (const nlohmann::json& named : *it) {
      if (!named.is_object()) continue;
      auto name = named.find("name");
      auto tmpl = named.find("template");
      if (name != named.end() && name->is_string() && *name == "default" && tmpl != named.end() &&
          tmpl->is_string()) {
        return ChatTemplateFromString(tmpl->get<std::string>(),
                                      absl::StrCat(where, " \"default\""));
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is a list without a {name: \"default\", template: string} entry; ",
                     HowToChoose()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, " must be a string or a list of {name, template}; ", HowToChoose()));
}

absl::StatusOr<ChatTemplate> ResolveChatTemplate(const std::string& setting,
                                                 const std::string& tokenizer_dir) {
  if (setting.empty() || setting == "model") return ChatTemplateFromModelDir(tokenizer_dir);
  return ChatTemplateByName(setting);
}

}  // namespace llamafleet::trainer
