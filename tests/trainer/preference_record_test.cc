// data.format: preference (DPO's pairs): every layout gives two rows, chosen then rejected,
// each the prompt followed by its answer with the answer's tokens alone as targets; bad
// records are listed as FILE:LINE: why.
#include "preference_record.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "chat_encoding.h"
#include "chat_template.h"
#include "data.h"
#include "tests/testing/process.h"

namespace llamafleet::trainer {
namespace {

class PreferenceData : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::Load(std::string(LLAMAFLEET_CHAT_FIXTURES) + "/tokenizer");
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = std::move(*t);
    tmpl_ = *ChatTemplateByName("llama3");
    opt_.format = DataFormat::kPreference;
    opt_.tokenizer = tok_.get();
    opt_.chat_template = &tmpl_;
    opt_.bos_id = 1;
    opt_.eos_id = 2;
    dir_ = tmp_.path();
  }
  absl::StatusOr<std::vector<Sequence>> Parse(const std::string& line) {
    return ParseRecordSequences("p.jsonl", 1, line, opt_);
  }
  std::vector<int32_t> Encode(const std::string& s) { return *tok_->Encode(s); }

  std::unique_ptr<Tokenizer> tok_;
  ChatTemplate tmpl_;
  DataLoadOptions opt_;
  ::llamafleet::testing::TempDir tmp_;
  std::string dir_;
};

TEST_F(PreferenceData, TextPairsAreBosPromptAnswerEosWithTheAnswerAndEosAsTargets) {
  auto r =
      Parse(R"({"prompt": "Name a camelid.", "chosen": " The llama.", "rejected": " A cat."})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  const std::vector<int32_t> p = Encode("Name a camelid.");
  const std::string answers[2] = {" The llama.", " A cat."};
  for (int k = 0; k < 2; ++k) {
    std::vector<int32_t> want = {1};
    want.insert(want.end(), p.begin(), p.end());
    const std::vector<int32_t> a = Encode(answers[k]);
    want.insert(want.end(), a.begin(), a.end());
    want.push_back(2);
    EXPECT_EQ((*r)[k].tokens, want) << k;
    std::vector<uint8_t> target(1 + p.size(), 0);
    target.resize(want.size(), 1);
    EXPECT_EQ((*r)[k].target, target) << k;
  }
}

TEST_F(PreferenceData, MessagesPairsScoreOnlyTheAnswerTurnWhateverTheLayout) {
  const std::string explicit_prompt =
      R"({"prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes?"},
                     {"role": "user", "content": "Name a camelid."}],
          "chosen": [{"role": "assistant", "content": "The llama."}],
          "rejected": [{"role": "assistant", "content": "A cat."}]})";
  const std::string implicit_prompt =
      R"({"chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes?"},
                     {"role": "user", "content": "Name a camelid."}, {"role": "assistant", "content": "The llama."}],
          "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes?"},
                     {"role": "user", "content": "Name a camelid."}, {"role": "assistant", "content": "A cat."}]})";
  const std::string text_answers =
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes?"},
                       {"role": "user", "content": "Name a camelid."}], "chosen": "The llama.", "rejected": "A cat."})";
  std::vector<ChatMessage> conv = {{ChatRole::kUser, "Hi"},
                                   {ChatRole::kAssistant, "Yes?"},
                                   {ChatRole::kUser, "Name a camelid."},
                                   {ChatRole::kAssistant, ""}};
  std::vector<Sequence> want;
  for (const char* answer : {"The llama.", "A cat."}) {
    conv.back().content = answer;
    want.push_back(*EncodeChat(*RenderChat(tmpl_, conv), *tok_, TrainOn::kLastAssistant));
  }
  for (const std::string& line : {explicit_prompt, implicit_prompt, text_answers}) {
    auto r = Parse(line);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << line;
    ASSERT_EQ(r->size(), 2u);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ((*r)[k].tokens, want[k].tokens) << line;
      EXPECT_EQ((*r)[k].target, want[k].target) << line;
    }
  }
  // The first assistant turn (the prompt's) carries no loss.
  const Sequence& c = want[0];
  size_t first_target = 0;
  while (!c.target[first_target]) ++first_target;
  EXPECT_GT(first_target, Encode("Hi Yes? Name a camelid.").size());
}

TEST_F(PreferenceData, TokenPairsAreUsedAsGiven) {
  auto r = Parse(
      R"({"prompt_input_ids": [5, 6, 7], "chosen_input_ids": [8, 9], "rejected_input_ids": [10]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tokens, (std::vector<int32_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ((*r)[0].target, (std::vector<uint8_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ((*r)[1].tokens, (std::vector<int32_t>{5, 6, 7, 10}));
  EXPECT_EQ((*r)[1].target, (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_FALSE(ParseRecord("p.jsonl", 1, R"({"prompt_input_ids": [5], "chosen_input_ids": [8],
                                             "rejected_input_ids": [10]})",
                           opt_)
                   .ok());
}

TEST_F(PreferenceData, BadRecordsAreListedWithFileAndLine) {
  const std::string path = dir_ + "/bad.jsonl";
  std::ofstream(path) << R"({"prompt": "p", "chosen": "c", "rejected": "r"}
{"prompt": "p", "rejected": "r"}
{"prompt": "p", "chosen": "c", "rejected": ""}
{"prompt": 5, "chosen": "c", "rejected": "r"}
{"chosen": "c", "rejected": "r"}
{"prompt": "p", "chosen": [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}], "rejected": "r"}
{"chosen": [{"role": "user", "content": "u"}], "rejected": [{"role": "user", "content": "v"}]}
{"prompt_input_ids": [1], "chosen_input_ids": [2, -3], "rejected_input_ids": [4]}
{"prompt": [{"role": "user", "content": "u"}], "chosen": [{"role": "assistant", "content": ""}], "rejected": "r"}
{"prompt": [], "chosen": "c", "rejected": "r"}
)";
  auto r = LoadJsonl(path, opt_);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  for (const char* want : {
           "9 bad lines",
           ":2: missing field \"chosen\"",
           ":3: field \"rejected\" is empty",
           ":4: field \"prompt\" must be a string or an array of messages",
           ":5: missing field \"prompt\"",
           ":6: field \"chosen\" must add exactly one assistant message to the prompt (it adds 2)",
           ":7: no \"prompt\", and \"chosen\" and \"rejected\" share no first message",
           ":8: field \"chosen_input_ids\": token id -3 out of range",
           ":9: chosen[0].content is empty",
           ":10: field \"prompt\" is empty",
       }) {
    EXPECT_TRUE(absl::StrContains(msg, want)) << "want \"" << want << "\" in:\n" << msg;
  }
  EXPECT_FALSE(absl::StrContains(msg, ":1:")) << msg;
}

}  // namespace
}  // namespace llamafleet::trainer
