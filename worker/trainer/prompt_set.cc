#include "prompt_set.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "chat_encoding.h"
#include "chat_record.h"
#include "model_file.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

absl::StatusOr<std::vector<int32_t>> EncodeChatPrompt(const std::vector<ChatMessage>& messages,
                                                      const PromptEncoding& e) {
  LF_ASSIGN_OR_RETURN(RenderedChat chat, RenderChat(*e.chat, messages));
  AppendGenerationPrompt(*e.chat, &chat);
  LF_ASSIGN_OR_RETURN(Sequence seq, EncodeChat(chat, *e.tokenizer, TrainOn::kAll));
  return seq.tokens;
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const nlohmann::json& list) {
  if (!list.is_array() || list.empty()) {
    return absl::InvalidArgumentError("messages: expected a non-empty list");
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& m = list[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected {\"role\": string, \"content\": string}"));
    }
    const std::string role = m["role"].get<std::string>();
    ChatMessage msg;
    if (role == "system") {
      msg.role = ChatRole::kSystem;
    } else if (role == "user") {
      msg.role = ChatRole::kUser;
    } else if (role == "assistant") {
      msg.role = ChatRole::kAssistant;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".role \"", role, "\" is not one of system, user, assistant"));
    }
    msg.content = m["content"].get<std::string>();
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> EncodePromptText(const std::string& text,
                                                      const PromptEncoding& e) {
  if (e.tokenizer == nullptr) return absl::InvalidArgumentError("a text prompt needs a tokenizer");
  if (e.chat != nullptr) return EncodeChatPrompt({ChatMessage{ChatRole::kUser, text}}, e);
  LF_ASSIGN_OR_RETURN(std::vector<int32_t> ids, e.tokenizer->Encode(text));
  if (e.tokenizer->bos_id() >= 0) ids.insert(ids.begin(), e.tokenizer->bos_id());
  return ids;
}

absl::StatusOr<std::vector<int32_t>> EncodePromptRecord(const nlohmann::json& record,
                                                        const PromptEncoding& e) {
  if (!record.is_object()) return absl::InvalidArgumentError("expected a JSON object");
  if (record.contains("tokens")) {
    const nlohmann::json& t = record["tokens"];
    if (!t.is_array()) return absl::InvalidArgumentError("tokens: expected a list of ids");
    std::vector<int32_t> ids;
    for (const nlohmann::json& id : t) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return absl::InvalidArgumentError("tokens: expected non-negative integer ids");
      }
      ids.push_back(id.get<int32_t>());
    }
    return ids;
  }
  if (record.contains("messages")) {
    if (e.chat == nullptr) {
      return absl::InvalidArgumentError("messages: a conversation needs --chat");
    }
    if (e.tokenizer == nullptr) return absl::InvalidArgumentError("messages need a tokenizer");
    LF_ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, ParseMessages(record["messages"]));
    return EncodeChatPrompt(messages, e);
  }
  if (record.contains("prompt")) {
    if (!record["prompt"].is_string())
      return absl::InvalidArgumentError("prompt: expected a string");
    return EncodePromptText(record["prompt"].get<std::string>(), e);
  }
  return absl::InvalidArgumentError("expected a \"prompt\", \"messages\" or \"tokens\" field");
}

absl::StatusOr<std::vector<std::vector<int32_t>>> LoadPromptFile(const std::string& path,
                                                                 const PromptEncoding& e) {
  LF_ASSIGN_OR_RETURN(const std::string text, ReadModelFile(path, kMaxPromptFileBytes));
  std::vector<std::vector<int32_t>> prompts;
  int64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    if (prompts.size() >= kMaxPrompts) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": more than ", kMaxPrompts, " prompts; split the file"));
    }
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": not valid JSON"));
    }
    absl::StatusOr<std::vector<int32_t>> ids = EncodePromptRecord(record, e);
    if (!ids.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": ", ids.status().message()));
    }
    prompts.push_back(*std::move(ids));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": holds no prompts"));
  return prompts;
}

}  // namespace llamafleet::trainer
