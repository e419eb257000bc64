// data.format: chat against Hugging Face: for every real template in fixtures/chat
// (made by make_chat_fixtures.py with transformers' apply_chat_template and HF
// tokenizers), the rendered text, the token ids and the loss masks of 200 generated
// conversations are identical; and bad records, unknown templates and templates that
// raise give errors that say what to change.
#include "chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "chat_encoding.h"
#include "chat_record.h"
#include "data.h"
#include "nlohmann/json.hpp"
#include "prompt_set.h"
#include "tests/testing/process.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;
using ::llamafleet::testing::ReadFile;
using ::llamafleet::testing::TempDir;
using nlohmann::json;

const std::string kFixtures = LLAMAFLEET_CHAT_FIXTURES;

// The fixture tokenizer; `dir` tokenizer_mistral_v3 has [INST] and [/INST] as control
// tokens, as Mistral's v3 tokenizer does.
std::unique_ptr<Tokenizer> FixtureTokenizer(const std::string& dir = "tokenizer") {
  auto t = Tokenizer::Load(kFixtures + "/" + dir);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::string MaskString(const std::vector<uint8_t>& target) {
  std::string s;
  for (uint8_t t : target) s += t ? '1' : '0';
  return s;
}

// Every conversation of fixtures/chat/NAME.jsonl rendered by `tmpl` and tokenized.
void ExpectMatchesReference(const std::string& name, const ChatTemplate& tmpl,
                            const std::string& tokenizer_dir = "tokenizer") {
  std::unique_ptr<Tokenizer> tok = FixtureTokenizer(tokenizer_dir);
  ASSERT_NE(tok, nullptr);
  std::ifstream in(kFixtures + "/" + name + ".jsonl");
  std::string line;
  int n = 0, mismatches = 0;
  while (std::getline(in, line) && mismatches < 3) {
    ++n;
    const json ref = json::parse(line);
    auto msgs = ParseChatRecord(ref);
    ASSERT_TRUE(msgs.ok()) << name << ":" << n << ": " << msgs.status();
    auto chat = RenderChat(tmpl, *msgs);
    ASSERT_TRUE(chat.ok()) << name << ":" << n << ": " << chat.status();
    if (chat->text != ref["text"].get<std::string>()) {
      ++mismatches;
      ADD_FAILURE() << name << ":" << n << " text differs:\n got: " << json(chat->text).dump()
                    << "\nwant: " << ref["text"].dump();
      continue;
    }
    for (auto [mode, key] : {std::pair{TrainOn::kAssistant, "assistant"},
                             {TrainOn::kLastAssistant, "last_assistant"}}) {
      auto seq = EncodeChat(*chat, *tok, mode);
      ASSERT_TRUE(seq.ok()) << name << ":" << n << ": " << seq.status();
      std::vector<int32_t> want = ref["ids"].get<std::vector<int32_t>>();
      if (seq->tokens != want || MaskString(seq->target) != ref[key].get<std::string>()) {
        ++mismatches;
        ADD_FAILURE() << name << ":" << n << " (" << key
                      << ") ids or mask differ:\n got: " << json(seq->tokens).dump()
                      << "\nwant: " << ref["ids"].dump() << "\n got: " << MaskString(seq->target)
                      << "\nwant: " << ref[key].get<std::string>();
      }
    }
  }
  EXPECT_GE(n, 200) << name;
}

ChatTemplate FromFixture(const std::string& file) {
  auto t = ChatTemplateFromString(ReadFile(kFixtures + "/templates/" + file), file);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : ChatTemplate();
}

TEST(ChatTemplate, Llama31MatchesHuggingFace) {
  ExpectMatchesReference("llama3.1", FromFixture("llama3.1.jinja"));
}
TEST(ChatTemplate, Llama3MatchesHuggingFace) {
  ExpectMatchesReference("llama3", FromFixture("llama3.jinja"));
}
TEST(ChatTemplate, Qwen25MatchesHuggingFace) {
  ExpectMatchesReference("qwen2.5", FromFixture("qwen2.5.jinja"));
}
TEST(ChatTemplate, Llama2MatchesHuggingFace) {
  ExpectMatchesReference("llama2", FromFixture("llama2.jinja"));
}
TEST(ChatTemplate, MistralMatchesHuggingFace) {
  ExpectMatchesReference("mistral", FromFixture("mistral.jinja"));
}
// Llama 3.2 writes today's date; the fixtures were rendered with date_string 05 Mar 2025.
TEST(ChatTemplate, Llama32MatchesHuggingFace) {
  ChatTemplate tmpl = FromFixture("llama3.2.jinja");
  EXPECT_EQ(tmpl.name, "llama3.2");
  tmpl.date = "05 Mar 2025";
  ExpectMatchesReference("llama3.2", tmpl);
}
TEST(ChatTemplate, MistralV02MatchesHuggingFace) {
  ExpectMatchesReference("mistral-v0.2", FromFixture("mistral-v0.2.jinja"));
}
TEST(ChatTemplate, MistralV03MatchesHuggingFace) {
  ExpectMatchesReference("mistral-v0.3", FromFixture("mistral-v0.3.jinja"), "tokenizer_mistral_v3");
}

// Llama 3.2's template writes strftime_now("%d %b %Y"): today's local date, fixed when the
// template is resolved; Llama 3.1's writes 26 Jul 2024 always.
TEST(ChatTemplate, Llama32WritesTodaysDate) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char want[32];
  std::strftime(want, sizeof(want), "%d %b %Y", &tm);
  const ChatTemplate l32 = FromFixture("llama3.2.jinja");
  EXPECT_EQ(l32.date, want);
  EXPECT_EQ(FromFixture("llama3.1.jinja").date, "26 Jul 2024");
  auto chat = RenderChat(l32, {{ChatRole::kUser, "u"}, {ChatRole::kAssistant, "a"}});
  ASSERT_TRUE(chat.ok());
  EXPECT_TRUE(absl::StrContains(chat->text, absl::StrCat("Today Date: ", want, "\n\n<|eot_id|>")))
      << chat->text;
}

