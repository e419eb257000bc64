// The samples an evaluation makes (eval.samples, docs/jobspec.md#samples): fixed prompts,
// each with an optional reference, generated from at every evaluation by rank 0 and
// printed as "sample" lines (worker/trainer_events.h), scored against the reference and
// shown in TensorBoard as one Markdown table per evaluation.
//
// Prompts come from one of
//   a prompts file (JSONL, at most kMaxSamplePrompts records, kMaxSamplePromptFileBytes):
//     {"prompt": TEXT}        the text as it is (BOS first when the tokenizer has one)
//     {"messages": [...]}     a conversation through the chat template, then its
//                             generation prompt
//     {"tokens": [ids]}       ids as they are
//   each with an optional "reference" string; with eval.samples.score every record needs
//   one (else the run fails at start naming the line);
//   the first N records of the first eval set (from_eval), split by its format:
//     CHAT               the turns before the last assistant turn (template + generation
//                        prompt) / that turn's content
//     PROMPT_COMPLETION  prompt (BOS + text, as training encodes it) / completion
//     PREFERENCE         prompt / chosen answer
//   (TEXT and TOKENS are refused by validation: they have no prompt to take.)
//
// A prompt whose length plus max_new_tokens exceeds the model's max_position_embeddings
// fails at start. Of Torch, this header includes only c10's Device.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "data.h"
#include "prompt_set.h"
#include "worker/trainer_events.h"

namespace llamafleet::trainer {

class LlamaModel;
class ParamEngine;

inline constexpr size_t kMaxSamplePrompts = 64;
inline constexpr uint64_t kMaxSamplePromptFileBytes = 4ull << 20;
// from_eval reads at most this much of the eval file's start.
inline constexpr uint64_t kMaxSampleEvalBytes = 16ull << 20;
// Each cell of the TensorBoard table is cut to this many bytes (the sample lines are not).
inline constexpr size_t kMaxSampleCellBytes = 2048;

// eval.samples as the trainer runs it (validated by jobspec/eval_samples.h).
struct EvalSamplesOptions {
  std::string prompts_path;  // JSONL prompts; "" with from_eval
  int from_eval = 0;         // the first N records of the first eval set; 0 with prompts
  int64_t max_new_tokens = 64;
  double temperature = 0;          // 0: greedy; else sampled, seeded by SampleSeed
  std::vector<std::string> score;  // "exact_match", "contains"
  bool enabled() const { return !prompts_path.empty() || from_eval > 0; }
};

struct SamplePrompt {
  std::vector<int32_t> ids;
  std::string text;       // as the model sees it (the template's text included)
  std::string reference;  // "" = none
};

// The prompts of `options`: from its prompts file, or from the first from_eval records of
// `eval_path` read as `eval_format`. Errors are "PATH:LINE: why" (or name the field);
// `max_positions` bounds each prompt's length + max_new_tokens.
absl::StatusOr<std::vector<SamplePrompt>> LoadSamplePrompts(const EvalSamplesOptions& options,
                                                            const std::string& eval_path,
                                                            DataFormat eval_format,
                                                            const PromptEncoding& encoding,
                                                            int64_t max_positions);

// Each score of `names` for `text` against `reference`: exact_match 1 when both, stripped
// of surrounding ASCII whitespace, are equal; contains 1 when the stripped reference occurs
// in `text`; else 0. Empty when `reference` is.
std::vector<std::pair<std::string, double>> ScoreSample(const std::string& text,
                                                        const std::string& reference,
                                                        const std::vector<std::string>& names);

// The sampling seed at `step`: training.seed and the step mixed (the same pair, the same
// draws; every step its own).
uint64_t SampleSeed(uint64_t training_seed, int64_t step);

// One Markdown table of `samples` (index, prompt, text, reference, each score), as
// TensorBoard's text plugin renders it: '|' escaped, newlines as <br>, cells cut at a
// character edge to kMaxSampleCellBytes, invalid UTF-8 replaced by U+FFFD as the JSON
// lines replace it.
std::string SamplesMarkdown(const std::vector<trainer_events::Sample>& samples);

// Generates one sample per prompt, all in one batch, from `model` over `engine` (a whole
// model, e.g. a LocalEngine on one device), with `options`' tokens and temperature,
// stopping on `eos_ids`; the step's seed from SampleSeed. Texts are cut to
// trainer_events::kSampleTextBytes at a character edge. Throws c10::Error from Torch.
absl::StatusOr<std::vector<trainer_events::Sample>> GenerateSamples(
    LlamaModel& model, ParamEngine& engine, const Tokenizer* tokenizer, const c10::Device& device,
    const std::vector<SamplePrompt>& prompts, const EvalSamplesOptions& options,
    const std::vector<int32_t>& eos_ids, int64_t step, uint64_t training_seed);

}  // namespace llamafleet::trainer
