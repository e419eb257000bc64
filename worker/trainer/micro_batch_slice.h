// The split of an epoch's global rows that Sampler (data.h) and MixtureSampler
// (mixture_sampler.h) share: global batch `step` is micro_batch x grad_accum x world_size
// consecutive rows, rank r takes the r-th contiguous block of it, micro-step m the m-th
// micro_batch rows of that block. No Torch here.
#pragma once

#include <cstdint>
#include <vector>

namespace llamafleet::trainer {

// The rows of `rank`'s micro-step `micro` in step `step` (0-based within the epoch) of
// `epoch_rows`, split as `o` says (`Options`: either sampler's, with micro_batch,
// grad_accum and world_size). The step must lie inside the epoch (step <
// epoch_rows.size() / global batch): the samplers' callers keep to steps_per_epoch().
template <typename Row, typename Options>
std::vector<Row> MicroBatchSlice(const std::vector<Row>& epoch_rows, const Options& o, int64_t step,
                                 int64_t micro, int64_t rank) {
  const int64_t per_rank = o.micro_batch * o.grad_accum;
  const int64_t start = (step * o.world_size + rank) * per_rank + micro * o.micro_batch;
  return std::vector<Row>(epoch_rows.begin() + start, epoch_rows.begin() + start + o.micro_batch);
}

}  // namespace llamafleet::trainer