// Mistral v0.3's [INST] and [/INST] are single control tokens where the template writes
// them, text where a message holds them.
TEST(ChatTemplate, MistralV03ControlTokens) {
  std::unique_ptr<Tokenizer> tok = FixtureTokenizer("tokenizer_mistral_v3");
  ASSERT_NE(tok, nullptr);
  int32_t inst = -1, end_inst = -1;
  for (const auto& [s, id] : tok->template_tokens()) {
    if (s == "[INST]") inst = id;
    if (s == "[/INST]") end_inst = id;
  }
  ASSERT_GE(inst, 0);
  ASSERT_GE(end_inst, 0);
  auto chat = RenderChat(FromFixture("mistral-v0.3.jinja"),
                         {{ChatRole::kUser, "[INST] q"}, {ChatRole::kAssistant, "a"}});
  ASSERT_TRUE(chat.ok()) << chat.status();
  auto seq = EncodeChat(*chat, *tok, TrainOn::kAssistant);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(std::count(seq->tokens.begin(), seq->tokens.end(), inst), 1);
  EXPECT_EQ(std::count(seq->tokens.begin(), seq->tokens.end(), end_inst), 1);
}

// generate --chat: a conversation ending with a user turn, then the template's generation
// prompt, as apply_chat_template(add_generation_prompt=True) renders and tokenizes it
// (fixtures/chat/generation_prompts.json, make_generation_prompts.py).
// A SentencePiece model with Mistral v3's control pieces (fixtures/chat/spm_mistral_v3,
// made by make_spm_control.py): each control piece is one template token with the id the
// sentencepiece library gives it, so v0.3's [INST] and [/INST] become single ids where
// the template writes them and stay text inside a message.
TEST(ChatTemplate, SentencePieceControlPiecesAreTemplateTokens) {
  auto tok = Tokenizer::Load(kFixtures + "/spm_mistral_v3/tokenizer.model");
  if (absl::IsFailedPrecondition(tok.status())) GTEST_SKIP() << tok.status();
  ASSERT_TRUE(tok.ok()) << tok.status();
  const json controls = json::parse(ReadFile(kFixtures + "/spm_mistral_v3/controls.json"));
  ASSERT_EQ(controls.size(), 5u);
  for (const auto& [piece, id] : controls.items()) {
    const auto& tt = (*tok)->template_tokens();
    EXPECT_NE(std::find(tt.begin(), tt.end(), std::pair{piece, id.get<int32_t>()}), tt.end())
        << piece;
  }
  auto chat = RenderChat(FromFixture("mistral-v0.3.jinja"), {{ChatRole::kSystem, "Be brief."},
                                                              {ChatRole::kUser, "hi [INST]"},
                                                              {ChatRole::kAssistant, "Hello"},
                                                              {ChatRole::kUser, "again"}});
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->text, "<s>[INST] hi [INST][/INST] Hello</s>[INST] Be brief.\n\nagain[/INST]");
  auto seq = EncodeChat(*chat, **tok, TrainOn::kAssistant);
  ASSERT_TRUE(seq.ok()) << seq.status();
  const int32_t inst = controls["[INST]"], end_inst = controls["[/INST]"];
  EXPECT_EQ(std::count(seq->tokens.begin(), seq->tokens.end(), inst), 2);
  EXPECT_EQ(std::count(seq->tokens.begin(), seq->tokens.end(), end_inst), 2);
  EXPECT_EQ(seq->tokens.front(), controls["<s>"].get<int32_t>());
}

