#include "eval_samples.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "chat_encoding.h"
#include "chat_record.h"
#include "common/safe_open.h"
#include "common/utf8.h"
#include "generation.h"
#include "model_file.h"
#include "preference_record.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

using nlohmann::json;

// At most `limit` bytes of `s`, never ending inside a UTF-8 character.
std::string CutAtCharacter(const std::string& s, size_t limit) {
  return s.substr(0, Utf8PrefixLength(s, limit));
}

// `s` with each invalid UTF-8 byte replaced as the "sample" line's JSON replaces it
// (U+FFFD), so the table shows what the line does (TensorBoard needs UTF-8).
std::string ValidUtf8(const std::string& s) {
  return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace))
      .get<std::string>();
}

// Plain text: BOS (when the tokenizer has one), then the text's ids.
absl::StatusOr<SamplePrompt> TextPrompt(const std::string& text, const PromptEncoding& e) {
  PromptEncoding plain = e;
  plain.chat = nullptr;
  SamplePrompt p;
  LF_ASSIGN_OR_RETURN(p.ids, EncodePromptText(text, plain));
  p.text = text;
  return p;
}

// A conversation through the template, then its generation prompt.
absl::StatusOr<SamplePrompt> ChatPrompt(const std::vector<ChatMessage>& messages,
                                        const PromptEncoding& e) {
  if (e.tokenizer == nullptr) return absl::InvalidArgumentError("messages need a tokenizer");
  if (e.chat == nullptr) {
    return absl::InvalidArgumentError(
        "messages need a chat template (data.chat_template, or the model's)");
  }
  LF_ASSIGN_OR_RETURN(RenderedChat chat, RenderChat(*e.chat, messages));
  AppendGenerationPrompt(*e.chat, &chat);
  LF_ASSIGN_OR_RETURN(Sequence seq, EncodeChat(chat, *e.tokenizer, TrainOn::kAll));
  return SamplePrompt{std::move(seq.tokens), std::move(chat.text), ""};
}

// One line of a prompts file.
absl::StatusOr<SamplePrompt> FilePrompt(const json& record, const PromptEncoding& e) {
  if (!record.is_object()) return absl::InvalidArgumentError("expected a JSON object");
  std::string reference;
  if (auto it = record.find("reference"); it != record.end()) {
    if (!it->is_string()) return absl::InvalidArgumentError("reference: expected a string");
    reference = it->get<std::string>();
  }
  SamplePrompt p;
  if (record.contains("messages")) {
    LF_ASSIGN_OR_RETURN(std::vector<ChatMessage> messages,
                        ParseMessageList(record["messages"], "messages"));
    if (messages.empty()) return absl::InvalidArgumentError("messages: expected a non-empty list");
    LF_ASSIGN_OR_RETURN(p, ChatPrompt(messages, e));
  } else if (record.contains("prompt")) {
    if (!record["prompt"].is_string())
      return absl::InvalidArgumentError("prompt: expected a string");
    LF_ASSIGN_OR_RETURN(p, TextPrompt(record["prompt"].get<std::string>(), e));
  } else {
    LF_ASSIGN_OR_RETURN(p.ids, EncodePromptRecord(record, PromptEncoding{e.tokenizer, nullptr}));
    if (e.tokenizer != nullptr) p.text = e.tokenizer->Decode(p.ids);
  }
  p.reference = std::move(reference);
  return p;
}

