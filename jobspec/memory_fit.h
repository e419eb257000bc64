#ifndef LLAMAFLEET_JOBSPEC_MEMORY_FIT_H_
#define LLAMAFLEET_JOBSPEC_MEMORY_FIT_H_

// Whether a spec fits the instance type it names, by the trainer's memory model.

#include <optional>

#include "jobspec/field_violations.h"
#include "jobspec/memory_estimate.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet::jobspec_internal {

// resources.instance_type names a known GPU instance: gpus_per_node must not exceed its
// GPUs, and the estimate must fit one of them. The refusal says what would fit. An
// instance type this library does not know is left to the scheduler, which sees the real
// workers. Expects defaults applied and every other rule met.
void CheckInstanceFit(const v1::JobSpec& spec, Violations& v);

// The memory (and step-time) model's inputs for `spec` on `world_size` ranks (0 = nodes x
// gpus_per_node); nullopt when the model's shape is not known here (model.path).
// `tokenizer_vocab` > 0: the vocabulary of a preset that takes its tokenizer's.
std::optional<sched::MemoryInputs> MemoryInputsOf(const v1::JobSpec& spec, int world_size,
                                                  int64_t tokenizer_vocab = 0);

}  // namespace llamafleet::jobspec_internal

#endif  // LLAMAFLEET_JOBSPEC_MEMORY_FIT_H_
