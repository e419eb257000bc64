#include "jobspec/model_presets.h"

#include "absl/strings/str_join.h"

namespace llamafleet::sched {

const std::vector<ModelPreset>& ModelPresets() {
  // The released config.json of each model (docs/jobspec.md#presets lists them with their
  // parameter counts). Llama 3.1 / 3.2: rope_type llama3, factor 8 / 32; Qwen2.5: q/k/v
  // biases; Llama 3.2: tied embeddings.
  // clang-format off
  static const auto* presets = new std::vector<ModelPreset>{
      // name           type       hidden  ffn    L    H    KV  hd   vocab   max pos  theta  eps   llama3 tied   bias   bos     eos     dtype      tok vocab
      {"llama2-7b",     "llama",   4096,  11008,  32,  32, 32, 128,  32000,   4096,   1e4,   1e-5, 0,     false, false, 1,      2,      "float16",  false},
      {"llama2-13b",    "llama",   5120,  13824,  40,  40, 40, 128,  32000,   4096,   1e4,   1e-5, 0,     false, false, 1,      2,      "float16",  false},
      {"llama2-70b",    "llama",   8192,  28672,  80,  64,  8, 128,  32000,   4096,   1e4,   1e-5, 0,     false, false, 1,      2,      "float16",  false},
      {"llama3.1-8b",   "llama",   4096,  14336,  32,  32,  8, 128, 128256, 131072,   5e5,   1e-5, 8,     false, false, 128000, 128001, "bfloat16", false},
      {"llama3.1-70b",  "llama",   8192,  28672,  80,  64,  8, 128, 128256, 131072,   5e5,   1e-5, 8,     false, false, 128000, 128001, "bfloat16", false},
      {"llama3.1-405b", "llama",  16384,  53248, 126, 128,  8, 128, 128256, 131072,   5e5,   1e-5, 8,     false, false, 128000, 128001, "bfloat16", false},
      {"llama3.2-1b",   "llama",   2048,   8192,  16,  32,  8,  64, 128256, 131072,   5e5,   1e-5, 32,    true,  false, 128000, 128001, "bfloat16", false},
      {"llama3.2-3b",   "llama",   3072,   8192,  28,  24,  8, 128, 128256, 131072,   5e5,   1e-5, 32,    true,  false, 128000, 128001, "bfloat16", false},
      {"mistral-7b",    "mistral", 4096,  14336,  32,  32,  8, 128,  32768,  32768,   1e6,   1e-5, 0,     false, false, 1,      2,      "bfloat16", false},
      {"qwen2.5-7b",    "qwen2",   3584,  18944,  28,  28,  4, 128, 152064,  32768,   1e6,   1e-6, 0,     false, true,  151643, 151643, "bfloat16", false},
      {"qwen2.5-72b",   "qwen2",   8192,  29568,  80,  64,  8, 128, 152064,  32768,   1e6,   1e-6, 0,     false, true,  151643, 151643, "bfloat16", false},
      // Trained from scratch in tests and demos; the vocabulary is the tokenizer's.
      {"tiny",          "llama",     64,    176,   2,   4,  4,  16,  32000,   4096,   1e4,   1e-5, 0,     false, false, 1,      2,      "float32",  true},
      {"tiny-gqa",      "llama",     64,    176,   2,   4,  2,  16,  32000,   4096,   1e4,   1e-5, 0,     false, false, 1,      2,      "float32",  true},
  };
  // clang-format on
  return *presets;
}

const ModelPreset* FindModelPreset(const std::string& name) {
  for (const ModelPreset& p : ModelPresets()) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

std::string KnownPresetNames() {
  return absl::StrJoin(ModelPresets(), ", ",
                       [](std::string* out, const ModelPreset& p) { out->append(p.name); });
}

}  // namespace llamafleet::sched
