// One conversation record of `data.format: chat` as messages, whichever of the common
// layouts a JSONL line uses. No Torch.
//
//   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
//   {"conversations": [{"from": "system"|"human"|"gpt", "value": "..."}, ...]}   ShareGPT
//   {"instruction": i, "input": x, "output": o[, "system": s]}                    Alpaca
//
// An Alpaca record is the conversation [system s,] user (i, or i + "\n" + x when x is not
// empty), assistant o.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llamafleet::trainer {

enum class ChatRole { kSystem, kUser, kAssistant };

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

// "system", "user" or "assistant".
const char* ChatRoleName(ChatRole role);

// The messages of `record` (a parsed JSONL line). INVALID_ARGUMENT, naming the field (e.g.
// `messages[2].role "tool" is not one of system, user, assistant`), for a record of none of
// the layouts, a message that is not an object, a role or content that is missing or not a
// string, an unknown role, a system message that is not the first or a second one, and a
// conversation with no assistant message. The caller prefixes FILE:LINE.
absl::StatusOr<std::vector<ChatMessage>> ParseChatRecord(const nlohmann::json& record);

// A list of {"role": system|user|assistant, "content": "..."} objects, `field` naming it in
// errors (e.g. `prompt[1] has no "content"`). No check of the roles' order.
absl::StatusOr<std::vector<ChatMessage>> ParseMessageList(const nlohmann::json& list,
                                                          const char* field);

}  // namespace llamafleet::trainer
