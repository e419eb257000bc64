// The prompts of `llamafleet-train generate`: one from the command line or a JSONL file of
// them, as token ids. No Torch.
//
// A file's lines are each one of
//   {"prompt": "text"}       encoded as text is for training: BOS (when the tokenizer has
//                            one), then the text's ids; with chat, one user message
//   {"messages": [...]}      a conversation ({"role": system | user | assistant,
//                            "content": "..."}) through the chat template, followed by
//                            the template's generation prompt (chat_template.h)
//   {"tokens": [ids]}        ids as they are
// Blank lines are skipped. Bounded: kMaxPromptFileBytes, kMaxPrompts prompts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "chat_template.h"
#include "nlohmann/json.hpp"
#include "tokenizer.h"

namespace llamafleet::trainer {

inline constexpr uint64_t kMaxPromptFileBytes = 16ull << 20;
inline constexpr size_t kMaxPrompts = 4096;

struct PromptEncoding {
  const Tokenizer* tokenizer = nullptr;  // required for text and messages
  // The chat template: "prompt" text becomes a user message, "messages" need it. Null:
  // "prompt" is plain text and "messages" are refused.
  const ChatTemplate* chat = nullptr;
};

// `text` (the --prompt flag) as ids, as a {"prompt": text} line is.
absl::StatusOr<std::vector<int32_t>> EncodePromptText(const std::string& text,
                                                      const PromptEncoding& encoding);

// One parsed line (see the file comment); errors name the field.
absl::StatusOr<std::vector<int32_t>> EncodePromptRecord(const nlohmann::json& record,
                                                        const PromptEncoding& encoding);

// Every prompt of the JSONL file `path`; errors are "PATH:LINE: why".
absl::StatusOr<std::vector<std::vector<int32_t>>> LoadPromptFile(const std::string& path,
                                                                 const PromptEncoding& encoding);

}  // namespace llamafleet::trainer