// One eval record split into prompt and reference by its format.
absl::StatusOr<SamplePrompt> EvalPrompt(const json& record, DataFormat format,
                                        const PromptEncoding& e) {
  switch (format) {
    case DataFormat::kChat: {
      LF_ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, ParseChatRecord(record));
      size_t last = messages.size();
      while (last > 0 && messages[last - 1].role != ChatRole::kAssistant) --last;
      // ParseChatRecord guarantees an assistant message; one that opens the conversation
      // leaves nothing to prompt with.
      if (last <= 1 || (last == 2 && messages[0].role == ChatRole::kSystem)) {
        return absl::InvalidArgumentError("no user turn before the last assistant turn");
      }
      const std::string reference = messages[last - 1].content;
      messages.resize(last - 1);
      LF_ASSIGN_OR_RETURN(SamplePrompt p, ChatPrompt(messages, e));
      p.reference = reference;
      return p;
    }
    case DataFormat::kPromptCompletion: {
      if (!record.is_object() || !record.contains("prompt") || !record["prompt"].is_string() ||
          !record.contains("completion") || !record["completion"].is_string()) {
        return absl::InvalidArgumentError("expected string fields \"prompt\" and \"completion\"");
      }
      LF_ASSIGN_OR_RETURN(SamplePrompt p, TextPrompt(record["prompt"].get<std::string>(), e));
      p.reference = record["completion"].get<std::string>();
      return p;
    }
    case DataFormat::kPreference: {
      LF_ASSIGN_OR_RETURN(PreferenceRecord pair, ParsePreferenceRecord(record));
      SamplePrompt p;
      if (pair.kind == PreferenceRecord::Kind::kMessages) {
        LF_ASSIGN_OR_RETURN(p, ChatPrompt(pair.prompt_messages, e));
        p.reference = pair.chosen_message.content;
      } else if (pair.kind == PreferenceRecord::Kind::kTokens) {
        if (pair.prompt_ids.empty()) return absl::InvalidArgumentError("prompt_input_ids is empty");
        p.ids = pair.prompt_ids;
        if (e.tokenizer != nullptr) {
          p.text = e.tokenizer->Decode(p.ids);
          p.reference = e.tokenizer->Decode(pair.chosen_ids);
        }
      } else {
        LF_ASSIGN_OR_RETURN(p, TextPrompt(pair.prompt, e));
        p.reference = pair.chosen;
      }
      return p;
    }
    default:
      return absl::InvalidArgumentError(
          "eval.samples.from_eval needs a CHAT, PROMPT_COMPLETION or PREFERENCE eval set");
  }
}

// The first `max_bytes` bytes of the regular file `path` (fewer when it is shorter).
absl::StatusOr<std::string> ReadPrefix(const std::string& path, uint64_t max_bytes) {
  LF_ASSIGN_OR_RETURN(UniqueFd fd, OpenRegularFile(AT_FDCWD, path, path, LastLink::kFollow));
  std::string out(max_bytes, '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::DataLossError(absl::StrCat(path, ": read: ", std::strerror(errno)));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<SamplePrompt>> LoadSamplePrompts(const EvalSamplesOptions& options,
                                                            const std::string& eval_path,
                                                            DataFormat eval_format,
                                                            const PromptEncoding& encoding,
                                                            int64_t max_positions) {
  const bool from_eval = options.prompts_path.empty();
  const std::string path = from_eval ? eval_path : options.prompts_path;
  const size_t wanted = from_eval ? static_cast<size_t>(options.from_eval) : kMaxSamplePrompts;
  if (from_eval && (options.from_eval < 1 || wanted > kMaxSamplePrompts)) {
    return absl::InvalidArgumentError(absl::StrCat("eval.samples.from_eval must be in [1, ",
                                                   kMaxSamplePrompts, "] (got ", options.from_eval,
                                                   ")"));
  }
  if (from_eval && path.empty()) {
    return absl::InvalidArgumentError("eval.samples.from_eval needs data.eval or data.eval_path");
  }
  std::string text;
  if (from_eval) {
    LF_ASSIGN_OR_RETURN(text, ReadPrefix(path, kMaxSampleEvalBytes));
  } else {
    LF_ASSIGN_OR_RETURN(text, ReadModelFile(path, kMaxSamplePromptFileBytes));
  }
  const bool cut = from_eval && text.size() == kMaxSampleEvalBytes;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  // A prefix cut inside a line: that line is incomplete.
  if (cut && !lines.empty()) lines.pop_back();
  std::vector<SamplePrompt> out;
  for (size_t i = 0; i < lines.size() && out.size() < wanted; ++i) {
    if (absl::StripAsciiWhitespace(lines[i]).empty()) continue;
    if (!from_eval && out.size() == kMaxSamplePrompts) break;
    auto fail = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", i + 1, ": ", why));
    };
    const json record = json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded()) return fail("not valid JSON");
    absl::StatusOr<SamplePrompt> p =
        from_eval ? EvalPrompt(record, eval_format, encoding) : FilePrompt(record, encoding);
    if (!p.ok()) return fail(p.status().message());
    if (p->ids.empty()) return fail("the prompt has no tokens");
    if (!options.score.empty() && p->reference.empty()) {
      return fail("no \"reference\" (eval.samples.score needs one on every prompt)");
    }
    if (static_cast<int64_t>(p->ids.size()) + options.max_new_tokens > max_positions) {
      return fail(absl::StrCat(p->ids.size(), " prompt tokens + eval.samples.max_new_tokens ",
                               options.max_new_tokens,
                               " exceed the model's max_position_embeddings ", max_positions));
    }
    out.push_back(*std::move(p));
  }
  if (!from_eval) {
    size_t records = 0;
    for (absl::string_view line : lines) records += !absl::StripAsciiWhitespace(line).empty();
    if (records > kMaxSamplePrompts) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", records, " prompts; eval.samples.prompts holds at most ", kMaxSamplePrompts));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": holds no prompts"));
  if (from_eval && out.size() < wanted && cut) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the first ", wanted, " records exceed ",
                                                   kMaxSampleEvalBytes >> 20, " MiB"));
  }
  return out;
}

