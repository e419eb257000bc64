// How the CLI shows the samples of a job's evaluations (eval.samples) and DPO's rewards.
#ifndef LLAMAFLEET_CLIENTS_CLI_SAMPLE_OUTPUT_H_
#define LLAMAFLEET_CLIENTS_CLI_SAMPLE_OUTPUT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "llamafleet/v1/job.pb.h"

namespace llamafleet::cli {

// `describe job`'s section for the samples of one step (the latest): a heading "Samples at
// step N:" and per sample "#INDEX stop_reason, T tokens[, score V...]" with its prompt and
// text on one line each, escaped (EscapeTableCell) and cut to `width` bytes. "" without
// samples.
std::string SamplesSummary(const std::vector<v1::Sample>& samples, size_t width = 100);

// `samples JOB`: per step "== step N (attempt A) ==", then per sample its header line, the
// prompt, the text and the reference (when set) in full, control characters escaped
// (EscapeControls); then "steps with samples: ...". "no samples" when there are none.
std::string SamplesText(const v1::ListSamplesResponse& response);

// "chosen 1.25, rejected -0.5, accuracy 75%, margin 1.75".
std::string DpoRewardsLine(const v1::DpoRewards& dpo);

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_SAMPLE_OUTPUT_H_
