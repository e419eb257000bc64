// Generated text as the continuation of its prompt (worker/trainer/continuation_decoder.h)
// against Hugging Face: for a SentencePiece model (fixtures/gguf/spm), every step's text of
// fixtures/generation/spm_decode.json (made by make_spm_decode.py with transformers'
// LlamaTokenizer decoder) is what the decoder gives, the first generated piece keeping its
// space; for byte-level BPE the decoder is the tokenizer's Decode.
#include "continuation_decoder.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace llamafleet::trainer {
namespace {

using nlohmann::json;

TEST(ContinuationDecoder, SentencePieceMatchesHuggingFace) {
  auto tok = Tokenizer::Load(std::string(LLAMAFLEET_FIXTURES) + "/gguf/spm/tokenizer.model");
  if (absl::IsFailedPrecondition(tok.status())) GTEST_SKIP() << tok.status();
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::ifstream in(std::string(LLAMAFLEET_FIXTURES) + "/generation/spm_decode.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const json cases = json::parse(ss.str());
  ASSERT_GE(cases.size(), 7u);
  int leading_space = 0;
  for (const json& c : cases) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto gen = c["generated"].get<std::vector<int32_t>>();
    const ContinuationDecoder decoder(**tok, prompt);
    for (size_t k = 0; k < gen.size(); ++k) {
      const std::string want = c["steps"][k];
      if (want.find("\xEF\xBF\xBD") != std::string::npos) continue;  // inside a character
      EXPECT_EQ(decoder.Decode(absl::MakeConstSpan(gen).subspan(0, k + 1)), want)
          << "prompt " << c["prompt"].dump() << " after " << k + 1 << " generated ids";
    }
    // Decoding the generated ids alone (what generation streamed before) drops the space.
    const std::string last = c["steps"].back();
    if (last[0] == ' ') {
      ++leading_space;
      EXPECT_EQ((*tok)->Decode(gen), last.substr(1));
    }
  }
  EXPECT_GE(leading_space, 4);  // the fixtures hold continuations that begin with a space
}

TEST(ContinuationDecoder, ExactPiecesDecodeTheGeneratedIdsAlone) {
  auto tok = Tokenizer::Load(std::string(LLAMAFLEET_FIXTURES) + "/tokenizers/llama3_style");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto prompt = (*tok)->Encode("The capital is");
  auto gen = (*tok)->Encode(" Paris");
  ASSERT_TRUE(prompt.ok() && gen.ok());
  EXPECT_EQ(ContinuationDecoder(**tok, *prompt).Decode(*gen), " Paris");
}

}  // namespace
}  // namespace llamafleet::trainer
