// GGUF export: the writer and reader against each other and against Torch's own F16/BF16
// rounding, the reader against hostile files, the SentencePiece piece reader against the
// sentencepiece library's view of the same model (fixtures/gguf/spm_pieces.json), and
// whole exports of small Llama (SentencePiece) and Qwen2 (tokenizer.json) models read back
// tensor by tensor and key by key.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "gguf_codec.h"
#include "gguf_export.h"
#include "gguf_reader.h"
#include "gguf_vocab.h"
#include "gguf_writer.h"
#include "hf_io.h"
#include "model.h"
#include "nlohmann/json.hpp"
#include "tests/testing/process.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;
using ::llamafleet::testing::ReadFile;
using ::llamafleet::testing::TempDir;
using nlohmann::json;

std::vector<float> ToVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// What Torch makes of `values` in `dtype` (F16/BF16 rounding), back in float.
std::vector<float> TorchRounded(const std::vector<float>& values, at::ScalarType dtype) {
  return ToVector(at::tensor(values, at::kFloat).to(dtype));
}

// Checks the decoded tensor against `expected`: exactly Torch's rounding for F32/F16/BF16,
// within Q8_0's per-block bound otherwise.
void ExpectEncoded(GgufTensorType type, const std::vector<float>& expected,
                   const std::vector<float>& got, const std::string& name) {
  ASSERT_EQ(expected.size(), got.size()) << name;
  if (type == GgufTensorType::kQ8_0) {
    for (size_t b = 0; b < expected.size(); b += kQ8_0BlockValues) {
      float amax = 0;
      for (size_t j = b; j < b + kQ8_0BlockValues; ++j)
        amax = std::max(amax, std::fabs(expected[j]));
      const double bound = Q8_0ErrorBound(amax);
      for (size_t j = b; j < b + kQ8_0BlockValues; ++j) {
        ASSERT_LE(std::fabs(expected[j] - got[j]), bound) << name << " element " << j;
      }
    }
    return;
  }
  const std::vector<float> want = type == GgufTensorType::kF32 ? expected
                                  : type == GgufTensorType::kF16
                                      ? TorchRounded(expected, at::kHalf)
                                      : TorchRounded(expected, at::kBFloat16);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(want[i], got[i]) << name << " element " << i;
}

std::vector<float> Random(int64_t n, uint64_t seed, float scale = 1.0f) {
  at::manual_seed(seed);
  return ToVector(at::randn({n}) * scale);
}

