// eval.samples: its defaults and each rule's message naming the field.
#include "jobspec/eval_samples.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jobspec/jobspec.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

// A valid spec with an eval set of `format` ("": no eval set), `extra` merged over it,
// defaults applied.
v1::JobSpec Spec(const std::string& extra, const std::string& format = "chat") {
  const std::string data =
      format.empty() ? "{train_path: /d, format: chat}"
                     : "{train_path: /d, format: " + format + ", eval: [{name: dev, path: /e}]}";
  absl::StatusOr<std::vector<ParsedJob>> jobs =
      ParseJobDocuments("name: s\nmodel: {path: /m}\ndata: " + data + "\n");
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  v1::JobSpec spec = (*jobs)[0].spec;
  std::vector<std::string> errors;
  MergeYamlIntoMessage(YAML::Load(extra), "", &spec, &errors);
  EXPECT_TRUE(errors.empty()) << errors[0];
  ApplyDefaults(&spec);
  return spec;
}

TEST(EvalSamplesTest, FromEvalAndPromptsAreAcceptedWithDefaults) {
  v1::JobSpec spec = Spec("eval: {samples: {from_eval: 4, score: [exact_match, contains]}}");
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(spec.eval().samples().max_new_tokens(), kDefaultSampleNewTokens);
  EXPECT_EQ(spec.eval().samples().temperature(), 0);
  spec = Spec("eval: {samples: {prompts: /p.jsonl, max_new_tokens: 1024, temperature: 2}}", "text");
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(spec.eval().samples().max_new_tokens(), 1024);
  for (const char* format : {"prompt_completion"}) {
    spec = Spec("eval: {samples: {from_eval: 64}}", format);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << format << ": " << ValidateJobSpec(spec);
  }
  v1::JobSpec plain = Spec("{}");
  EXPECT_FALSE(HasEvalSamples(plain));
  EXPECT_TRUE(ValidateJobSpec(plain).ok());
}

struct Case {
  std::string yaml;
  std::string format;
  std::string expected;
};

class EvalSamplesErrorTest : public ::testing::TestWithParam<Case> {};

TEST_P(EvalSamplesErrorTest, NamesTheField) {
  const v1::JobSpec spec = Spec(GetParam().yaml, GetParam().format);
  const absl::Status status = ValidateJobSpec(spec);
  ASSERT_FALSE(status.ok()) << GetParam().yaml;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(GetParam().expected), std::string::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(
    Table, EvalSamplesErrorTest,
    ::testing::Values(
        Case{"eval: {samples: {max_new_tokens: 8}}", "chat",
             "eval.samples set exactly one of eval.samples.prompts and eval.samples.from_eval"},
        Case{"eval: {samples: {prompts: /p, from_eval: 2}}", "chat", "set exactly one of"},
        Case{"eval: {samples: {from_eval: 65}}", "chat",
             "eval.samples.from_eval must be in [1, 64] (got 65)"},
        Case{"eval: {samples: {from_eval: -1}}", "chat",
             "eval.samples.from_eval must be in [1, 64]"},
        Case{"eval: {samples: {from_eval: 2}}", "",
             "eval.samples.from_eval needs data.eval or data.eval_path"},
        Case{
            "eval: {samples: {prompts: /p}}", "",
            "eval.samples needs data.eval or data.eval_path (samples are made at each evaluation)"},
        Case{"eval: {samples: {from_eval: 2}}", "text",
             "eval.samples.from_eval takes data.eval[0].path, which is TEXT: nothing marks where"},
        Case{"eval: {samples: {from_eval: 2}}", "tokens", "data.eval[0].path, which is TOKENS"},
        Case{"eval: {samples: {from_eval: 2, max_new_tokens: 0}}", "chat",
             "eval.samples.max_new_tokens must be in [1, 1024] (got 0)"},
        Case{"eval: {samples: {from_eval: 2, max_new_tokens: 1025}}", "chat",
             "eval.samples.max_new_tokens must be in [1, 1024] (got 1025)"},
        Case{"eval: {samples: {from_eval: 2, temperature: 2.5}}", "chat",
             "eval.samples.temperature must be in [0, 2] (0 = greedy; got 2.5)"},
        Case{"eval: {samples: {from_eval: 2, temperature: -0.1}}", "chat",
             "eval.samples.temperature must be in [0, 2]"},
        Case{"eval: {samples: {from_eval: 2, score: [bleu]}}", "chat",
             "eval.samples.score[0] 'bleu' is not one of exact_match, contains"},
        Case{"eval: {samples: {from_eval: 2, score: [contains, contains]}}", "chat",
             "eval.samples.score[1] 'contains' is listed twice"}));

}  // namespace
}  // namespace llamafleet
