// Torch-free parts of the trainer: safetensors validation and writing, config.json,
// JSONL data, packing/padding/masking, the sampler.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "adapter_config.h"
#include "checkpoint_manifest.h"
#include "config.h"
#include "data.h"
#include "direct_file_writer.h"
#include "nlohmann/json.hpp"
#include "safetensors.h"
#include "tests/testing/process.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

namespace fs = std::filesystem;
using ::llamafleet::testing::TempDir;

std::string LengthPrefix(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a header string and a data buffer.
void WriteRaw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << LengthPrefix(header.size()) << header << data;
}

// ---------------------------------------------------------------- safetensors reader

struct BadCase {
  const char* name;
  std::string header;
  size_t data_bytes;
  const char* needle;  // expected in the error message
};

TEST(SafetensorsReader, RejectsBadHeaders) {
  TempDir dir;
  const std::vector<BadCase> cases = {
      {"not_json", "{nope", 0, "not valid JSON"},
      {"not_object", "[1,2]", 0, "not a JSON object"},
      {"duplicate", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, "duplicate tensor \"a\""},
      {"unknown_dtype", R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4, "unknown dtype"},
      {"negative_shape", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative"},
      {"size_mismatch", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4, "imply 8 bytes"},
      {"past_end", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "past the end"},
      {"gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "contiguous"},
      {"overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "contiguous"},
      {"trailing", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12, "trailing"},
      // The shape's product wrapped to 0 in 128 bits, and numel() overflowed (found by fuzzing).
      {"shape_wraps", R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,4294967296,4294967296],"data_offsets":[0,0]}})", 0, "too many elements"},
      {"end_before_begin", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4, "end before begin"},
      {"missing_offsets", R"({"a":{"dtype":"F32","shape":[1]}})", 4, "data_offsets"},
      {"metadata_not_string", R"({"__metadata__":{"k":1}})", 0, "not a string"},
      {"entry_not_object", R"({"a":3})", 0, "not an object"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.File(std::string(c.name) + ".safetensors");
    WriteRaw(path, c.header, std::string(c.data_bytes, '\0'));
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status();
    EXPECT_NE(f.status().message().find(c.needle), std::string::npos) << f.status();
  }
}

TEST(SafetensorsReader, RejectsBadFraming) {
  TempDir dir;
  const std::string tiny = dir.File("tiny.safetensors");
  std::ofstream(tiny, std::ios::binary) << "abc";
  EXPECT_NE(SafetensorsFile::Open(tiny).status().message().find("shorter than"), std::string::npos);

  const std::string huge = dir.File("huge.safetensors");
  std::ofstream(huge, std::ios::binary) << LengthPrefix(200ull << 20) << "{}";
  EXPECT_NE(SafetensorsFile::Open(huge).status().message().find("exceeds the 16.0 MiB"),
            std::string::npos)
      << SafetensorsFile::Open(huge).status();

  const std::string longer = dir.File("longer.safetensors");
  std::ofstream(longer, std::ios::binary) << LengthPrefix(1000) << "{}";
  EXPECT_NE(SafetensorsFile::Open(longer).status().message().find("exceeds the file size"),
            std::string::npos);

  EXPECT_EQ(SafetensorsFile::Open(dir.File("absent")).status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsReader, ReadsValidFile) {
  TempDir dir;
  const std::string path = dir.File("ok.safetensors");
  std::string data(4 * 3 + 2 * 2, '\0');
  float f[3] = {1.5f, -2.f, 3.25f};
  std::memcpy(data.data(), f, sizeof f);
  data[12] = 0x3c;  // irrelevant bytes for the bf16 tensor
  WriteRaw(path,
           R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
           R"("z":{"dtype":"BF16","shape":[2,1],"data_offsets":[12,16]},"e":{"dtype":"F16","shape":[0,4],"data_offsets":[16,16]}})",
           data);
  auto f_or = SafetensorsFile::Open(path);
  ASSERT_TRUE(f_or.ok()) << f_or.status();
  const SafetensorsFile& file = **f_or;
  EXPECT_EQ(file.metadata().at("format"), "pt");
  ASSERT_EQ(file.tensors().size(), 3u);
  const StTensorInfo* w = file.Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, StDtype::kF32);
  float back[3];
  std::memcpy(back, file.Data(*w), sizeof back);
  EXPECT_EQ(back[2], 3.25f);
  EXPECT_EQ(file.Find("z")->shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(file.Find("e")->numel(), 0);
  EXPECT_EQ(file.Find("nope"), nullptr);
}

TEST(SafetensorsWriter, RoundTripsAndAligns) {
  TempDir dir;
  const std::string path = dir.File("w.safetensors");
  std::vector<SafetensorsWriter::Entry> entries = {{"b", StDtype::kF32, {2, 2}},
                                                   {"a", StDtype::kBF16, {3}}};
  auto w = SafetensorsWriter::Open(path, entries, {{"format", "pt"}});
  ASSERT_TRUE(w.ok()) << w.status();
  float b[4] = {1, 2, 3, 4};
  uint16_t a[3] = {0x3f80, 0x4000, 0xc040};
  ASSERT_TRUE((*w)->Append(b, sizeof b).ok());
  // Too little data is caught at Finish.
  ASSERT_TRUE((*w)->Append(a, 4).ok());
  EXPECT_FALSE((*w)->Finish().ok());

  auto w2 = SafetensorsWriter::Open(path, entries, {{"format", "pt"}});
  ASSERT_TRUE((*w2)->Append(b, sizeof b).ok());
  ASSERT_TRUE((*w2)->Append(a, sizeof a).ok());
  ASSERT_TRUE((*w2)->Finish().ok());
  std::ifstream in(path, std::ios::binary);
  char len[8];
  in.read(len, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(len[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(std::memcmp((*f)->Data(*(*f)->Find("a")), a, sizeof a), 0);
  EXPECT_EQ(std::memcmp((*f)->Data(*(*f)->Find("b")), b, sizeof b), 0);
  EXPECT_EQ((*f)->Find("a")->begin, 16u);  // written in the declared order
}

// Large files go around the page cache where the filesystem allows it, and are written
// buffered where it does not (tmpfs before Linux 6.6; try_direct false stands for such a
// filesystem here). Either way the file holds exactly the appended bytes, whatever the
// sizes of the pieces and of the buffer, and the hash callback sees them in order.
TEST(DirectFileWriter, WritesExactlyTheAppendedBytesWithAndWithoutODirect) {
  TempDir dir;
  std::string data(3 * 8192 + 4097, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  // AppendInPlace's source: page-aligned, as a checkpoint's staging image is.
  PageAlignedBuffer aligned;
  ASSERT_TRUE(aligned.Reserve(data.size()).ok());
  ASSERT_EQ(reinterpret_cast<uintptr_t>(aligned.data()) % DirectFileWriter::kAlignment, 0u);
  std::memcpy(aligned.data(), data.data(), data.size());
  auto write = [&](bool direct, size_t total, size_t piece, bool in_place) {
    SCOPED_TRACE(::testing::Message() << "direct " << direct << " total " << total << " piece " << piece
                                    << " in place " << in_place);
    const std::string path = dir.File("f.bin");
    auto w = DirectFileWriter::Create(path, 8192, direct);
    ASSERT_TRUE(w.ok()) << w.status();
    if (!direct) {
      EXPECT_FALSE((*w)->direct());
    }
    std::string seen;
    (*w)->set_on_bytes([&seen](const void* p, size_t n) { seen.append(static_cast<const char*>(p), n); });
    for (size_t at = 0; at < total; at += piece) {
      const size_t n = std::min(piece, total - at);
      ASSERT_TRUE((in_place ? (*w)->AppendInPlace(aligned.data() + at, n) : (*w)->Append(data.data() + at, n)).ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
    EXPECT_FALSE((*w)->Finish().ok());  // once
    std::ifstream in(path, std::ios::binary);
    const std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(back, data.substr(0, total));
    EXPECT_EQ(seen, data.substr(0, total));
    EXPECT_EQ((*w)->bytes(), total);
  };
  for (bool direct : {true, false}) {
    for (size_t total : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{8193}, data.size()}) {
      for (size_t piece : {size_t{1000}, size_t{4096}, size_t{10000}}) {
        for (bool in_place : {false, true}) write(direct, total, piece, in_place);
      }
    }
  }
  EXPECT_FALSE(DirectFileWriter::Create(dir.File("no/such/dir/f")).ok());
  // Growing maps anew; a smaller request keeps what is there.
  char* const first = aligned.data();
  ASSERT_TRUE(aligned.Reserve(1).ok());
  EXPECT_EQ(aligned.data(), first);
  ASSERT_TRUE(aligned.Reserve(aligned.capacity() + 1).ok());
  EXPECT_GT(aligned.capacity(), data.size());
}

TEST(SafetensorsDtype, Names) {
  EXPECT_EQ(*ParseStDtype("BF16"), StDtype::kBF16);
  EXPECT_STREQ(StDtypeName(StDtype::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(StDtypeSize(StDtype::kU64), 8u);
  EXPECT_EQ(*ParseExportDtype("bfloat16"), StDtype::kBF16);
  EXPECT_EQ(*ParseExportDtype("FP32"), StDtype::kF32);
  EXPECT_FALSE(ParseExportDtype("int8").ok());
}

// ---------------------------------------------------------------- config

constexpr char kGoodConfig[] = R"({"hidden_size": 64, "intermediate_size": 176,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-5, "vocab_size": 256, "max_position_embeddings": 128,
  "model_type": "llama", "hidden_act": "silu", "rope_scaling": null})";

TEST(Config, ParsesAndDefaults) {
  auto c = ParseConfigJson(kGoodConfig, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim(), 16);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  auto round = ParseConfigJson(ConfigToJson(*c, "bfloat16"), "again");
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(round->intermediate_size, 176);
  EXPECT_EQ(round->rms_norm_eps, 1e-5);
}

TEST(Config, RejectsBadConfigs) {
  struct Case {
    const char* edit_key;
    const char* edit_value;  // JSON; nullptr = remove
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"rms_norm_eps", nullptr, "rms_norm_eps"},
      {"hidden_size", nullptr, "hidden_size"},
      {"num_attention_heads", "5", "not divisible by num_attention_heads"},
      {"num_key_value_heads", "3", "not divisible by num_key_value_heads"},
      {"vocab_size", "0", "vocab_size must be > 0"},
      {"rope_scaling", R"({"type":"linear","factor":2})", "rope_scaling"},
      {"model_type", R"("gemma")", "model_type \"gemma\" is not supported"},
      {"rope_scaling", R"({"rope_type":"yarn","factor":4})", "rope_type \"yarn\" is not supported"},
      {"rope_scaling",
       R"({"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4})",
       "original_max_position_embeddings"},
      {"rope_scaling", R"({"rope_type":"llama3","factor":0,"low_freq_factor":1,"high_freq_factor":4,
         "original_max_position_embeddings":8192})",
       "rope_scaling.factor must be in [1, 1e6], got 0"},
      {"rope_scaling",
       R"({"rope_type":"llama3","factor":8,"low_freq_factor":-1,"high_freq_factor":4,
         "original_max_position_embeddings":8192})",
       "rope_scaling.low_freq_factor must be"},
      {"rope_scaling", R"({"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":4,
         "original_max_position_embeddings":8192})",
       "rope_scaling.high_freq_factor must be"},
      {"rope_scaling", R"({"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,
         "original_max_position_embeddings":8192,"partial_rotary_factor":0.5})",
       "rope_scaling.partial_rotary_factor is not supported"},
      {"rope_scaling", R"({"factor":2})", "rope_scaling has no rope_type"},
      // A layout present but incomplete never falls back to the default theta.
      {"rope_scaling", R"({"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,
         "original_max_position_embeddings":8192})",
       "rope_scaling is given without rope_theta"},
      {"rope_parameters", R"({"rope_type":"default"})",
       "rope_parameters: missing required field \"rope_theta\""},
      {"rope_parameters", R"({"rope_type":"llama3","rope_theta":500000,"factor":8})",
       "low_freq_factor"},
      {"rope_parameters", R"({"rope_type":"dynamic","rope_theta":500000,"factor":8})",
       "\"dynamic\""},
      {"rope_parameters", "3", "rope_parameters must be an object"},
      {"head_dim", "0", "head_dim must be > 0"},
      {"head_dim", "15", "head_dim 15 must be even"},
      {"head_dim", "1000000", "head_dim must be in [1, 4096]"},
      {"attention_bias", "true",
       "attention_bias true is not supported for model_type llama (only false: no bias on q_proj, "
       "k_proj, v_proj or o_proj)"},
      {"mlp_bias", "true",
       "mlp_bias true is not supported for model_type llama (only false: no bias on gate_proj, "
       "up_proj or down_proj)"},
      {"attention_bias", R"("yes")", "attention_bias \"yes\" is not supported"},
      {"sliding_window", "4096", "sliding_window is not supported for model_type llama"},
      {"layer_types", R"(["full_attention", "chunked_attention"])",
       "layer_types entry \"chunked_attention\""},
      {"eos_token_id", "[]", "eos_token_id\" is an empty list"},
      {"eos_token_id", R"([2, "x"])", "must be an integer"},
      {"hidden_act", R"("gelu")", "hidden_act"},
      {"hidden_size", R"("64")", "must be an integer"},
      {"tie_word_embeddings", "3", "boolean"},
      {"rms_norm_eps", "-1", "rms_norm_eps"},
      // Every dimension is bounded before the trainer sizes anything from it.
      {"num_hidden_layers", "2147483648", "num_hidden_layers must be at most 1024, got 2147483648"},
      {"hidden_size", "4611686018427387904", "hidden_size must be at most 65536"},
      {"intermediate_size", "1000000000", "intermediate_size must be at most"},
      {"vocab_size", "18446744073709551615", "\"vocab_size\" must be an integer (64-bit)"},
      {"max_position_embeddings", "1099511627776", "max_position_embeddings must be at most"},
      {"num_key_value_heads", "4096", "num_key_value_heads must be at most 1024"},
      {"bos_token_id", "256", "bos_token_id must be in [0, vocab_size 256)"},
      {"eos_token_id", "-1", "eos_token_id must be in [0, vocab_size 256)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.edit_key);
    auto j = nlohmann::json::parse(kGoodConfig);
    if (c.edit_value) {
      j[c.edit_key] = nlohmann::json::parse(c.edit_value);
    } else {
      j.erase(c.edit_key);
    }
    auto r = ParseConfigJson(j.dump(), "dir/config.json");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("dir/config.json"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status();
  }
  EXPECT_FALSE(ParseConfigJson("not json", "x").ok());
  EXPECT_EQ(LoadConfigFile("/nonexistent/config.json").status().code(), absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------- adapter config

TEST(AdapterConfig, ReadsWhatItWrites) {
  LoraOptions o;
  o.enabled = true;
  o.r = 16;
  o.alpha = 32;
  o.dropout = 0.1;
  o.target_modules = {"q_proj", "down_proj"};
  o.base_model_name = "/models/llama";
  auto back = ParseAdapterConfig(AdapterConfigJson(o), "adapter_config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->r, 16);
  EXPECT_EQ(back->alpha, 32);
  EXPECT_TRUE(back->targets(0) && back->targets(6) && !back->targets(2));
  EXPECT_EQ(back->base_model_name, "/models/llama");
}

TEST(AdapterConfig, AKeyOfTheWrongTypeIsRefusedNamingIt) {
  // Each of these threw nlohmann::type_error out of the reader (found by fuzzing).
  const std::string base = R"("peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"peft_type": 1})", "peft_type must be"},
      {"{" + base + R"(, "fan_in_fan_out": "yes"})", "fan_in_fan_out must be false"},
      {"{" + base + R"(, "base_model_name_or_path": 5})", "base_model_name_or_path must be a string"},
      {"{" + base + R"(, "lora_dropout": "x"})", "lora_dropout must be a number"},
      {R"({"peft_type": "LORA", "r": 18446744073709551615, "lora_alpha": 16, "target_modules": ["q_proj"]})",
       "peft.r must be in [1, 4096]"},
      // GPT-2's fused attention, as PEFT writes it for that family: not a Llama module.
      {R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16,
           "target_modules": ["q_proj", "c_attn"]})",
       "peft.target_modules: unknown module \"c_attn\" (q_proj, k_proj, v_proj, o_proj, "
       "gate_proj, up_proj, down_proj)"},
      {R"({"peft_type": "LORA", "r": 8, "lora_alpha": 1e300, "target_modules": ["q_proj"]})", "peft.alpha"},
  };
  for (const auto& [text, needle] : cases) {
    auto r = ParseAdapterConfig(text, "a/adapter_config.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find("a/adapter_config.json: "), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  }
}

// ---------------------------------------------------------------- checkpoint manifest

TEST(CheckpointManifest, EveryFieldHasItsTypeAndRange) {
  const std::string ok = R"({"format": "llamafleet-sharded-v1", "step": 4, "loss": null, "world_size": 2,
    "tensor_parallel": 2, "shard_group_size": 1, "units": [{"name": "u", "numel": 3, "padded": 4}],
    "files": [{"name": "config.json", "bytes": 3, "crc32c": "0000abcd"},
              {"name": "old.json", "bytes": 3, "sha256": "00000000000000000000000000000000000000000000000000000000000000ab"}]})";
  auto m = ParseCheckpointManifest(ok, "m.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->step, 4);
  EXPECT_TRUE(std::isnan(m->loss));  // a NaN loss is written as null
  EXPECT_EQ(m->tensor_parallel, 2);
  EXPECT_EQ(m->units.at(0).padded, 4);
  EXPECT_EQ(m->files.at(0).name, "config.json");
  EXPECT_EQ(m->files.at(0).checksum_kind, "crc32c");
  EXPECT_EQ(m->files.at(0).checksum, "0000abcd");
  EXPECT_EQ(m->files.at(1).checksum_kind, "sha256");  // manifests written before CRC-32C
  const std::string head = R"({"format": "llamafleet-sharded-v1", "units": [], "files": [])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + R"(, "tensor_parallel": "x"})", "tensor_parallel must be an integer in [1, 1024]"},
      {head + R"(, "tensor_parallel": 0})", "tensor_parallel must be an integer in [1, 1024]"},
      {head + R"(, "step": -1})", "step must be an integer"},
      {head + R"(, "shard_group_size": 1048576, "tensor_parallel": 1024})", "shard files is more than"},
      {R"({"format": "llamafleet-sharded-v1", "units": [], "files": {"a": 1}})", "files must be a list"},
      {R"({"format": "llamafleet-sharded-v1", "units": [], "files": [{"name": "../x", "bytes": 1, "sha256": ""}]})",
       "bad file name"},
      {R"({"format": "llamafleet-sharded-v1", "units": [{"name": "u"}], "files": []})", "units[0].padded is missing"},
      {head.substr(0, head.size() - 2) + R"([{"name": "a", "bytes": 1}]})", "files[0] has neither crc32c nor sha256"},
      {head.substr(0, head.size() - 2) + R"([{"name": "a", "bytes": 1, "crc32c": "ABCD0123"}]})",
       "files[0].crc32c must be 8 lowercase hex digits"},
      {head.substr(0, head.size() - 2) + R"([{"name": "a", "bytes": 1, "sha256": "ab"}]})",
       "files[0].sha256 must be 64 lowercase hex digits"},
      {R"({"format": "other", "units": [], "files": []})", "not a llamafleet-sharded-v1 manifest"},
  };
  for (const auto& [text, needle] : cases) {
    auto r = ParseCheckpointManifest(text, "m.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  }
}

TEST(SafetensorsIndex, NamesPlainFilesOnly) {
  auto ok = ParseSafetensorsIndex(R"({"weight_map": {"a": "model-1.safetensors"}})", "i.json");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->at("a"), "model-1.safetensors");
  for (const char* text : {R"({"weight_map": {"a": "../x"}})", R"({"weight_map": {"a": ".."}})",
                           R"({"weight_map": {"a": 1}})", R"({"weight_map": []})", "[]", "{"}) {
    EXPECT_FALSE(ParseSafetensorsIndex(text, "i.json").ok()) << text;
  }
}

