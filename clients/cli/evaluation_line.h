#ifndef LLAMAFLEET_CLIENTS_CLI_EVALUATION_LINE_H_
#define LLAMAFLEET_CLIENTS_CLI_EVALUATION_LINE_H_

#include <string>

#include "llamafleet/v1/job.pb.h"

namespace llamafleet::cli {

// What an evaluation job (kind evaluate) scores, for `submit --dry-run` and `describe`:
// "scores MODEL[ with the adapter DIR] on eval sets a, b (no training: ...)"; "" for a
// training job.
std::string EvaluationLine(const v1::JobSpec& spec);

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_EVALUATION_LINE_H_
