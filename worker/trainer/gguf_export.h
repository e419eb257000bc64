// An HF model directory as a GGUF file that llama.cpp and Ollama load, as llama.cpp's
// convert_hf_to_gguf.py writes one: architecture "llama" (Llama and Mistral; q and k rows
// permuted from HF's rotate_half layout to llama.cpp's interleaved pairs) or "qwen2" (q/k/v
// biases, no permutation), the hyperparameters llama.cpp reads, Llama 3.1's RoPE scaling as
// the rope_freqs.weight factors, the tokenizer and chat template (gguf_vocab.h), matrices
// as F16, BF16 or Q8_0 (norms, biases and rope factors F32; a Q8_0 matrix whose rows are
// not whole 32-value blocks F16), plus an Ollama Modelfile beside it.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config.h"
#include "gguf_types.h"
#include "gguf_vocab.h"

namespace llamafleet::trainer {

inline constexpr char kGgufFileName[] = "model.gguf";
inline constexpr char kModelfileName[] = "Modelfile";

// "f16", "bf16" or "q8_0" (any case); INVALID_ARGUMENT listing them otherwise.
absl::StatusOr<GgufTensorType> ParseGgufDtype(absl::string_view name);

// The GGUF name of HF tensor `hf_name` ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"); "" for a name outside MakeLayout's.
std::string GgufTensorName(absl::string_view hf_name);

// Writes <out_dir>/model.gguf and <out_dir>/Modelfile from the HF directory `hf_dir` (the
// two may be the same directory) with matrices as `dtype`; `name` is general.name.
// Errors name the file or field: an unreadable model or tokenizer (gguf_vocab.h), a
// RoPE scaling llama.cpp cannot express.
absl::Status WriteGgufFromHfDir(const std::string& hf_dir, const std::string& out_dir,
                                GgufTensorType dtype, absl::string_view name);

// The GGUF step of an export (ExportOptions::before_commit): writes model.gguf and the
// Modelfile into the staged HF directory from that directory. `dtype_name` as
// ParseGgufDtype reads it (its error otherwise); `name` is general.name.
absl::StatusOr<std::function<absl::Status(const std::string&)>> GgufExportStep(
    absl::string_view dtype_name, std::string name);

// The Ollama Modelfile for a model.gguf beside it: FROM, and a stop parameter per stop
// token of `vocab` (the chat template itself travels in the GGUF).
std::string OllamaModelfile(const GgufVocab& vocab, const LlamaConfig& config);

}  // namespace llamafleet::trainer
