#include "preference_record.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "util.h"

namespace llamafleet::trainer {

using nlohmann::json;

namespace {

absl::Status Bad(absl::string_view why) { return absl::InvalidArgumentError(why); }

absl::StatusOr<std::vector<int32_t>> ReadIds(const json& j, const char* field, bool may_be_empty) {
  auto it = j.find(field);
  if (it == j.end()) return Bad(absl::StrCat("missing field \"", field, "\""));
  if (!it->is_array())
    return Bad(absl::StrCat("field \"", field, "\" must be an array of integers"));
  std::vector<int32_t> ids;
  for (const json& v : *it) {
    if (!v.is_number_integer())
      return Bad(absl::StrCat("field \"", field, "\" must be an array of integers"));
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id > INT32_MAX)
      return Bad(absl::StrCat("field \"", field, "\": token id ", id, " out of range"));
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty() && !may_be_empty) return Bad(absl::StrCat("field \"", field, "\" is empty"));
  return ids;
}

// A system message only first; `field` names the list in errors.
absl::Status CheckOrder(const std::vector<ChatMessage>& msgs, const std::string& field) {
  for (size_t i = 1; i < msgs.size(); ++i) {
    if (msgs[i].role == ChatRole::kSystem) {
      return Bad(absl::StrCat(field, "[", i, "]: a system message may only be the first message"));
    }
  }
  return absl::OkStatus();
}

// What follows the prompt in an answer: one non-empty assistant message.
absl::StatusOr<ChatMessage> OneAssistant(const std::vector<ChatMessage>& msgs, size_t from,
                                         const char* field) {
  if (msgs.size() != from + 1) {
    return Bad(absl::StrCat("field \"", field,
                            "\" must add exactly one assistant message to the prompt (it adds ",
                            msgs.size() - std::min(msgs.size(), from), ")"));
  }
  const ChatMessage& m = msgs[from];
  if (m.role != ChatRole::kAssistant) {
    return Bad(
        absl::StrCat(field, "[", from, "].role \"", ChatRoleName(m.role), "\" must be assistant"));
  }
  if (m.content.empty()) return Bad(absl::StrCat(field, "[", from, "].content is empty"));
  return m;
}

absl::StatusOr<PreferenceRecord> ReadMessagesRecord(const json& j, const json* prompt,
                                                    const char* prompt_field) {
  PreferenceRecord r;
  r.kind = PreferenceRecord::Kind::kMessages;
  std::vector<ChatMessage> answers[2];
  const char* names[2] = {"chosen", "rejected"};
  for (int k = 0; k < 2; ++k) {
    const json& a = j.at(names[k]);
    if (a.is_string()) {
      answers[k] = {ChatMessage{ChatRole::kAssistant, a.get<std::string>()}};
    } else {
      LF_ASSIGN_OR_RETURN(answers[k], ParseMessageList(a, names[k]));
    }
  }
  size_t from = 0;
  if (prompt == nullptr) {
    // Implicit prompt: the conversations' longest common prefix.
    while (from < answers[0].size() && from < answers[1].size() &&
           answers[0][from].role == answers[1][from].role &&
           answers[0][from].content == answers[1][from].content) {
      ++from;
    }
    if (from == 0)
      return Bad("no \"prompt\", and \"chosen\" and \"rejected\" share no first message");
    r.prompt_messages.assign(answers[0].begin(),
                             answers[0].begin() + static_cast<std::ptrdiff_t>(from));
  } else if (prompt->is_string()) {
    r.prompt_messages = {ChatMessage{ChatRole::kUser, prompt->get<std::string>()}};
  } else {
    LF_ASSIGN_OR_RETURN(r.prompt_messages, ParseMessageList(*prompt, prompt_field));
    if (r.prompt_messages.empty())
      return Bad(absl::StrCat("field \"", prompt_field, "\" is empty"));
  }
  LF_RETURN_IF_ERROR(CheckOrder(r.prompt_messages, prompt == nullptr ? "chosen" : prompt_field));
  // Answers given as whole conversations carry the prompt first.
  const size_t skip = prompt == nullptr ? from : 0;
  LF_ASSIGN_OR_RETURN(r.chosen_message, OneAssistant(answers[0], skip, "chosen"));
  LF_ASSIGN_OR_RETURN(r.rejected_message, OneAssistant(answers[1], skip, "rejected"));
  return r;
}

}  // namespace

absl::StatusOr<PreferenceRecord> ParsePreferenceRecord(const json& j) {
  if (!j.is_object()) return Bad("not a JSON object");
  if (j.contains("chosen_input_ids") || j.contains("rejected_input_ids") ||
      j.contains("prompt_input_ids")) {
    PreferenceRecord r;
    r.kind = PreferenceRecord::Kind::kTokens;
    LF_ASSIGN_OR_RETURN(r.prompt_ids, ReadIds(j, "prompt_input_ids", /*may_be_empty=*/true));
    LF_ASSIGN_OR_RETURN(r.chosen_ids, ReadIds(j, "chosen_input_ids", false));
    LF_ASSIGN_OR_RETURN(r.rejected_ids, ReadIds(j, "rejected_input_ids", false));
    return r;
  }
  for (const char* key : {"chosen", "rejected"}) {
    auto it = j.find(key);
    if (it == j.end()) return Bad(absl::StrCat("missing field \"", key, "\""));
    if (!it->is_string() && !it->is_array()) {
      return Bad(absl::StrCat("field \"", key, "\" must be a string or an array of messages"));
    }
  }
  const char* prompt_field = j.contains("prompt") ? "prompt" : "messages";
  const json* prompt = nullptr;
  if (auto it = j.find(prompt_field); it != j.end()) {
    if (!it->is_string() && !it->is_array()) {
      return Bad(
          absl::StrCat("field \"", prompt_field, "\" must be a string or an array of messages"));
    }
    prompt = &*it;
  }
  const bool text = j.at("chosen").is_string() && j.at("rejected").is_string() &&
                    (prompt == nullptr || prompt->is_string());
  if (!text) return ReadMessagesRecord(j, prompt, prompt_field);
  if (prompt == nullptr) return Bad("missing field \"prompt\" (text answers need a text prompt)");
  PreferenceRecord r;
  r.kind = PreferenceRecord::Kind::kText;
  r.prompt = prompt->get<std::string>();
  r.chosen = j.at("chosen").get<std::string>();
  r.rejected = j.at("rejected").get<std::string>();
  if (r.chosen.empty()) return Bad("field \"chosen\" is empty");
  if (r.rejected.empty()) return Bad("field \"rejected\" is empty");
  return r;
}

}  // namespace llamafleet::trainer
