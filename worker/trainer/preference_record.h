// One record of `data.format: preference` (DPO's pairs), whichever of the common TRL
// layouts a JSONL line uses. No Torch.
//
//   {"prompt": "...", "chosen": "...", "rejected": "..."}                    text
//   {"prompt": [messages], "chosen": [messages], "rejected": [messages]}    conversational
//   {"chosen": [messages], "rejected": [messages]}                          implicit prompt
//   {"prompt_input_ids": [...], "chosen_input_ids": [...],                  pre-tokenized
//    "rejected_input_ids": [...]}
//
// Messages are {"role", "content"} objects as in chat_record.h. "messages" is accepted in
// place of "prompt". A text answer beside a messages prompt is one assistant message; a
// text prompt beside messages answers is one user message. With an implicit prompt the
// prompt is the longest common prefix of the two conversations. An answer (what follows
// the prompt) is exactly one assistant message, or one non-empty text, or a non-empty id
// list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chat_record.h"
#include "nlohmann/json.hpp"

namespace llamafleet::trainer {

struct PreferenceRecord {
  enum class Kind { kText, kMessages, kTokens };
  Kind kind = Kind::kText;
  // kText: the prompt (may be empty) and the two answers (never empty).
  std::string prompt, chosen, rejected;
  // kMessages: the prompt conversation (never empty; a system message only first) and
  // each answer as one non-empty assistant message.
  std::vector<ChatMessage> prompt_messages;
  ChatMessage chosen_message, rejected_message;
  // kTokens: ids used exactly as given (no BOS/EOS added); answers never empty, ids >= 0.
  std::vector<int32_t> prompt_ids, chosen_ids, rejected_ids;
};

// The pair of `record` (a parsed JSONL line). INVALID_ARGUMENT naming the field for a
// record of none of the layouts, a missing or empty answer, a field of the wrong type, a
// message as chat_record.h refuses it, an answer that is not one assistant message, and
// token ids that are not integers in [0, 2^31). The caller prefixes FILE:LINE.
absl::StatusOr<PreferenceRecord> ParsePreferenceRecord(const nlohmann::json& record);

}  // namespace llamafleet::trainer