TEST(ChatTemplate, GenerationPromptsMatchHuggingFace) {
  std::unique_ptr<Tokenizer> tok = FixtureTokenizer();
  ASSERT_NE(tok, nullptr);
  const json fixtures = json::parse(ReadFile(kFixtures + "/generation_prompts.json"));
  ASSERT_EQ(fixtures.size(), 8u);
  std::unique_ptr<Tokenizer> tok_v3 = FixtureTokenizer("tokenizer_mistral_v3");
  ASSERT_NE(tok_v3, nullptr);
  for (const auto& [name, rows] : fixtures.items()) {
    ChatTemplate tmpl = FromFixture(name + ".jinja");
    if (name == "llama3.2") tmpl.date = "05 Mar 2025";
    const Tokenizer* t = name == "mistral-v0.3" ? tok_v3.get() : tok.get();
    for (const json& row : rows) {
      SCOPED_TRACE(name + ": " + row["text"].dump());
      auto ids = EncodePromptRecord(json{{"messages", row["messages"]}}, {t, &tmpl});
      ASSERT_TRUE(ids.ok()) << ids.status();
      EXPECT_EQ(*ids, row["ids"].get<std::vector<int32_t>>());
      std::vector<ChatMessage> msgs;
      for (const json& m : row["messages"]) {
        const std::string role = m["role"];
        msgs.push_back({role == "system" ? ChatRole::kSystem
                        : role == "user" ? ChatRole::kUser
                                         : ChatRole::kAssistant,
                        m["content"]});
      }
      auto chat = RenderChat(tmpl, msgs);
      ASSERT_TRUE(chat.ok()) << chat.status();
      AppendGenerationPrompt(tmpl, &*chat);
      EXPECT_EQ(chat->text, row["text"].get<std::string>());
    }
  }
}

TEST(ChatTemplate, NamedRenderersMatchTheModelsTheyStandFor) {
  ExpectMatchesReference("llama3.1", *ChatTemplateByName("llama3"));
  ExpectMatchesReference("llama2", *ChatTemplateByName("llama2"));
  ExpectMatchesReference("mistral", *ChatTemplateByName("mistral"));
  // chatml is ChatML without Qwen2.5's default system prompt.
  auto chat = RenderChat(*ChatTemplateByName("chatml"),
                         {{ChatRole::kUser, "hi"}, {ChatRole::kAssistant, "yo"}});
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n");
  EXPECT_FALSE(ChatTemplateByName("vicuna").ok());
}

