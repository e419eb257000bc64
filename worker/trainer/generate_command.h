// `llamafleet-train generate`: loads an HF-format model (and a PEFT LoRA adapter, merged
// into its weights), encodes the prompts (prompt_set.h) and runs the generator
// (generation.h) over them in batches, streaming JSON lines on stdout:
//   {"index": i, "token": id, "text": "piece"}                     per generated token
//   {"index": i, "text": "...", "tokens": n, "stop_reason": "eos" | "stop" | "length"}
// where i is the prompt's index, `tokens` counts the generated ids (an ending EOS
// included) and the pieces of a prompt concatenate to its text. Invalid UTF-8 in text is
// written as U+FFFD. A summary line goes to stderr: prompts, tokens and tokens/s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "generation.h"

namespace llamafleet::trainer {

inline constexpr int64_t kMaxGenerateBatch = 256;

struct GenerateCommandOptions {
  std::string model_dir;
  std::string adapter_dir;  // empty: none
  std::string tokenizer;    // empty: the model directory's
  std::string prompt;       // exactly one of prompt and prompts_file
  std::string prompts_file;
  bool chat = false;
  std::string chat_template;  // as data.chat_template ("" / "model": the model's own)
  std::string device = "auto";
  int64_t batch_size = 8;        // prompts per batch, 1 .. kMaxGenerateBatch
  GenerationOptions generation;  // eos_ids are filled from the model directory
};

// The model's EOS ids: config.json's eos_token_id (an id or a list),
// generation_config.json's in `model_dir` if present, and the tokenizer's stop ids.
// Errors name the file.
absl::StatusOr<std::vector<int32_t>> ModelEosIds(const std::string& model_dir,
                                                 const std::vector<int32_t>& tokenizer_stop_ids);

absl::Status RunGenerate(const GenerateCommandOptions& options);

}  // namespace llamafleet::trainer
