#include "chat_record.h"

#include "absl/strings/str_cat.h"

namespace llamafleet::trainer {

using nlohmann::json;

namespace {

absl::Status Bad(absl::string_view why) { return absl::InvalidArgumentError(why); }

// Reads a list of {role_key, content_key} objects; `roles` maps the record's role names.
absl::StatusOr<std::vector<ChatMessage>> ReadMessages(
    const json& list, const char* field, const char* role_key, const char* content_key,
    const std::vector<std::pair<std::string, ChatRole>>& roles, const std::string& role_names) {
  if (!list.is_array())
    return Bad(absl::StrCat("field \"", field, "\" must be an array of messages"));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = absl::StrCat(field, "[", i, "]");
    const json& m = list[i];
    if (!m.is_object()) return Bad(absl::StrCat(at, " must be an object"));
    auto role = m.find(role_key);
    if (role == m.end()) return Bad(absl::StrCat(at, " has no \"", role_key, "\""));
    if (!role->is_string()) return Bad(absl::StrCat(at, ".", role_key, " must be a string"));
    auto content = m.find(content_key);
    if (content == m.end()) return Bad(absl::StrCat(at, " has no \"", content_key, "\""));
    if (!content->is_string()) return Bad(absl::StrCat(at, ".", content_key, " must be a string"));
    const std::string& name = role->get_ref<const std::string&>();
    ChatMessage msg;
    bool known = false;
    for (const auto& [n, r] : roles) {
      if (n == name) {
        msg.role = r;
        known = true;
      }
    }
    if (!known) {
      return Bad(absl::StrCat(at, ".", role_key, " \"", name.substr(0, 64), "\" is not one of ",
                              role_names));
    }
    msg.content = content->get<std::string>();
    out.push_back(std::move(msg));
  }
  return out;
}

absl::StatusOr<std::vector<ChatMessage>> ReadAlpaca(const json& j) {
  std::string parts[4];  // instruction, input, output, system
  const char* keys[4] = {"instruction", "input", "output", "system"};
  for (int k = 0; k < 4; ++k) {
    auto it = j.find(keys[k]);
    if (it == j.end() || it->is_null()) {
      if (k == 0 || k == 2) return Bad(absl::StrCat("missing field \"", keys[k], "\""));
      continue;
    }
    if (!it->is_string()) return Bad(absl::StrCat("field \"", keys[k], "\" must be a string"));
    parts[k] = it->get<std::string>();
  }
  std::vector<ChatMessage> out;
  if (j.contains("system")) out.push_back({ChatRole::kSystem, parts[3]});
  out.push_back(
      {ChatRole::kUser, parts[1].empty() ? parts[0] : absl::StrCat(parts[0], "\n", parts[1])});
  out.push_back({ChatRole::kAssistant, parts[2]});
  return out;
}

}  // namespace

const char* ChatRoleName(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem:
      return "system";
    case ChatRole::kUser:
      return "user";
    case ChatRole::kAssistant:
      return "assistant";
  }
  return "?";
}

absl::StatusOr<std::vector<ChatMessage>> ParseMessageList(const json& list, const char* field) {
  return ReadMessages(list, field, "role", "content",
                      {{"system", ChatRole::kSystem},
                       {"user", ChatRole::kUser},
                       {"assistant", ChatRole::kAssistant}},
                      "system, user, assistant");
}

absl::StatusOr<std::vector<ChatMessage>> ParseChatRecord(const json& record) {
  if (!record.is_object()) return Bad("not a JSON object");
  absl::StatusOr<std::vector<ChatMessage>> msgs;
  const char* field = "messages";
  if (auto it = record.find("messages"); it != record.end()) {
    msgs = ReadMessages(*it, "messages", "role", "content",
                        {{"system", ChatRole::kSystem},
                         {"user", ChatRole::kUser},
                         {"assistant", ChatRole::kAssistant}},
                        "system, user, assistant");
  } else if (auto it = record.find("conversations"); it != record.end()) {
    field = "conversations";
    msgs = ReadMessages(
        *it, "conversations", "from", "value",
        {{"system", ChatRole::kSystem}, {"human", ChatRole::kUser}, {"gpt", ChatRole::kAssistant}},
        "system, human, gpt");
  } else if (record.contains("instruction")) {
    msgs = ReadAlpaca(record);
  } else {
    return Bad(
        "no \"messages\" (role/content), \"conversations\" (ShareGPT from/value) or "
        "\"instruction\" "
        "(Alpaca) field");
  }
  if (!msgs.ok()) return msgs.status();
  bool assistant = false;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ChatRole role = (*msgs)[i].role;
    if (role == ChatRole::kSystem && i != 0) {
      return Bad(absl::StrCat(field, "[", i, "]: a system message may only be the first message"));
    }
    assistant |= role == ChatRole::kAssistant;
  }
  if (!assistant)
    return Bad(absl::StrCat("\"", field, "\" has no assistant message (nothing to train on)"));
  return msgs;
}

}  // namespace llamafleet::trainer