TEST(Config, PresetsHaveTheReleasedShapes) {
  auto c7 = PresetConfig("llama2-7b");
  ASSERT_TRUE(c7.ok());
  EXPECT_EQ(c7->NumParameters(), 6738415616);  // REFERENCE.md
  auto c70 = PresetConfig("llama2-70b");
  EXPECT_EQ(c70->num_key_value_heads, 8);
  EXPECT_EQ(c70->intermediate_size, 28672);
  EXPECT_EQ(c70->num_hidden_layers, 80);
  auto c13 = PresetConfig("llama2-13b");
  EXPECT_EQ(c13->hidden_size, 5120);
  EXPECT_EQ(PresetConfig("tiny-gqa")->num_key_value_heads, 2);
  EXPECT_EQ(PresetConfig("tiny")->hidden_size, 64);
  EXPECT_FALSE(PresetConfig("llama3").ok());
  for (const char* name : {"llama2-7b", "llama2-13b", "llama2-70b", "tiny", "tiny-gqa"}) {
    EXPECT_TRUE(ValidateConfig(*PresetConfig(name)).ok()) << name;
  }
}

TEST(Config, NewerPresetsHaveTheirReleasedConfigs) {
  // Counts as published: the tied Llama 3.2 head counted once, Qwen2.5's q/k/v biases in.
  auto c8 = PresetConfig("llama3.1-8b");
  ASSERT_TRUE(c8.ok()) << c8.status();
  EXPECT_EQ(c8->NumParameters(), 8030261248);
  EXPECT_EQ(c8->vocab_size, 128256);
  EXPECT_EQ(c8->max_position_embeddings, 131072);
  EXPECT_EQ(c8->rope_theta, 500000.0);
  EXPECT_EQ(c8->bos_token_id, 128000);
  auto c1 = PresetConfig("llama3.2-1b");
  EXPECT_TRUE(c1->tie_word_embeddings);
  EXPECT_EQ(c1->head_dim(), 64);
  EXPECT_EQ(c1->NumParameters(), 1235814400);
  EXPECT_EQ(PresetConfig("mistral-7b")->NumParameters(), 7248023552);
  EXPECT_EQ(PresetConfig("qwen2.5-7b")->rms_norm_eps, 1e-6);
  EXPECT_EQ(PresetConfig("qwen2.5-72b")->vocab_size, 152064);
  EXPECT_EQ(c8->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c8->rope_scaling.factor, 8.0);
  EXPECT_EQ(c1->rope_scaling.factor, 32.0);
  EXPECT_EQ(PresetConfig("mistral-7b")->family, ModelFamily::kMistral);
  EXPECT_EQ(PresetConfig("mistral-7b")->rope_scaling.type, RopeScaling::Type::kDefault);
  auto q7 = PresetConfig("qwen2.5-7b");
  EXPECT_EQ(q7->family, ModelFamily::kQwen2);
  EXPECT_TRUE(q7->qkv_bias);
  EXPECT_EQ(q7->NumParameters(), 7615616512);
  EXPECT_EQ(PresetConfig("llama3.1-405b")->NumParameters(), 405853388800);
  for (const char* name : {"llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "llama3.2-1b", "llama3.2-3b",
                           "mistral-7b", "qwen2.5-7b", "qwen2.5-72b"}) {
    EXPECT_TRUE(ValidateConfig(*PresetConfig(name)).ok()) << name;
    EXPECT_FALSE(PresetTakesTokenizerVocab(name)) << name;
  }
  EXPECT_TRUE(PresetTakesTokenizerVocab("tiny"));
  EXPECT_FALSE(PresetTakesTokenizerVocab("nope"));
  EXPECT_NE(PresetConfig("llama3").status().message().find("qwen2.5-72b"), absl::string_view::npos);
}

