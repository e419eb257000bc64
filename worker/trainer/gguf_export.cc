#include "gguf_export.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gguf_codec.h"
#include "gguf_writer.h"
#include "hf_io.h"
#include "model.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;

// llama.cpp's quantization version (GGML_QNT_VERSION), written by its converter.
constexpr uint32_t kQuantizationVersion = 2;

// HF's q/k rows are [head][rotate_half halves][d/2]; llama.cpp's "llama" architecture
// rotates interleaved pairs, so each head's rows become [d/2][2] (convert_hf_to_gguf's
// permute).
at::Tensor PermuteForInterleavedRope(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0);
  std::vector<int64_t> split = {heads, 2, rows / heads / 2};
  for (int64_t i = 1; i < w.dim(); ++i) split.push_back(w.size(i));
  return w.reshape(split).transpose(1, 2).reshape(w.sizes()).contiguous();
}

// Llama 3.1's RoPE scaling as llama.cpp takes it: a factor per frequency that divides it
// (1 for high frequencies, `factor` for low ones, smoothed between).
std::vector<float> Llama3RopeFactors(const LlamaConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const int64_t d = c.head_dim();
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_len / s.low_freq_factor,
               high_wavelen = old_len / s.high_freq_factor;
  std::vector<float> factors;
  for (int64_t i = 0; i < d; i += 2) {
    const float freq = 1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(i) / d);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(static_cast<float>(s.factor));
    } else {
      const double smooth =
          (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      factors.push_back(static_cast<float>(1.0 / ((1 - smooth) / s.factor + smooth)));
    }
  }
  return factors;
}

void AddHyperparameters(const LlamaConfig& c, absl::string_view arch, GgufTensorType dtype,
                        absl::string_view name, GgufWriter* w) {
  w->AddString("general.architecture", arch);
  w->AddString("general.name", name);
  w->AddU32("general.file_type", GgufFileType(dtype));
  w->AddU32("general.quantization_version", kQuantizationVersion);
  auto key = [&](absl::string_view k) { return absl::StrCat(arch, ".", k); };
  w->AddU32(key("vocab_size"), static_cast<uint32_t>(c.vocab_size));
  w->AddU32(key("context_length"), static_cast<uint32_t>(c.max_position_embeddings));
  w->AddU32(key("embedding_length"), static_cast<uint32_t>(c.hidden_size));
  w->AddU32(key("block_count"), static_cast<uint32_t>(c.num_hidden_layers));
  w->AddU32(key("feed_forward_length"), static_cast<uint32_t>(c.intermediate_size));
  w->AddU32(key("attention.head_count"), static_cast<uint32_t>(c.num_attention_heads));
  w->AddU32(key("attention.head_count_kv"), static_cast<uint32_t>(c.num_key_value_heads));
  w->AddF32(key("rope.freq_base"), static_cast<float>(c.rope_theta));
  w->AddF32(key("attention.layer_norm_rms_epsilon"), static_cast<float>(c.rms_norm_eps));
  w->AddU32(key("rope.dimension_count"), static_cast<uint32_t>(c.head_dim()));
  if (c.head_dim() * c.num_attention_heads != c.hidden_size) {
    w->AddU32(key("attention.key_length"), static_cast<uint32_t>(c.head_dim()));
    w->AddU32(key("attention.value_length"), static_cast<uint32_t>(c.head_dim()));
  }
}

std::string Quoted(absl::string_view s) { return absl::StrCat("\"", s, "\""); }

}  // namespace

absl::StatusOr<GgufTensorType> ParseGgufDtype(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "f16") return GgufTensorType::kF16;
  if (n == "bf16") return GgufTensorType::kBf16;
  if (n == "q8_0") return GgufTensorType::kQ8_0;
  return absl::InvalidArgumentError(
      absl::StrCat("GGUF dtype \"", name, "\": expected f16, bf16 or q8_0"));
}

