// A JSONL line of data.format preference as the trainer reads it (ParseRecordSequences:
// the record's layout, then text, messages under each renderer, or token ids), the
// renderer chosen by the first byte. Properties: an accepted record is exactly two
// sequences, each with as many targets as tokens, at least one loss target and every id
// inside the vocabulary; a pre-tokenized pair's two rows start with the same prompt.
#include "preference_record.h"

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
  opt.format = DataFormat::kPreference;
  opt.tokenizer = &FixtureTokenizer();
  opt.chat_template = &*tmpl;
  opt.vocab_size = opt.tokenizer->vocab_size();
  opt.bos_id = 1;
  opt.eos_id = 2;
  const absl::string_view line(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<std::vector<Sequence>> s = ParseRecordSequences("fuzz", 1, line, opt);
  if (!s.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(s.status()), "code %d", static_cast<int>(s.status().code()));
    return 0;
  }
  FUZZ_CHECK(s->size() == 2, "%zu sequences", s->size());
  for (const Sequence& q : *s) {
    FUZZ_CHECK(!q.tokens.empty() && q.tokens.size() == q.target.size(), "%zu tokens, %zu targets",
               q.tokens.size(), q.target.size());
    bool any = false;
    for (uint8_t t : q.target) any |= t != 0;
    FUZZ_CHECK(any, "no loss target");
    for (int32_t id : q.tokens) FUZZ_CHECK(id >= 0 && id < opt.vocab_size, "token %d", id);
  }
  absl::StatusOr<nlohmann::json> j = ParseBoundedJson(line);
  FUZZ_CHECK(j.ok(), "accepted line parses");
  absl::StatusOr<PreferenceRecord> r = ParsePreferenceRecord(*j);
  FUZZ_CHECK(r.ok(), "accepted record");
  if (r->kind == PreferenceRecord::Kind::kTokens) {
    for (const Sequence& q : *s) {
      FUZZ_CHECK(q.tokens.size() > r->prompt_ids.size(), "row shorter than its prompt");
      for (size_t i = 0; i < r->prompt_ids.size(); ++i) {
        FUZZ_CHECK(q.tokens[i] == r->prompt_ids[i] && q.target[i] == 0, "prompt token %zu", i);
      }
    }
  }
  return 0;
}
