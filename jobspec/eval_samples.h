#ifndef LLAMAFLEET_JOBSPEC_EVAL_SAMPLES_H_
#define LLAMAFLEET_JOBSPEC_EVAL_SAMPLES_H_

// The rules and defaults of eval.samples (docs/jobspec.md#samples): generations from fixed
// prompts at every evaluation. Shared by validation, ApplyDefaults and the trainer's spec
// mapping so the bounds are stated once.

#include <cstdint>

#include "jobspec/field_violations.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

// Bounds of eval.samples.
inline constexpr int kMaxSamplePrompts = 64;          // prompts records and from_eval
inline constexpr int kMaxSampleNewTokens = 1024;      // max_new_tokens
inline constexpr int kDefaultSampleNewTokens = 64;    // max_new_tokens when unset
inline constexpr double kMaxSampleTemperature = 2.0;  // temperature in [0, this]
inline constexpr char kScoreExactMatch[] = "exact_match";
inline constexpr char kScoreContains[] = "contains";

// Whether the spec asks for samples (eval.samples is present).
bool HasEvalSamples(const v1::JobSpec& spec);

// Sets eval.samples.max_new_tokens to kDefaultSampleNewTokens when samples are asked for
// and it is unset. Nothing else.
void ApplyEvalSamplesDefaults(v1::JobSpec* spec);

namespace jobspec_internal {

// eval.samples: exactly one of prompts and from_eval (1..kMaxSamplePrompts); from_eval
// takes the first eval set, whose format must split into prompt and reference (CHAT,
// PROMPT_COMPLETION or PREFERENCE; TEXT and TOKENS are refused); samples need eval data
// (they are made at each evaluation); max_new_tokens in 1..kMaxSampleNewTokens; temperature
// in [0, kMaxSampleTemperature]; score names known and unique. Whether a prompts file's
// records carry the reference a score needs is the trainer's check at start.
void CheckEvalSamples(const v1::JobSpec& spec, Violations& v);

}  // namespace jobspec_internal
}  // namespace llamafleet

#endif  // LLAMAFLEET_JOBSPEC_EVAL_SAMPLES_H_
