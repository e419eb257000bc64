#ifndef LLAMAFLEET_JOBSPEC_ESTIMATES_H_
#define LLAMAFLEET_JOBSPEC_ESTIMATES_H_

// jobspec.h's EstimateJobMemory and EstimateJobStepTime for a caller that read the
// vocabulary of the job's tokenizer: a preset that takes its tokenizer's vocabulary
// (model_presets.h, the tiny ones) is counted with `tokenizer_vocab` pieces instead of the
// preset table's. `tokenizer_vocab` <= 0, or any other model: as jobspec.h's.

#include <cstdint>
#include <optional>

#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

std::optional<v1::MemoryEstimate> EstimateJobMemoryWithVocab(const v1::JobSpec& spec,
                                                             int64_t tokenizer_vocab);

std::optional<v1::StepTimeEstimate> EstimateJobStepTimeWithVocab(
    const v1::JobSpec& spec, std::optional<double> price_per_instance_hour,
    int64_t tokenizer_vocab);

}  // namespace llamafleet

#endif  // LLAMAFLEET_JOBSPEC_ESTIMATES_H_