// ---------------------------------------------------------------- data

Sequence Seq(std::vector<int32_t> t, std::vector<uint8_t> m) { return Sequence{std::move(t), std::move(m)}; }

TEST(Data, LoadsTokensAndValidates) {
  TempDir dir;
  const std::string path = dir.File("d.jsonl");
  std::ofstream(path) << "{\"input_ids\": [5, 6, 7]}\n   \n{\"input_ids\": [9]}\n";
  DataLoadOptions o;
  o.format = DataFormat::kTokens;
  auto s = LoadJsonl(path, o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[0].tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ((*s)[1].target, (std::vector<uint8_t>{1}));

  o.vocab_size = 8;
  auto oov = LoadJsonl(path, o);
  EXPECT_NE(oov.status().message().find("d.jsonl:3: token id 9"), std::string::npos) << oov.status();
  o.vocab_size = 0;
  o.max_positions = 2;
  auto longer = LoadJsonl(path, o);
  EXPECT_NE(longer.status().message().find("max_position_embeddings 2"), std::string::npos);

  struct Bad {
    const char* line;
    const char* needle;
  };
  for (const Bad& b : std::vector<Bad>{{"[1,2]", "not a JSON object"},
                                      {"{\"text\": \"x\"}", "missing field \"input_ids\""},
                                      {"{\"input_ids\": [1, \"a\"]}", "array of integers"},
                                      {"{\"input_ids\": []}", "empty record"},
                                      {"{\"input_ids\": [-1]}", "out of range"}}) {
    std::ofstream(path) << "{\"input_ids\": [1]}\n" << b.line << "\n";
    auto r = LoadJsonl(path, DataLoadOptions{DataFormat::kTokens});
    ASSERT_FALSE(r.ok()) << b.line;
    EXPECT_NE(r.status().message().find("d.jsonl:2: "), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(b.needle), std::string::npos) << r.status();
  }
  std::ofstream(path) << "\n\n";
  EXPECT_NE(LoadJsonl(path, DataLoadOptions{DataFormat::kTokens}).status().message().find("empty"),
            std::string::npos);
  EXPECT_FALSE(LoadJsonl(dir.File("absent.jsonl"), DataLoadOptions{DataFormat::kTokens}).ok());
  // Text needs a tokenizer.
  EXPECT_NE(LoadJsonl(path, DataLoadOptions{DataFormat::kText}).status().message().find("tokenizer"),
            std::string::npos);
}

TEST(Data, EveryBadLineIsNamedUpToABound) {
  TempDir dir;
  const std::string path = dir.File("d.jsonl");
  std::ofstream(path) << "{\"input_ids\": [1]}\n[1]\n{\"input_ids\": [1]}\n{\"text\": \"x\"}\n\n{\"input_ids\": []}\n";
  auto three = LoadJsonl(path, DataLoadOptions{DataFormat::kTokens});
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(three.status().message(), absl::StrCat(path, ": 3 bad lines:\n  ", path, ":2: not a JSON object\n  ", path,
                                                   ":4: missing field \"input_ids\"\n  ", path,
                                                   ":6: empty record (no tokens)"));
  // Past the bound: the first 20 in file order, then how many more.
  {
    std::ofstream out(path);
    for (int i = 1; i <= 60; ++i) out << (i % 2 == 0 ? "{\"input_ids\": [1]}" : "nope") << "\n";
  }
  auto many = LoadJsonl(path, DataLoadOptions{DataFormat::kTokens});
  ASSERT_FALSE(many.ok());
  const std::string msg(many.status().message());
  EXPECT_TRUE(absl::StartsWith(msg, absl::StrCat(path, ": 30 bad lines:\n  ", path, ":1: not a JSON object\n")))
      << msg;
  EXPECT_NE(msg.find(absl::StrCat(path, ":39: not a JSON object\n  ... and 10 more")), std::string::npos) << msg;
  EXPECT_EQ(msg.find(":41:"), std::string::npos) << msg;
}

TEST(Data, PackingKeepsRecordsWholeByNextFitAndCutsOnlyLongOnes) {
  std::vector<Sequence> seqs = {Seq({1, 10, 11, 2}, {0, 0, 1, 1}), Seq({1, 20, 2}, {1, 1, 1}),
                                Seq({1, 30, 31, 32, 2}, {0, 0, 0, 1, 1}), Seq({1, 40}, {1, 1})};
  // Rows of 7: [4 + 3], then the 5 does not fit beside them, [5 + 2].
  auto rows = PackSequences(seqs, 7);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].tokens, (std::vector<int32_t>{1, 10, 11, 2, 1, 20, 2}));
  EXPECT_EQ(rows[0].target, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(rows[0].documents, (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(rows[1].tokens, (std::vector<int32_t>{1, 30, 31, 32, 2, 1, 40}));
  EXPECT_EQ(rows[1].documents, (std::vector<int32_t>{5, 2}));
  // Rows of 6: no two neighbours fit together (next fit never looks back); the last row is
  // kept, short.
  rows = PackSequences(seqs, 6);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].documents, (std::vector<int32_t>{4}));
  EXPECT_EQ(rows[1].documents, (std::vector<int32_t>{3}));
  EXPECT_EQ(rows[2].documents, (std::vector<int32_t>{5}));
  EXPECT_EQ(rows[3].tokens, (std::vector<int32_t>{1, 40}));
  // Rows of 2: records longer than 2 are cut into pieces of 2 from their start, each its
  // own document; a short last piece starts a row that later records may join.
  rows = PackSequences({Seq({1, 2, 3, 4, 5}, {1, 1, 1, 1, 1}), Seq({6}, {1}), Seq({7, 8}, {1, 1})}, 2);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(rows[1].tokens, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(rows[2].tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(rows[2].documents, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(rows[3].tokens, (std::vector<int32_t>{7, 8}));
}

TEST(Data, PackedBatchesRestartPositionsAndTargetsAtEachDocument) {
  std::vector<Sequence> seqs = {Seq({1, 10, 11, 2}, {0, 0, 1, 1}), Seq({1, 20, 2}, {1, 1, 1}),
                                Seq({1, 30, 31, 32, 2}, {0, 0, 0, 1, 1})};
  auto rows = PackSequences(seqs, 7);  // [4 + 3], [5]
  ASSERT_EQ(rows.size(), 2u);
  Batch b = MakeBatch(rows, {1, 0}, /*pad_id=*/0);
  EXPECT_EQ(b.seq_len, 7);
  EXPECT_EQ(b.tokens, (std::vector<int64_t>{1, 30, 31, 32, 2, 0, 0, 1, 10, 11, 2, 1, 20, 2}));
  // Row 0: one document and its padding (a document of its own); row 1: two documents.
  EXPECT_EQ(b.position, (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3, 0, 1, 2}));
  // The second document's first token (1 at t = 4 of row 1) is no longer a target: it would
  // be predicted from the first document.
  EXPECT_EQ(b.target, (std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 1}));
  EXPECT_EQ(b.NumTargets(), 2 + 2 + 2);
  EXPECT_EQ(b.real_tokens, 12);
  // Rows of one document each: no positions (plain causal attention), targets as given.
  Batch single = MakeBatch(seqs, {0, 2}, 0);
  EXPECT_TRUE(single.position.empty());
  EXPECT_EQ(single.NumTargets(), 2 + 2);
}

TEST(Data, PaddingBatchesMaskPads) {
  std::vector<Sequence> rows = {Seq({1, 5, 6, 2}, {0, 1, 1, 1}), Seq({1, 7}, {1, 1})};
  EXPECT_TRUE(CheckPaddingRows(rows, 4, "f").ok());
  auto err = CheckPaddingRows(rows, 3, "f.jsonl");
  EXPECT_NE(err.message().find("f.jsonl: record 1 has 4 tokens, longer than seq_len 3"), std::string::npos)
      << err;
  Batch b = MakeBatch(rows, {1, 0}, /*pad_id=*/0);
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.seq_len, 4);
  EXPECT_EQ(b.tokens, (std::vector<int64_t>{1, 7, 0, 0, 1, 5, 6, 2}));
  EXPECT_EQ(b.target, (std::vector<uint8_t>{1, 1, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(b.real_tokens, 6);
  // Targets at t >= 1: row 0 has one (7), row 1 has three (5, 6, 2).
  EXPECT_EQ(b.NumTargets(), 4);
}

// ---------------------------------------------------------------- sampler

TEST(Sampler, AGlobalBatchTakesTheSameRowsOnEveryWorldSize) {
  // 12 rows per step split as micro_batch x grad_accum x world in every way that divides:
  // the concatenation over ranks and micro-steps is always the same slice of the epoch's
  // permutation, so a step trains on the same rows whatever the world size.
  struct Split {
    int64_t micro, accum, world;
  };
  std::vector<std::vector<int64_t>> reference;
  for (Split split : {Split{1, 12, 1}, Split{2, 6, 1}, Split{2, 3, 2}, Split{1, 4, 3}, Split{2, 2, 3},
                      Split{1, 3, 4}, Split{3, 1, 4}, Split{2, 1, 6}}) {
    Sampler::Options o;
    o.num_rows = 50;  // 4 steps per epoch, 2 rows dropped
    o.micro_batch = split.micro;
    o.grad_accum = split.accum;
    o.world_size = split.world;
    o.seed = 9;
    auto s = Sampler::Create(o);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s->global_batch(), 12);
    ASSERT_EQ(s->steps_per_epoch(), 4);
    std::vector<std::vector<int64_t>> steps;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      for (int64_t step = 0; step < 4; ++step) {
        std::vector<int64_t> rows;
        for (int64_t rank = 0; rank < split.world; ++rank) {
          for (int64_t m = 0; m < split.accum; ++m) {
            std::vector<int64_t> r = s->Rows(epoch, step, m, rank);
            rows.insert(rows.end(), r.begin(), r.end());
          }
        }
        steps.push_back(rows);
      }
    }
    if (reference.empty()) {
      reference = steps;
    } else {
      EXPECT_EQ(steps, reference) << split.micro << "x" << split.accum << "x" << split.world;
    }
  }
}

TEST(Sampler, DeterministicDisjointAndResumable) {
  Sampler::Options o;
  o.num_rows = 103;
  o.micro_batch = 3;
  o.grad_accum = 2;
  o.world_size = 4;
  o.seed = 42;
  auto s = Sampler::Create(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->global_batch(), 24);
  EXPECT_EQ(s->steps_per_epoch(), 4);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    auto perm = s->Permutation(epoch);
    EXPECT_EQ(std::set<int64_t>(perm.begin(), perm.end()).size(), 103u);
    std::set<int64_t> seen_epoch;
    for (int64_t step = 0; step < s->steps_per_epoch(); ++step) {
      std::set<int64_t> seen_step;
      for (int64_t rank = 0; rank < 4; ++rank) {
        for (int64_t m = 0; m < 2; ++m) {
          auto rows = s->Rows(epoch, step, m, rank);
          EXPECT_EQ(rows.size(), 3u);
          for (int64_t r : rows) {
            EXPECT_TRUE(seen_step.insert(r).second) << "row given twice in a step";
            EXPECT_TRUE(seen_epoch.insert(r).second) << "row given twice in an epoch";
          }
        }
      }
      EXPECT_EQ(seen_step.size(), 24u);
    }
  }
  EXPECT_NE(s->Permutation(0), s->Permutation(1));
  // A fresh sampler (a resumed process) gives the same rows at any position.
  auto resumed = Sampler::Create(o);
  EXPECT_EQ(resumed->Rows(2, 3, 1, 2), s->Rows(2, 3, 1, 2));
  EXPECT_EQ(resumed->Rows(0, 1, 0, 0), s->Rows(0, 1, 0, 0));
  o.seed = 43;
  EXPECT_NE(Sampler::Create(o)->Permutation(0), s->Permutation(0));
  o.shuffle = false;
  auto ordered = Sampler::Create(o);
  EXPECT_EQ(ordered->Rows(0, 0, 0, 1), (std::vector<int64_t>{6, 7, 8}));
  o.num_rows = 23;
  auto small = Sampler::Create(o);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("fewer than one global batch of 24"), std::string::npos);
}