std::string GgufTensorName(absl::string_view hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  const std::vector<std::string> parts = absl::StrSplit(hf_name, '.');
  int layer;
  if (parts.size() < 5 || parts[0] != "model" || parts[1] != "layers" ||
      !absl::SimpleAtoi(parts[2], &layer))
    return "";
  const std::string block = absl::StrCat("blk.", layer, ".");
  const std::string rest = absl::StrJoin(parts.begin() + 3, parts.end(), ".");
  static const std::pair<const char*, const char*> kMap[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  for (const auto& [hf, gguf] : kMap) {
    if (rest == hf) return block + gguf;
  }
  return "";
}

std::string OllamaModelfile(const GgufVocab& vocab, const LlamaConfig& config) {
  std::string out =
      "# Ollama: `ollama create NAME -f Modelfile` in this directory. The chat template is the\n"
      "# model's own, stored in model.gguf (tokenizer.chat_template).\n"
      "FROM ./model.gguf\n";
  absl::StrAppend(&out, "PARAMETER num_ctx ", config.max_position_embeddings, "\n");
  for (int32_t id : vocab.stop_ids) {
    if (id < 0 || id >= static_cast<int32_t>(vocab.tokens.size())) continue;
    const std::string& text = vocab.tokens[id];
    // Only a token whose text can be stated on one quoted line.
    if (text.empty() || absl::StrContains(text, "\"") || absl::StrContains(text, "\n") ||
        absl::StrContains(text, "\\")) {
      continue;
    }
    absl::StrAppend(&out, "PARAMETER stop ", Quoted(text), "\n");
  }
  return out;
}

absl::StatusOr<std::function<absl::Status(const std::string&)>> GgufExportStep(
    absl::string_view dtype_name, std::string name) {
  LF_ASSIGN_OR_RETURN(GgufTensorType dtype, ParseGgufDtype(dtype_name));
  return std::function<absl::Status(const std::string&)>(
      [dtype, name = std::move(name)](const std::string& staged_dir) {
        return WriteGgufFromHfDir(staged_dir, staged_dir, dtype, name);
      });
}

absl::Status WriteGgufFromHfDir(const std::string& hf_dir, const std::string& out_dir,
                                GgufTensorType dtype, absl::string_view name) {
  LF_ASSIGN_OR_RETURN(std::unique_ptr<HfModelDir> hf, HfModelDir::Open(hf_dir));
  const LlamaConfig& c = hf->config();
  if (c.rope_scaling.type != RopeScaling::Type::kDefault &&
      c.rope_scaling.type != RopeScaling::Type::kLlama3) {
    return absl::FailedPreconditionError(
        absl::StrCat(hf_dir, "/config.json: rope_scaling has no GGUF form"));
  }
  LF_ASSIGN_OR_RETURN(GgufVocab vocab, ReadGgufVocab(hf_dir, c));
  const bool qwen2 = c.family == ModelFamily::kQwen2;
  const std::string arch = qwen2 ? "qwen2" : "llama";

  GgufWriter writer;
  AddHyperparameters(c, arch, dtype, name, &writer);
  AddGgufVocabMetadata(vocab, &writer);

  struct Planned {
    std::string hf_name;  // "" for rope_freqs
    std::string gguf_name;
    GgufTensorType type;
  };
  std::vector<Planned> plan;
  std::vector<float> rope_factors;
  auto type_of = [&](const std::vector<int64_t>& shape) {
    if (shape.size() == 1) return GgufTensorType::kF32;
    if (dtype == GgufTensorType::kQ8_0 && shape.back() % kQ8_0BlockValues != 0)
      return GgufTensorType::kF16;
    return dtype;
  };
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) {
    rope_factors = Llama3RopeFactors(c);
    plan.push_back({"", "rope_freqs.weight", GgufTensorType::kF32});
    LF_RETURN_IF_ERROR(writer.AddTensor(
        "rope_freqs.weight", {static_cast<int64_t>(rope_factors.size())}, GgufTensorType::kF32));
  }
  for (const UnitLayout& unit : MakeLayout(c)) {
    for (size_t i = 0; i < unit.param_names.size(); ++i) {
      const std::string gguf_name = GgufTensorName(unit.param_names[i]);
      if (gguf_name.empty())
        return absl::InternalError(absl::StrCat("no GGUF name for ", unit.param_names[i]));
      plan.push_back({unit.param_names[i], gguf_name, type_of(unit.shapes[i])});
      LF_RETURN_IF_ERROR(writer.AddTensor(gguf_name, unit.shapes[i], plan.back().type));
    }
  }
  const std::string gguf_path = (fs::path(out_dir) / kGgufFileName).string();
  LF_RETURN_IF_ERROR(writer.Open(gguf_path));
  for (const Planned& p : plan) {
    at::Tensor t;
    if (p.hf_name.empty()) {
      t = at::tensor(rope_factors, at::kFloat);
    } else {
      LF_ASSIGN_OR_RETURN(t, hf->Read(p.hf_name, at::kFloat));
    }
    if (!qwen2 && absl::EndsWith(p.hf_name, "q_proj.weight"))
      t = PermuteForInterleavedRope(t, c.num_attention_heads);
    if (!qwen2 && absl::EndsWith(p.hf_name, "k_proj.weight"))
      t = PermuteForInterleavedRope(t, c.num_key_value_heads);
    t = t.contiguous();
    LF_ASSIGN_OR_RETURN(std::string bytes, EncodeGgufTensor(p.type, t.data_ptr<float>(),
                                                            static_cast<uint64_t>(t.numel())));
    LF_RETURN_IF_ERROR(writer.WriteTensor(bytes));
  }
  LF_RETURN_IF_ERROR(writer.Finish());
  return WriteStringToFile((fs::path(out_dir) / kModelfileName).string(),
                           OllamaModelfile(vocab, c));
}

}  // namespace llamafleet::trainer