TEST(GgufWriter, ReadsBackEveryMetadataTypeAndTensorType) {
  TempDir tmp;
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.block_count", 7);
  w.AddI32("tokenizer.ggml.some_id", -3);
  w.AddF32("llama.rope.freq_base", 500000.0f);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.AddStringArray("tokenizer.ggml.tokens", {"a", "", "\xe2\x96\x81hello"});
  w.AddF32Array("tokenizer.ggml.scores", {0.5f, -1000.0f});
  w.AddI32Array("tokenizer.ggml.token_type", {1, 3, 6});
  // Values that exercise rounding: halfway cases, subnormals, overflow, huge and tiny.
  std::vector<float> edge = {0.0f,
                             -0.0f,
                             1.0f / 3,
                             65504.0f,
                             65520.0f,
                             1e-7f,
                             6.1e-5f,
                             5.96e-8f,
                             2.98e-8f,
                             1e30f,
                             -1e-30f,
                             1.00048828125f,
                             1.0009765625f + 0.00048828125f,
                             3.14159f,
                             -2.5f,
                             1.0f + 1.0f / 256,
                             1.0f + 3.0f / 512};
  const std::vector<float> f32 = Random(15, 1), f16 = Random(64, 2), bf16 = Random(4 * 17, 3),
                           q8 = Random(2 * 64, 4);
  std::vector<float> f16_edges = edge;
  f16_edges.resize(32, 0.25f);
  ASSERT_TRUE(w.AddTensor("a", {3, 5}, GgufTensorType::kF32).ok());
  ASSERT_TRUE(w.AddTensor("b", {2, 32}, GgufTensorType::kF16).ok());
  ASSERT_TRUE(w.AddTensor("c", {4, 17}, GgufTensorType::kBf16).ok());
  ASSERT_TRUE(w.AddTensor("d", {2, 64}, GgufTensorType::kQ8_0).ok());
  ASSERT_TRUE(w.AddTensor("e", {32}, GgufTensorType::kF16).ok());
  EXPECT_FALSE(w.AddTensor("f", {2, 48}, GgufTensorType::kQ8_0).ok());  // rows are not whole blocks
  EXPECT_FALSE(w.AddTensor("a", {1}, GgufTensorType::kF32).ok());       // a duplicate
  const std::string path = tmp.path() + "/t.gguf";
  ASSERT_TRUE(w.Open(path).ok());
  const std::vector<std::pair<GgufTensorType, std::vector<float>>> data = {
      {GgufTensorType::kF32, f32},
      {GgufTensorType::kF16, f16},
      {GgufTensorType::kBf16, bf16},
      {GgufTensorType::kQ8_0, q8},
      {GgufTensorType::kF16, f16_edges}};
  for (const auto& [type, values] : data) {
    auto bytes = EncodeGgufTensor(type, values.data(), values.size());
    ASSERT_TRUE(bytes.ok());
    ASSERT_TRUE(w.WriteTensor(*bytes).ok());
  }
  ASSERT_TRUE(w.Finish().ok());

  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 32u);
  EXPECT_EQ(g.keys(),
            (std::vector<std::string>{
                "general.alignment", "general.architecture", "llama.block_count",
                "tokenizer.ggml.some_id", "llama.rope.freq_base", "tokenizer.ggml.add_bos_token",
                "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}));
  EXPECT_EQ(g.Find("general.architecture")->strings, std::vector<std::string>{"llama"});
  EXPECT_EQ(g.Find("llama.block_count")->type, GgufValueType::kU32);
  EXPECT_EQ(g.Find("llama.block_count")->ints, std::vector<int64_t>{7});
  EXPECT_EQ(g.Find("tokenizer.ggml.some_id")->ints, std::vector<int64_t>{-3});
  EXPECT_EQ(g.Find("llama.rope.freq_base")->floats, std::vector<double>{500000.0});
  EXPECT_EQ(g.Find("tokenizer.ggml.add_bos_token")->type, GgufValueType::kBool);
  EXPECT_EQ(g.Find("tokenizer.ggml.tokens")->strings,
            (std::vector<std::string>{"a", "", "\xe2\x96\x81hello"}));
  EXPECT_EQ(g.Find("tokenizer.ggml.scores")->floats, (std::vector<double>{0.5, -1000.0}));
  EXPECT_EQ(g.Find("tokenizer.ggml.token_type")->elem_type, GgufValueType::kI32);
  EXPECT_EQ(g.Find("tokenizer.ggml.token_type")->ints, (std::vector<int64_t>{1, 3, 6}));
  ASSERT_EQ(g.tensors().size(), data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    const GgufTensorInfo& t = g.tensors()[i];
    EXPECT_EQ(t.type, data[i].first);
    EXPECT_EQ(t.offset % 32, 0u);
    auto values = DecodeGgufTensor(t.type, g.TensorData(t), t.numel());
    ASSERT_TRUE(values.ok());
    ExpectEncoded(t.type, data[i].second, *values, t.name);
  }
  EXPECT_EQ(g.FindTensor("a")->shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(g.FindTensor("d")->bytes, 4u * 34u);
}

// A valid small file, then damaged ones: each is refused with a message, none crashes.
TEST(GgufReader, RefusesDamagedAndHostileFiles) {
  TempDir tmp;
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", {"x", "y"});
  ASSERT_TRUE(w.AddTensor("t", {2, 32}, GgufTensorType::kQ8_0).ok());
  ASSERT_TRUE(w.Open(tmp.path() + "/ok.gguf").ok());
  ASSERT_TRUE(w.WriteTensor(std::string(68, '\1')).ok());
  ASSERT_TRUE(w.Finish().ok());
  const std::string good = ReadFile(tmp.path() + "/ok.gguf");
  ASSERT_TRUE(GgufFile::Parse(good, "ok").ok());
  // The tensor's 68 bytes end 28 bytes before the file's end (padding to 32, not needed).
  for (size_t n = 0; n + 28 < good.size(); ++n) {
    EXPECT_FALSE(GgufFile::Parse(good.substr(0, n), "cut").ok()) << "cut at " << n;
  }
  auto with = [&](size_t at, const std::string& bytes) {
    std::string s = good;
    s.replace(at, bytes.size(), bytes);
    return GgufFile::Parse(s, "bad");
  };
  auto u64 = [](uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  EXPECT_NE(with(0, "GGUX").status().message().find("not a GGUF file"), std::string::npos);
  EXPECT_NE(with(4, u32(2)).status().message().find("version 2"), std::string::npos);
  EXPECT_NE(with(8, u64(1ull << 40)).status().message().find("tensors"), std::string::npos);
  EXPECT_NE(with(16, u64(~0ull)).status().message().find("metadata entries"), std::string::npos);
  // The first key's length (general.alignment: 17 bytes) made huge.
  EXPECT_NE(with(24, u64(1ull << 62)).status().message().find("past the end of the file"),
            std::string::npos);
  // general.alignment's value (after key and type) made 3, then 0.
  const size_t alignment_value = 24 + 8 + 17 + 4;
  EXPECT_NE(with(alignment_value, u32(3)).status().message().find("power of two"),
            std::string::npos);
  EXPECT_NE(with(alignment_value, u32(0)).status().message().find("power of two"),
            std::string::npos);
  // The tensor info: name "t", n_dims 2, dims 32 and 2, type, offset.
  const size_t info = good.find(std::string("\x01\0\0\0\0\0\0\0t", 9));
  ASSERT_NE(info, std::string::npos);
  EXPECT_NE(with(info + 9, u32(5)).status().message().find("5 dimensions"), std::string::npos);
  EXPECT_NE(with(info + 13, u64(1ull << 62)).status().message().find("dimension"),
            std::string::npos);
  EXPECT_NE(with(info + 13, u64(33)).status().message().find("Q8_0"), std::string::npos);
  EXPECT_NE(with(info + 21, u64(1ull << 40)).status().message().find("larger than the file"),
            std::string::npos);
  EXPECT_NE(with(info + 29, u32(12)).status().message().find("tensor type 12"), std::string::npos);
  EXPECT_NE(with(info + 33, u64(32)).status().message().find("expected 0"), std::string::npos);
  // The string array's count made larger than the file.
  const size_t tokens = good.find("tokenizer.ggml.tokens") + 21 + 4 + 4;
  EXPECT_NE(with(tokens, u64(1ull << 40)).status().message().find("more than the file holds"),
            std::string::npos);
}

TEST(GgufVocab, SentencePiecePiecesMatchTheLibrary) {
  const std::string dir = LLAMAFLEET_GGUF_FIXTURES;
  GgufVocab v;
  ASSERT_TRUE(ParseSentencePiecePieces(ReadFile(dir + "/spm/tokenizer.model"), "spm", &v).ok());
  const json want = json::parse(ReadFile(dir + "/spm_pieces.json"));
  ASSERT_EQ(v.tokens.size(), want["pieces"].size());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    EXPECT_EQ(v.tokens[i], want["pieces"][i]["piece"].get<std::string>()) << i;
    EXPECT_EQ(v.scores[i], want["pieces"][i]["score"].get<float>()) << i;
    EXPECT_EQ(v.token_types[i], want["pieces"][i]["type"].get<int>()) << i;
  }
  EXPECT_EQ(v.unk_id, want["unk_id"].get<int>());
  EXPECT_FALSE(ParseSentencePiecePieces("\x0a\xff\xff\xff\xff\x0f", "bad", &v).ok());
}

// A random model in an HF directory, with the tokenizer files copied in.
std::map<std::string, at::Tensor> MakeHfDir(
    const LlamaConfig& c, const std::string& dir,
    const std::map<std::string, std::string>& tokenizer_files) {
  std::map<std::string, at::Tensor> weights;
  const std::vector<UnitLayout> layout = MakeLayout(c);
  at::manual_seed(7);
  for (const UnitLayout& u : layout) {
    for (size_t i = 0; i < u.param_names.size(); ++i)
      weights[u.param_names[i]] = at::randn(u.shapes[i]) * 0.5;
  }
  ExportOptions o;
  o.dtype = StDtype::kF32;
  for (const auto& [name, source] : tokenizer_files) o.extra_files[name] = ReadFile(source);
  auto fetch = [&](int u) -> absl::StatusOr<std::vector<at::Tensor>> {
    std::vector<at::Tensor> out;
    for (const std::string& n : layout[u].param_names) out.push_back(weights[n]);
    return out;
  };
  absl::Status s = ExportHfDir(c, layout, fetch, dir, o);
  EXPECT_TRUE(s.ok()) << s;
  return weights;
}

// convert_hf_to_gguf's permutation written out element by element: within each head of d
// rows, GGUF row 2i + j is HF row j * d/2 + i.
at::Tensor Interleaved(const at::Tensor& w, int64_t heads) {
  const int64_t d = w.size(0) / heads;
  at::Tensor out = at::empty_like(w);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) out[h * d + 2 * i + j] = w[h * d + j * (d / 2) + i];
    }
  }
  return out;
}