// ---------------------------------------------------------------- staged output

TEST(StagedDir, CommitReplacesAndAbandonCleansUp) {
  TempDir dir;
  const std::string out = dir.File("out");
  {
    auto staged = StagedDir::Create(out);
    ASSERT_TRUE(staged.ok());
    ASSERT_TRUE(WriteStringToFile(staged->path() + "/a", "1").ok());
  }  // abandoned
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 0);
  for (const char* content : {"first", "second"}) {
    auto staged = StagedDir::Create(out);
    ASSERT_TRUE(WriteStringToFile(staged->path() + "/a", content).ok());
    ASSERT_TRUE(staged->Commit().ok());
  }
  EXPECT_EQ(*ReadFileToString(out + "/a"), "second");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(StagedDir, NeverReplacesWhatItDidNotWrite) {
  TempDir dir;
  // Someone's directory: refused at Create, untouched.
  const std::string theirs = dir.File("theirs");
  fs::create_directories(theirs);
  ASSERT_TRUE(WriteStringToFile(theirs + "/notes", "keep").ok());
  auto refused = StagedDir::Create(theirs, "7");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*ReadFileToString(theirs + "/notes"), "keep");
  // A job's own output carries its marker; another job may not replace it.
  const std::string mine = dir.File("mine");
  {
    auto staged = StagedDir::Create(mine, "7");
    ASSERT_TRUE(staged.ok()) << staged.status();
    ASSERT_TRUE(staged->Commit().ok());
  }
  EXPECT_EQ(*ReadFileToString(mine + "/.llamafleet-export"), "7");
  EXPECT_EQ(StagedDir::Create(mine, "8").status().code(), absl::StatusCode::kFailedPrecondition);
  // Files that appear at the final path while the output is staged stop the commit.
  const std::string late = dir.File("late");
  auto staged = StagedDir::Create(late, "7");
  ASSERT_TRUE(staged.ok());
  fs::create_directories(late);
  ASSERT_TRUE(WriteStringToFile(late + "/intruder", "x").ok());
  EXPECT_EQ(staged->Commit().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*ReadFileToString(late + "/intruder"), "x");
}

}  // namespace
}  // namespace llamafleet::trainer