TEST(ChatTemplate, TrainOnAllMarksEveryToken) {
  std::unique_ptr<Tokenizer> tok = FixtureTokenizer();
  auto chat = RenderChat(*ChatTemplateByName("llama3"),
                         {{ChatRole::kUser, "hi"}, {ChatRole::kAssistant, "yo"}});
  auto seq = EncodeChat(*chat, *tok, TrainOn::kAll);
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(MaskString(seq->target), std::string(seq->tokens.size(), '1'));
}

TEST(ChatTemplate, SpecialTokenStringsInContentStayText) {
  std::unique_ptr<Tokenizer> tok = FixtureTokenizer();
  auto chat = RenderChat(
      *ChatTemplateByName("llama3"),
      {{ChatRole::kUser, "<|eot_id|><|start_header_id|>"}, {ChatRole::kAssistant, "ok"}});
  auto seq = EncodeChat(*chat, *tok, TrainOn::kAssistant);
  ASSERT_TRUE(seq.ok());
  int32_t eot = -1;
  for (const auto& [s, id] : tok->template_tokens()) {
    if (s == "<|eot_id|>") eot = id;
  }
  // The template writes <|eot_id|> three times (system, user, assistant); the user's is text.
  EXPECT_EQ(std::count(seq->tokens.begin(), seq->tokens.end(), eot), 3);
}

TEST(ChatTemplate, TemplatesThatRaiseAreErrors) {
  for (const char* file : {"mistral-v0.2.jinja", "mistral-v0.3.jinja"}) {
    auto r =
        RenderChat(FromFixture(file),
                   {{ChatRole::kSystem, "s"}, {ChatRole::kAssistant, "a"}, {ChatRole::kUser, "u"}});
    ASSERT_FALSE(r.ok()) << file;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "After the optional system message"))
        << r.status();
  }
  const std::vector<ChatMessage> sys = {
      {ChatRole::kSystem, "s"}, {ChatRole::kUser, "u"}, {ChatRole::kAssistant, "a"}};
  auto m = RenderChat(*ChatTemplateByName("mistral"), sys);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "no system role")) << m.status();
  auto l =
      RenderChat(*ChatTemplateByName("llama2"),
                 {{ChatRole::kUser, "u"}, {ChatRole::kUser, "v"}, {ChatRole::kAssistant, "a"}});
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(absl::StrContains(l.status().message(), "alternate")) << l.status();
}

TEST(ChatTemplate, ModelDirectoryTemplates) {
  TempDir dir;
  auto missing = ChatTemplateFromModelDir(dir.path());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "data.chat_template"))
      << missing.status();
  dir.Write("tokenizer_config.json", json({{"chat_template", "{{ messages }}"}}).dump());
  auto unknown = ChatTemplateFromModelDir(dir.path());
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(
      absl::StrContains(unknown.status().message(), "tokenizer_config.json's chat_template"))
      << unknown.status();
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "llama2, llama3, chatml or mistral"))
      << unknown.status();
  const std::string qwen = ReadFile(kFixtures + "/templates/qwen2.5.jinja");
  dir.Write(
      "tokenizer_config.json",
      json({{"chat_template", json::array({json({{"name", "tool_use"}, {"template", "x"}}),
                                           json({{"name", "default"}, {"template", qwen}})})}})
          .dump());
  auto listed = ChatTemplateFromModelDir(dir.path());
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->name, "qwen2.5");
  dir.Write("chat_template.jinja", ReadFile(kFixtures + "/templates/llama2.jinja"));
  auto jinja = ResolveChatTemplate("model", dir.path());
  ASSERT_TRUE(jinja.ok()) << jinja.status();
  EXPECT_EQ(jinja->name, "llama2");
  EXPECT_EQ(ResolveChatTemplate("mistral", dir.path())->name, "mistral");
}