void ExpectTensorsReadBack(const GgufFile& g, const LlamaConfig& c,
                           const std::map<std::string, at::Tensor>& hf, GgufTensorType dtype,
                           bool permuted) {
  size_t count = 0;
  for (const auto& [name, weight] : hf) {
    const std::string gguf_name = GgufTensorName(name);
    const GgufTensorInfo* t = g.FindTensor(gguf_name);
    ASSERT_NE(t, nullptr) << gguf_name;
    ++count;
    EXPECT_EQ(t->shape, weight.sizes().vec()) << gguf_name;
    at::Tensor want = weight;
    if (permuted && name.find("q_proj.weight") != std::string::npos)
      want = Interleaved(weight, c.num_attention_heads);
    if (permuted && name.find("k_proj.weight") != std::string::npos)
      want = Interleaved(weight, c.num_key_value_heads);
    const GgufTensorType expected_type = weight.dim() == 1 ? GgufTensorType::kF32 : dtype;
    EXPECT_EQ(t->type, expected_type) << gguf_name;
    auto values = DecodeGgufTensor(t->type, g.TensorData(*t), t->numel());
    ASSERT_TRUE(values.ok()) << values.status();
    ExpectEncoded(t->type, ToVector(want), *values, gguf_name);
  }
  EXPECT_EQ(g.tensors().size(), count);
}

