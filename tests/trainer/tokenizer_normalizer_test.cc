// tokenizer.json's Unicode normalizers (NFC as Qwen2 and Qwen2.5 ship it, NFD, NFKC as a
// Sequence of one, NFKD) against HF tokenizers' ids on 240 texts in composed, decomposed
// and compatibility forms (fixtures/tokenizers/normalizers_reference.json, made by
// make_normalizer_fixtures.py).
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tokenizer.h"
#include "tokenizer_corpus.h"
#include "util.h"

namespace llamafleet::trainer {
namespace {

using nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

TEST(TokenizerNormalizerTest, EveryNormalizerMatchesHfTokenizers) {
  const std::string dir = TokenizerFixtureDir();
  const json ref = ReadJson(dir + "/normalizers_reference.json");
  const json base = ReadJson(dir + "/qwen2_style/tokenizer.json");
  const json& texts = ref["texts"];
  ASSERT_EQ(texts.size(), 240u);
  for (const auto& [name, variant] : ref["variants"].items()) {
    SCOPED_TRACE(name);
    json j = base;
    j["normalizer"] = variant["normalizer"];
    const std::string file = ::testing::TempDir() + "/normalizer-" + name + ".json";
    ASSERT_TRUE(WriteStringToFile(file, j.dump()).ok());
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::Load(file);
    ASSERT_TRUE(tok.ok()) << tok.status();
    int differing = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(texts[i].get<std::string>());
      ASSERT_TRUE(ids.ok()) << ids.status();
      const std::vector<int32_t> expected = variant["ids"][i].get<std::vector<int32_t>>();
      if (*ids != expected && ++differing <= 3) {
        ADD_FAILURE() << "text " << i << " \"" << texts[i].get<std::string>()
                      << "\" differs from HF";
      }
    }
    EXPECT_EQ(differing, 0);
  }
}

TEST(TokenizerNormalizerTest, TheQwen2StyleFileLoadsAsShipped) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok =
      Tokenizer::Load(TokenizerFixtureDir() + "/qwen2_style/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "é" composed and decomposed are the same text once normalized.
  EXPECT_EQ(*(*tok)->Encode("caf\xC3\xA9"), *(*tok)->Encode("cafe\xCC\x81"));
}

}  // namespace
}  // namespace llamafleet::trainer
