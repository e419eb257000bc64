#include "jobspec/eval_samples.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "jobspec/data_sources.h"
#include "jobspec/jobspec.h"

namespace llamafleet {

bool HasEvalSamples(const v1::JobSpec& spec) {
  return spec.has_eval() && spec.eval().has_samples();
}

void ApplyEvalSamplesDefaults(v1::JobSpec* spec) {
  if (!HasEvalSamples(*spec)) return;
  v1::SamplesSpec* s = spec->mutable_eval()->mutable_samples();
  if (!s->has_max_new_tokens()) s->set_max_new_tokens(kDefaultSampleNewTokens);
}

namespace jobspec_internal {
namespace {

// from_eval's set: the first one, whose format must split into prompt and reference.
void CheckFromEval(const v1::JobSpec& spec, Violations& v) {
  const v1::SamplesSpec& s = spec.eval().samples();
  if (s.from_eval() < 1 || s.from_eval() > kMaxSamplePrompts) {
    v.Add("eval.samples.from_eval",
          absl::StrCat("must be in [1, ", kMaxSamplePrompts, "] (got ", s.from_eval(), ")"));
  }
  const std::vector<EvalSource> sets = EvalSetsOf(spec);
  if (sets.empty()) {
    v.Add("eval.samples.from_eval", "needs data.eval or data.eval_path (the records to take)");
    return;
  }
  const v1::DataFormat f = sets.front().format == v1::DATA_FORMAT_UNSPECIFIED ? spec.data().format()
                                                                              : sets.front().format;
  if (f == v1::TEXT || f == v1::DATA_FORMAT_UNSPECIFIED || f == v1::TOKENS) {
    v.Add("eval.samples.from_eval",
          absl::StrCat("takes ", sets.front().field, ", which is ", v1::DataFormat_Name(f),
                       ": nothing marks where a prompt ends (CHAT, PROMPT_COMPLETION and "
                       "PREFERENCE do; give eval.samples.prompts instead)"));
  }
}

}  // namespace

void CheckEvalSamples(const v1::JobSpec& spec, Violations& v) {
  if (!HasEvalSamples(spec)) return;
  const v1::SamplesSpec& s = spec.eval().samples();
  const bool file = !s.prompts().empty(), from_eval = s.from_eval() != 0;
  if (file == from_eval) {
    v.Add("eval.samples", "set exactly one of eval.samples.prompts and eval.samples.from_eval");
  }
  if (file) {
    if (s.prompts().size() > static_cast<size_t>(kMaxPathLength)) {
      v.Add("eval.samples.prompts",
            absl::StrCat("must be at most ", kMaxPathLength, " characters"));
    }
    if (s.prompts().find('\0') != std::string::npos)
      v.Add("eval.samples.prompts", "must not contain NUL");
  }
  if (from_eval) CheckFromEval(spec, v);
  if (!HasEvalData(spec) && !from_eval) {
    v.Add("eval.samples",
          "needs data.eval or data.eval_path (samples are made at each evaluation)");
  }
  if (s.has_max_new_tokens() &&
      (s.max_new_tokens() < 1 || s.max_new_tokens() > kMaxSampleNewTokens)) {
    v.Add("eval.samples.max_new_tokens",
          absl::StrCat("must be in [1, ", kMaxSampleNewTokens, "] (got ", s.max_new_tokens(), ")"));
  }
  if (!(s.temperature() >= 0 && s.temperature() <= kMaxSampleTemperature)) {
    v.Add("eval.samples.temperature", absl::StrCat("must be in [0, ", kMaxSampleTemperature,
                                                   "] (0 = greedy; got ", s.temperature(), ")"));
  }
  std::set<std::string> seen;
  for (int i = 0; i < s.score_size(); ++i) {
    const std::string& name = s.score(i);
    const std::string at = absl::StrCat("eval.samples.score[", i, "]");
    if (name != kScoreExactMatch && name != kScoreContains) {
      v.Add(at, absl::StrCat("'", name.substr(0, 64), "' is not one of ", kScoreExactMatch, ", ",
                             kScoreContains));
    } else if (!seen.insert(name).second) {
      v.Add(at, absl::StrCat("'", name, "' is listed twice"));
    }
  }
}

}  // namespace jobspec_internal
}  // namespace llamafleet