int64_t U(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.Find(key);
  EXPECT_NE(v, nullptr) << key;
  return v ? v->ints.at(0) : -1;
}

TEST(GgufExport, LlamaWithSentencePieceReadsBackEveryTensorAndKey) {
  const std::string fixtures = LLAMAFLEET_GGUF_FIXTURES;
  LlamaConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000;
  c.vocab_size = 520;  // 8 rows past the tokenizer's 512
  c.max_position_embeddings = 128;
  TempDir tmp;
  const auto weights =
      MakeHfDir(c, tmp.path() + "/hf",
                {{"tokenizer.model", fixtures + "/spm/tokenizer.model"},
                 {"tokenizer_config.json", fixtures + "/spm/tokenizer_config.json"}});
  const json pieces = json::parse(ReadFile(fixtures + "/spm_pieces.json"))["pieces"];
  const std::string chat_template =
      json::parse(ReadFile(fixtures + "/spm/tokenizer_config.json"))["chat_template"]
          .get<std::string>();
  for (GgufTensorType dtype :
       {GgufTensorType::kF16, GgufTensorType::kBf16, GgufTensorType::kQ8_0}) {
    SCOPED_TRACE(GgufTensorTypeName(dtype));
    const std::string out = tmp.path() + "/" + GgufTensorTypeName(dtype);
    fs::create_directory(out);
    absl::Status s = WriteGgufFromHfDir(tmp.path() + "/hf", out, dtype, "tiny");
    ASSERT_TRUE(s.ok()) << s;
    auto f = GgufFile::Open(out + "/model.gguf");
    ASSERT_TRUE(f.ok()) << f.status();
    const GgufFile& g = **f;
    EXPECT_EQ(g.Find("general.architecture")->strings.at(0), "llama");
    EXPECT_EQ(g.Find("general.name")->strings.at(0), "tiny");
    EXPECT_EQ(U(g, "general.file_type"), dtype == GgufTensorType::kF16    ? 1
                                         : dtype == GgufTensorType::kBf16 ? 32
                                                                          : 7);
    EXPECT_EQ(U(g, "llama.context_length"), 128);
    EXPECT_EQ(U(g, "llama.embedding_length"), 64);
    EXPECT_EQ(U(g, "llama.block_count"), 2);
    EXPECT_EQ(U(g, "llama.feed_forward_length"), 96);
    EXPECT_EQ(U(g, "llama.attention.head_count"), 4);
    EXPECT_EQ(U(g, "llama.attention.head_count_kv"), 2);
    EXPECT_EQ(U(g, "llama.rope.dimension_count"), 16);
    EXPECT_EQ(U(g, "llama.vocab_size"), 520);
    EXPECT_EQ(g.Find("llama.rope.freq_base")->floats.at(0), 10000.0);
    EXPECT_EQ(g.Find("llama.attention.layer_norm_rms_epsilon")->floats.at(0),
              static_cast<double>(1e-5f));
    EXPECT_EQ(g.Find("tokenizer.ggml.model")->strings.at(0), "llama");
    const GgufValue& tokens = *g.Find("tokenizer.ggml.tokens");
    const GgufValue& scores = *g.Find("tokenizer.ggml.scores");
    const GgufValue& types = *g.Find("tokenizer.ggml.token_type");
    ASSERT_EQ(tokens.strings.size(), 520u);
    for (size_t i = 0; i < pieces.size(); ++i) {
      EXPECT_EQ(tokens.strings[i], pieces[i]["piece"].get<std::string>());
      EXPECT_EQ(scores.floats[i], pieces[i]["score"].get<float>());
      EXPECT_EQ(types.ints[i], pieces[i]["type"].get<int>());
    }
    EXPECT_EQ(tokens.strings[515], "[PAD515]");
    EXPECT_EQ(types.ints[515], 5);
    EXPECT_EQ(U(g, "tokenizer.ggml.bos_token_id"), 1);
    EXPECT_EQ(U(g, "tokenizer.ggml.eos_token_id"), 2);
    EXPECT_EQ(U(g, "tokenizer.ggml.unknown_token_id"), 0);
    EXPECT_EQ(U(g, "tokenizer.ggml.padding_token_id"), 0);  // tokenizer_config's pad_token "<unk>"
    EXPECT_EQ(U(g, "tokenizer.ggml.add_bos_token"), 1);
    EXPECT_EQ(g.Find("tokenizer.chat_template")->strings.at(0), chat_template);
    ExpectTensorsReadBack(g, c, weights, dtype, /*permuted=*/true);
    const std::string modelfile = ReadFile(out + "/Modelfile");
    EXPECT_NE(modelfile.find("FROM ./model.gguf\n"), std::string::npos) << modelfile;
    EXPECT_NE(modelfile.find("PARAMETER stop \"</s>\"\n"), std::string::npos) << modelfile;
  }
}

