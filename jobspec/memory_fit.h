#ifndef LLAMAFLEET_JOBSPEC_MEMORY_FIT_H_
#define LLAMAFLEET_JOBSPEC_MEMORY_FIT_H_

// Whether a spec fits the instance type it names, by the trainer's memory model.

#include "jobspec/field_violations.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet::jobspec_internal {

// resources.instance_type names a known GPU instance: gpus_per_node must not exceed its
// GPUs, and the estimate must fit one of them. The refusal says what would fit. An
// instance type this library does not know is left to the scheduler, which sees the real
// workers. Expects defaults applied and every other rule met.
void CheckInstanceFit(const v1::JobSpec& spec, Violations& v);

}  // namespace llamafleet::jobspec_internal

#endif  // LLAMAFLEET_JOBSPEC_MEMORY_FIT_H_
