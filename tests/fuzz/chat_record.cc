// A JSONL line of data.format chat as the trainer reads it (ParseRecord: the record's
// layout, the renderer, the tokenization with the template's special tokens), under each
// renderer and train_on, chosen by the first byte. Properties: an accepted record has as
// many targets as tokens, at least one of them a loss target, every id inside the
// vocabulary; the rendered spans lie inside the text, in order.
#include "chat_record.h"

#include <string>

#include "chat_fixture.h"
#include "chat_template.h"
#include "data.h"
#include "fuzz_check.h"
#include "model_file.h"

using namespace llamafleet::trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const absl::StatusOr<ChatTemplate> tmpl = FixtureTemplate(data[0]);
  FUZZ_CHECK(tmpl.ok(), "built-in template");
  DataLoadOptions opt;
  opt.format = DataFormat::kChat;
  opt.tokenizer = &FixtureTokenizer();
  opt.chat_template = &*tmpl;
  opt.train_on = static_cast<TrainOn>(1 + (data[0] >> 2) % 3);
  opt.vocab_size = opt.tokenizer->vocab_size();
  const absl::string_view line(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<Sequence> s = ParseRecord("fuzz", 1, line, opt);
  if (!s.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(s.status()), "code %d", static_cast<int>(s.status().code()));
    return 0;
  }
  FUZZ_CHECK(!s->tokens.empty() && s->tokens.size() == s->target.size(), "%zu tokens, %zu targets",
             s->tokens.size(), s->target.size());
  bool any = false;
  for (uint8_t t : s->target) any |= t != 0;
  FUZZ_CHECK(any, "no loss target");
  for (int32_t id : s->tokens) FUZZ_CHECK(id >= 0 && id < opt.vocab_size, "token %d", id);
  // The spans of the same record, rendered again.
  absl::StatusOr<nlohmann::json> j = ParseBoundedJson(line);
  FUZZ_CHECK(j.ok(), "accepted line parses");
  absl::StatusOr<std::vector<ChatMessage>> msgs = ParseChatRecord(*j);
  FUZZ_CHECK(msgs.ok(), "accepted record");
  absl::StatusOr<RenderedChat> chat = RenderChat(*tmpl, *msgs);
  FUZZ_CHECK(chat.ok(), "accepted record renders");
  size_t at = 0;
  for (const auto& [b, e] : chat->assistant) {
    FUZZ_CHECK(at <= b && b <= e && e <= chat->text.size(), "span [%zu, %zu) after %zu", b, e, at);
    at = e;
  }
  return 0;
}