TEST(GgufExport, Qwen2WithTokenizerJsonKeepsBiasesAndTiedEmbeddings) {
  const std::string tok = std::string(LLAMAFLEET_TOKENIZER_FIXTURES) + "/llama3_style";
  absl::StatusOr<LlamaConfig> c = ParseConfigJson(R"({"model_type": "qwen2", "hidden_size": 64,
      "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 3264, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
      "tie_word_embeddings": true})",
                                                  "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  TempDir tmp;
  const auto weights = MakeHfDir(*c, tmp.path() + "/hf",
                                 {{"tokenizer.json", tok + "/tokenizer.json"},
                                  {"tokenizer_config.json", tok + "/tokenizer_config.json"},
                                  {"generation_config.json", tok + "/generation_config.json"}});
  absl::Status s =
      WriteGgufFromHfDir(tmp.path() + "/hf", tmp.path() + "/hf", GgufTensorType::kQ8_0, "qwen");
  ASSERT_TRUE(s.ok()) << s;
  auto f = GgufFile::Open(tmp.path() + "/hf/model.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.Find("general.architecture")->strings.at(0), "qwen2");
  EXPECT_EQ(U(g, "qwen2.attention.head_count_kv"), 2);
  EXPECT_EQ(g.Find("qwen2.rope.freq_base")->floats.at(0), 1e6);
  EXPECT_EQ(g.Find("tokenizer.ggml.model")->strings.at(0), "gpt2");
  EXPECT_EQ(g.Find("tokenizer.ggml.pre")->strings.at(0), "llama-bpe");
  const json tj = json::parse(ReadFile(tok + "/tokenizer.json"));
  const GgufValue& tokens = *g.Find("tokenizer.ggml.tokens");
  const GgufValue& types = *g.Find("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.strings.size(), 3264u);
  for (const auto& [text, id] : tj["model"]["vocab"].items()) {
    EXPECT_EQ(tokens.strings[id.get<int>()], text);
    EXPECT_EQ(types.ints[id.get<int>()], 1);
  }
  for (const json& added : tj["added_tokens"]) {
    EXPECT_EQ(tokens.strings[added["id"].get<int>()], added["content"].get<std::string>());
    EXPECT_EQ(types.ints[added["id"].get<int>()], added["special"].get<bool>() ? 3 : 4);
  }
  EXPECT_EQ(tokens.strings[3263], "[PAD3263]");
  const GgufValue& merges = *g.Find("tokenizer.ggml.merges");
  ASSERT_EQ(merges.strings.size(), tj["model"]["merges"].size());
  EXPECT_EQ(merges.strings[0], tj["model"]["merges"][0][0].get<std::string>() + " " +
                                   tj["model"]["merges"][0][1].get<std::string>());
  // The EOS is tokenizer_config.json's eos_token; the BOS the post-processor's.
  EXPECT_EQ(tokens.strings[U(g, "tokenizer.ggml.eos_token_id")], "<|eot_id|>");
  EXPECT_EQ(tokens.strings[U(g, "tokenizer.ggml.bos_token_id")], "<|begin_of_text|>");
  EXPECT_EQ(g.FindTensor("output.weight"), nullptr);  // tied: llama.cpp reuses token_embd
  EXPECT_NE(g.FindTensor("blk.0.attn_k.bias"), nullptr);
  ExpectTensorsReadBack(g, *c, weights, GgufTensorType::kQ8_0, /*permuted=*/false);
}

TEST(GgufExport, Llama3RopeScalingBecomesRopeFactors) {
  absl::StatusOr<LlamaConfig> c = ParseConfigJson(R"({"model_type": "llama", "hidden_size": 64,
      "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
      "vocab_size": 3264, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 64}})",
                                                  "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string tok = std::string(LLAMAFLEET_TOKENIZER_FIXTURES) + "/llama3_style";
  TempDir tmp;
  MakeHfDir(*c, tmp.path() + "/hf", {{"tokenizer.json", tok + "/tokenizer.json"}});
  ASSERT_TRUE(
      WriteGgufFromHfDir(tmp.path() + "/hf", tmp.path() + "/hf", GgufTensorType::kF16, "l3").ok());
  auto f = GgufFile::Open(tmp.path() + "/hf/model.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufTensorInfo* t = (*f)->FindTensor("rope_freqs.weight");
  ASSERT_NE(t, nullptr);
  auto factors = DecodeGgufTensor(t->type, (*f)->TensorData(*t), t->numel());
  ASSERT_TRUE(factors.ok());
  ASSERT_EQ(factors->size(), 16u);  // head_dim 32 / 2
  // inv_freq / factor must be what HF's llama3 rescaling makes of each frequency
  // (REFERENCE.md): high frequencies kept, low ones divided by 8, smoothed between.
  for (int i = 0; i < 16; ++i) {
    const double f0 = 1.0 / std::pow(500000.0, 2.0 * i / 32), wavelen = 2 * M_PI / f0;
    double want = f0;
    if (wavelen > 64.0 / 1.0) {
      want = f0 / 8;
    } else if (wavelen >= 64.0 / 4.0) {
      const double s = (64.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - s) * f0 / 8 + s * f0;
    }
    EXPECT_NEAR(f0 / (*factors)[i], want, 1e-5 * want) << i;
  }
}

TEST(GgufExport, RefusesWhatLlamaCppCouldNotTokenize) {
  EXPECT_FALSE(ParseGgufDtype("q4_0").ok());
  EXPECT_EQ(*ParseGgufDtype("Q8_0"), GgufTensorType::kQ8_0);
  const std::string tok = std::string(LLAMAFLEET_TOKENIZER_FIXTURES) + "/llama3_style";
  LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 32;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  c.rms_norm_eps = 1e-5;
  c.vocab_size = 100;  // fewer rows than the tokenizer's 3256 tokens
  c.max_position_embeddings = 64;
  TempDir tmp;
  MakeHfDir(c, tmp.path() + "/hf", {{"tokenizer.json", tok + "/tokenizer.json"}});
  absl::Status s =
      WriteGgufFromHfDir(tmp.path() + "/hf", tmp.path() + "/hf", GgufTensorType::kF16, "x");
  EXPECT_NE(s.message().find("more than the model's vocab_size 100"), std::string::npos) << s;
  TempDir gpt2;
  MakeHfDir(c, gpt2.path() + "/hf", {});
  s = WriteGgufFromHfDir(gpt2.path() + "/hf", gpt2.path() + "/hf", GgufTensorType::kF16, "x");
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace llamafleet::trainer