std::vector<std::pair<std::string, double>> ScoreSample(const std::string& text,
                                                        const std::string& reference,
                                                        const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, double>> out;
  if (reference.empty()) return out;
  const absl::string_view ref = absl::StripAsciiWhitespace(reference);
  for (const std::string& name : names) {
    if (name == "exact_match")
      out.emplace_back(name, absl::StripAsciiWhitespace(text) == ref ? 1.0 : 0.0);
    if (name == "contains") out.emplace_back(name, absl::StrContains(text, ref) ? 1.0 : 0.0);
  }
  return out;
}

uint64_t SampleSeed(uint64_t training_seed, int64_t step) {
  // splitmix64 of the pair: nearby seeds and steps give unrelated streams.
  uint64_t z = training_seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(step) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string SamplesMarkdown(const std::vector<trainer_events::Sample>& samples) {
  auto cell = [](const std::string& s) {
    std::string c = ValidUtf8(CutAtCharacter(s, kMaxSampleCellBytes));
    if (c.size() < s.size() && s.size() > kMaxSampleCellBytes) c += "…";
    return absl::StrReplaceAll(c, {{"\\", "\\\\"}, {"|", "\\|"}, {"\r", ""}, {"\n", "<br>"}});
  };
  std::vector<std::string> names;
  for (const trainer_events::Sample& s : samples) {
    for (const auto& score : s.scores) {
      if (std::find(names.begin(), names.end(), score.first) == names.end())
        names.push_back(score.first);
    }
  }
  std::string out = "| # | prompt | text | reference |";
  for (const std::string& n : names) absl::StrAppend(&out, " ", n, " |");
  absl::StrAppend(&out, "\n|---|---|---|---|");
  for (size_t i = 0; i < names.size(); ++i) out += "---|";
  out += "\n";
  for (const trainer_events::Sample& s : samples) {
    absl::StrAppend(&out, "| ", s.index, " | ", cell(s.prompt), " | ", cell(s.text), " | ",
                    cell(s.reference), " |");
    for (const std::string& n : names) {
      std::string value;
      for (const auto& score : s.scores) {
        if (score.first == n) value = absl::StrFormat("%g", score.second);
      }
      absl::StrAppend(&out, " ", value, " |");
    }
    out += "\n";
  }
  return out;
}

absl::StatusOr<std::vector<trainer_events::Sample>> GenerateSamples(
    LlamaModel& model, ParamEngine& engine, const Tokenizer* tokenizer, const c10::Device& device,
    const std::vector<SamplePrompt>& prompts, const EvalSamplesOptions& options,
    const std::vector<int32_t>& eos_ids, int64_t step, uint64_t training_seed) {
  GenerationOptions g;
  g.max_new_tokens = options.max_new_tokens;
  g.temperature = options.temperature;
  g.seed = SampleSeed(training_seed, step);
  g.eos_ids = eos_ids;
  std::vector<std::vector<int32_t>> ids;
  for (const SamplePrompt& p : prompts) ids.push_back(p.ids);
  Generator generator(model, engine, tokenizer, device, g);
  LF_ASSIGN_OR_RETURN(std::vector<GeneratedRow> rows, generator.Generate(ids, nullptr));
  std::vector<trainer_events::Sample> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    trainer_events::Sample s;
    s.step = step;
    s.index = static_cast<int32_t>(i);
    s.prompt = CutAtCharacter(prompts[i].text, trainer_events::kSampleTextBytes);
    s.text = CutAtCharacter(rows[i].text, trainer_events::kSampleTextBytes);
    s.tokens = static_cast<int64_t>(rows[i].ids.size());
    s.stop_reason = rows[i].stop_reason;
    s.reference = CutAtCharacter(prompts[i].reference, trainer_events::kSampleTextBytes);
    s.scores = ScoreSample(rows[i].text, prompts[i].reference, options.score);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace llamafleet::trainer