TEST(ChatRecord, LayoutsMapToTheSameMessages) {
  auto sharegpt = ParseChatRecord(json::parse(
      R"({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "u"}, {"from": "gpt", "value": "a"}]})"));
  ASSERT_TRUE(sharegpt.ok()) << sharegpt.status();
  ASSERT_EQ(sharegpt->size(), 3u);
  EXPECT_EQ((*sharegpt)[2].role, ChatRole::kAssistant);
  auto alpaca =
      ParseChatRecord(json::parse(R"({"instruction": "do", "input": "this", "output": "done"})"));
  ASSERT_TRUE(alpaca.ok()) << alpaca.status();
  ASSERT_EQ(alpaca->size(), 2u);
  EXPECT_EQ((*alpaca)[0].content, "do\nthis");
  EXPECT_EQ((*alpaca)[1].content, "done");
  auto no_input = ParseChatRecord(
      json::parse(R"({"instruction": "do", "input": "", "output": "x", "system": "s"})"));
  ASSERT_TRUE(no_input.ok());
  ASSERT_EQ(no_input->size(), 3u);
  EXPECT_EQ((*no_input)[1].content, "do");
}

TEST(ChatRecord, BadRecordsAreListedWithFileAndLine) {
  TempDir dir;
  const std::string path = dir.Write(
      "bad.jsonl",
      R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}
{"messages": [{"role": "tool", "content": "u"}, {"role": "assistant", "content": "a"}]}
{"messages": [{"role": "system", "content": "s"}, {"role": "system", "content": "t"}, {"role": "assistant", "content": "a"}]}
{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}, {"role": "system", "content": "s"}]}
{"messages": [{"role": "user", "content": "u"}]}
{"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "a"}]}
{"conversations": [{"from": "bot", "value": "a"}]}
{"text": "x"}
)");
  std::unique_ptr<Tokenizer> tok = FixtureTokenizer();
  ChatTemplate tmpl = *ChatTemplateByName("llama3");
  DataLoadOptions opt;
  opt.format = DataFormat::kChat;
  opt.tokenizer = tok.get();
  opt.chat_template = &tmpl;
  auto r = LoadJsonl(path, opt);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  for (const char* want : {
           "7 bad lines",
           ":2: messages[0].role \"tool\" is not one of system, user, assistant",
           ":3: messages[1]: a system message may only be the first message",
           ":4: messages[2]: a system message may only be the first message",
           ":5: \"messages\" has no assistant message",
           ":6: messages[0].content must be a string",
           ":7: conversations[0].from \"bot\" is not one of system, human, gpt",
           ":8: no \"messages\" (role/content)",
       }) {
    EXPECT_TRUE(absl::StrContains(msg, want)) << "want \"" << want << "\" in:\n" << msg;
  }
  EXPECT_FALSE(absl::StrContains(msg, ":1:")) << msg;
}

TEST(ChatRecord, LoadJsonlReadsChatWithoutAddingBos) {
  TempDir dir;
  const std::string path = dir.Write(
      "ok.jsonl",
      R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]})"
      "\n");
  std::unique_ptr<Tokenizer> tok = FixtureTokenizer();
  ChatTemplate tmpl = *ChatTemplateByName("llama3");
  DataLoadOptions opt;
  opt.format = DataFormat::kChat;
  opt.tokenizer = tok.get();
  opt.chat_template = &tmpl;
  opt.bos_id = tok->bos_id();
  opt.eos_id = tok->eos_id();
  auto r = LoadJsonl(path, opt);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].tokens[0], tok->bos_id());
  EXPECT_NE((*r)[0].tokens[1], tok->bos_id());      // one BOS: the template's
  EXPECT_EQ((*r)[0].tokens.back(), tok->eos_id());  // <|eot_id|>, nothing appended after it
}

}  // namespace
}  // namespace llamafleet::trainer
