#ifndef LLAMAFLEET_JOBSPEC_PARALLELISM_H_
#define LLAMAFLEET_JOBSPEC_PARALLELISM_H_

// The parallelism block's rules: which tensor-parallel degrees a spec allows, and the
// data-parallel world they leave.

#include <cstdint>
#include <vector>

#include "jobspec/field_violations.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet::jobspec_internal {

// The tensor-parallel degrees the spec allows, ascending (1 first): the common divisors
// of resources.gpus_per_node (a tensor-parallel group never crosses a node),
// fsdp.hybrid_shard_group_size with HYBRID_SHARD (nor a shard group) and, where the shape
// is known here (a preset), the model's attention heads, KV heads, intermediate size and
// vocabulary. Empty when gpus_per_node is below 1. Expects defaults applied.
std::vector<int> TensorParallelChoices(const v1::JobSpec& spec);

// parallelism.tensor_parallel is >= 1 and one of TensorParallelChoices; a refusal lists
// what it must divide and the degrees that would do.
void CheckTensorParallel(const v1::JobSpec& spec, Violations& v);

// Whether the data-parallel world is whole: tensor_parallel >= 1 divides gpus_per_node
// (>= 1). The rules that count data-parallel ranks are checked only then.
bool DataParallelWorldIsWhole(const v1::JobSpec& spec);

// Data-parallel ranks on `nodes` nodes: nodes x gpus_per_node / tensor_parallel. Expects
// DataParallelWorldIsWhole.
int64_t DataParallelRanks(const v1::JobSpec& spec, int64_t nodes);

}  // namespace llamafleet::jobspec_internal

#endif  // LLAMAFLEET_JOBSPEC_PARALLELISM_H_
