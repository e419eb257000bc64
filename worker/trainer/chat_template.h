// Chat templates: a conversation rendered to the exact text a model's own chat_template
// renders with Hugging Face's apply_chat_template(messages, tokenize=False), by built-in
// renderers, never by guessing. No Torch.
//
// A model's template (tokenizer_config.json's chat_template, or chat_template.jinja beside
// it) is recognised by the SHA-256 of its verbatim string in a small registry of known
// templates, each mapped to a renderer and its parameters; any other template is an error
// that names it and the data.chat_template values that choose a renderer instead. Jinja is
// not interpreted: the families users finetune have a handful of templates, each renderer
// is checked against jinja2 on the real template string (tests/trainer/fixtures/chat), and
// a template that is merely similar (a changed default system prompt, a date) would render
// differently from what the model was trained on.
//
// Renderers (the text each writes; `trim`/`strip` are Python's str.strip()):
//   llama3    <|begin_of_text|>, then per message
//             <|start_header_id|>ROLE<|end_header_id|>\n\n trim(content) <|eot_id|>;
//             the Llama 3.1 and 3.2 forms always open with a system header holding
//             "Cutting Knowledge Date: December 2023\nToday Date: DATE\n\n" then the
//             trimmed system message: DATE is "26 Jul 2024" for 3.1 (and
//             data.chat_template: llama3), today's date ("%d %b %Y", local time, as HF's
//             strftime_now writes it) for 3.2, taken once when the template is resolved.
//   chatml    <|im_start|>ROLE\n content <|im_end|>\n per message; Qwen2.5's form writes its
//             default system prompt when a conversation has none.
//   llama2    <s>[INST] strip([<<SYS>>\n system \n<</SYS>>\n\n] user) [/INST] per user turn,
//             " " strip(assistant) " </s>" per assistant turn; roles must alternate.
//   mistral   <s> then, per turn, Mistral 7B Instruct's form (roles must alternate):
//             v0.1  [INST] user [/INST] and assistant</s>; no system role.
//             v0.2  " [INST] " [system "\n\n"] user " [/INST]" and " " assistant "</s>";
//                   the system message goes into the first user turn.
//             v0.3  "[INST] " [system "\n\n"] user "[/INST]" and " " trim(assistant) "</s>";
//                   the system message goes into the LAST message only when that is a user
//                   turn (a conversation ending with an assistant turn loses it, as HF
//                   renders it). Its tokenizer's [INST]/[/INST] are control tokens, which
//                   the template's own text becomes (chat_encoding.h).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "chat_record.h"

namespace llamafleet::trainer {

// Which tokens of a chat record carry loss (same values as llamafleet.v1.TrainOn).
enum class TrainOn {
  kAssistant = 1,      // every assistant turn: its content and end-of-turn token
  kLastAssistant = 2,  // the last assistant turn only
  kAll = 3,            // every token
};

struct ChatTemplate {
  // kMistral is v0.1's form; kMistralV02 and kMistralV03 those of v0.2 and v0.3.
  enum class Family { kLlama2, kLlama3, kChatml, kMistral, kMistralV02, kMistralV03 };
  Family family = Family::kLlama3;
  std::string name;                  // "llama3.1", "qwen2.5", "chatml", ...: what it renders as
  bool dated_system = false;         // llama3: the 3.1/3.2 system header (always written)
  std::string date = "26 Jul 2024";  // llama3 dated_system: its "Today Date"
  std::string default_system;        // chatml: system message written when there is none
  std::string origin;                // where it was chosen, for messages (a setting or a file)
};

// A rendered conversation: `text` and, as [begin, end) byte ranges of it in order, what the
// template itself wrote (its special-token strings become single tokens there, never in
// message content) and each assistant turn's loss span (its content through the
// end-of-turn text the template writes after it: <|eot_id|>, <|im_end|>, " </s>").
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> literal;
  std::vector<std::pair<size_t, size_t>> assistant;
};

// Renders `messages` (as ParseChatRecord returns them) without a generation prompt.
// INVALID_ARGUMENT where the model's own template raises an exception: llama2 and mistral
// when user and assistant messages do not alternate starting with user (after the
// optional system message), mistral v0.1 for a system message.
absl::StatusOr<RenderedChat> RenderChat(const ChatTemplate& tmpl,
                                        const std::vector<ChatMessage>& messages);

// The text a template's add_generation_prompt appends, as template text (literal):
// llama3 "<|start_header_id|>assistant<|end_header_id|>\n\n", chatml
// "<|im_start|>assistant\n"; llama2 and mistral (every version) write none (their
// templates ignore it).
void AppendGenerationPrompt(const ChatTemplate& tmpl, RenderedChat* chat);

// The renderer data.chat_template names: "llama2", "llama3" (the 3.1 form), "chatml"
// (no default system prompt) or "mistral". INVALID_ARGUMENT for any other name.
absl::StatusOr<ChatTemplate> ChatTemplateByName(const std::string& name);

// The renderer of a verbatim template string, looked up by its SHA-256; `where` names the
// string's source in the error for an unknown one. Llama 3.2's gets today's date.
absl::StatusOr<ChatTemplate> ChatTemplateFromString(const std::string& jinja,
                                                    const std::string& where);

// The model's template from `dir`: chat_template.jinja when present (Hugging Face prefers
// it), else tokenizer_config.json's chat_template, a string or a list of {name, template}
// of which the one named "default" is used. Errors name the file and say how to choose a
// renderer with data.chat_template.
absl::StatusOr<ChatTemplate> ChatTemplateFromModelDir(const std::string& dir);

// data.chat_template's value: a renderer's name, or "model" / "" for the template of the
// model whose tokenizer lies in `tokenizer_dir`.
absl::StatusOr<ChatTemplate> ResolveChatTemplate(const std::string& setting,
                                                 const std::string& tokenizer_dir);

}  // namespace llamafleet::trainer
