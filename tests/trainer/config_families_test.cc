// config.json of the model families (llama, mistral, qwen2): both RoPE layouts, llama3
// scaling, head_dim, biases, the sliding window, and what ConfigToJson writes back.
// Part of trainer_core_test (no Torch).
#include <gtest/gtest.h>

#include <string>

#include "config.h"
#include "nlohmann/json.hpp"

namespace llamafleet::trainer {
namespace {

// The same Llama 3.1 config in transformers 4.x's and 5.x's layouts.
constexpr char kLlama31V4[] = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "rms_norm_eps": 1e-5, "vocab_size": 256, "max_position_embeddings": 128, "rope_theta": 500000.0,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
  "eos_token_id": [2, 3], "attention_bias": false})";
constexpr char kLlama31V5[] = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "rms_norm_eps": 1e-5, "vocab_size": 256, "max_position_embeddings": 128,
  "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64},
  "eos_token_id": [2, 3], "dtype": "bfloat16"})";

void ExpectSameConfig(const LlamaConfig& a, const LlamaConfig& b) {
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.head_dim(), b.head_dim());
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
            b.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.eos_token_id, b.eos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.NumParameters(), b.NumParameters());
}

TEST(Config, ReadsBothRopeLayoutsAndWritesTheFamilyBack) {
  auto v4 = ParseConfigJson(kLlama31V4, "v4");
  auto v5 = ParseConfigJson(kLlama31V5, "v5");
  ASSERT_TRUE(v4.ok()) << v4.status();
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(v4->rope_theta, 500000.0);
  EXPECT_EQ(v4->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(v4->rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(v4->head_dim(), 32);  // not hidden / heads (16)
  EXPECT_EQ(v4->eos_token_id, 2);
  EXPECT_EQ(v4->eos_token_ids, (std::vector<int64_t>{2, 3}));  // written back as the list
  EXPECT_EQ(v5->torch_dtype, "bfloat16");
  ExpectSameConfig(*v4, *v5);
  // q [128, 64], k and v [64, 64], o [64, 128], MLP 3 x 96 x 64, two norms; embeddings.
  EXPECT_EQ(v4->NumNonEmbeddingParameters(),
            2 * (128 * 64 + 2 * 64 * 64 + 64 * 128 + 3 * 96 * 64 + 2 * 64) + 64 + 256 * 64);
  auto again = ParseConfigJson(ConfigToJson(*v5, "float32"), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameConfig(*v5, *again);

  for (const char* family : {"mistral", "qwen2"}) {
    SCOPED_TRACE(family);
    auto j = nlohmann::json::parse(kLlama31V5);
    j["model_type"] = family;
    j.erase("head_dim");
    j["sliding_window"] = 64;
    j["use_sliding_window"] = true;
    auto c = ParseConfigJson(j.dump(), "c");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->qkv_bias, std::string(family) == "qwen2");
    EXPECT_EQ(c->sliding_window, 64);
    EXPECT_EQ(c->head_dim(), 16);
    const std::string written = ConfigToJson(*c, "float32");
    EXPECT_NE(written.find(std::string("\"model_type\": \"") + family + "\""), std::string::npos)
        << written;
    EXPECT_NE(written.find(std::string("ForCausalLM")), std::string::npos);
    auto back = ParseConfigJson(written, "back");
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameConfig(*c, *back);
    // A window shorter than the sequence is refused where the sequence length is known.
    EXPECT_TRUE(CheckSequenceLength(*c, 64).ok());
    absl::Status s = CheckSequenceLength(*c, 65);
    EXPECT_NE(s.message().find("sliding_window 64 is shorter than the sequence length 65"),
              std::string::npos)
        << s;
  }
  // Qwen2's window is off unless use_sliding_window (Qwen2.5's released configs).
  auto j = nlohmann::json::parse(kLlama31V5);
  j["model_type"] = "qwen2";
  j["sliding_window"] = 32;
  j["use_sliding_window"] = false;
  j["layer_types"] = {"full_attention", "full_attention"};
  auto q = ParseConfigJson(j.dump(), "q");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->sliding_window, 0);
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_NE(ParseConfigJson(j.dump(), "q").status().message().find("sliding_attention"),
            std::string::npos);
  // Both layouts at once are ambiguous.
  j = nlohmann::json::parse(kLlama31V5);
  j["rope_theta"] = 10000.0;
  EXPECT_NE(
      ParseConfigJson(j.dump(), "c").status().message().find("rope_theta and rope_parameters"),
      std::string::npos);
}

}  // namespace
}  // namespace llamafleet::trainer
