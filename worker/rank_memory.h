#ifndef LLAMAFLEET_WORKER_RANK_MEMORY_H_
#define LLAMAFLEET_WORKER_RANK_MEMORY_H_

// How much memory each trainer rank may allocate, so that a rank fed a hostile model file
// or a typo in a shape fails its own allocation instead of taking the node's memory (and
// the worker, and the other jobs' ranks, with it).
//
// The bound is RLIMIT_DATA, set on each rank before exec. Since Linux 4.7 it counts every
// private writable mapping (the heap, anonymous mmap, thread stacks): what malloc, Torch's
// CPU allocator and a JSON parser take. It leaves out what CUDA maps: the driver's virtual
// address reservations are PROT_NONE until device memory is mapped into them from the
// device files (shared mappings), so GPU ranks run under it, where RLIMIT_AS (the whole
// address space, which CUDA reserves by the hundreds of GiB) would fail their CUDA set-up.
// Read-only file mappings (safetensors weights, the token cache) are not counted either.
//
// By default the worker gives each rank an equal share of 90% of the host's memory (the
// inventory's) among its ranks, its GPUs or --cpu-ranks, so all of them together stay
// under it; the rest is the worker's, the page cache's and the system's.

#include <cstdint>
#include <optional>

#include "llamafleet/v1/worker.pb.h"

namespace llamafleet::worker {

// The share of the host's memory all ranks together may allocate by default.
inline constexpr double kRanksShareOfHostMemory = 0.9;
// The smallest bound the worker applies (and accepts from --trainer-memory-limit).
inline constexpr uint64_t kMinRankMemoryLimit = uint64_t{64} << 20;

// The default bound of each rank: kRanksShareOfHostMemory of `host_memory_bytes` divided
// among `ranks` (at least one), never below kMinRankMemoryLimit. 0 (none) when the host's
// memory is unknown (0).
uint64_t DefaultRankMemoryLimit(uint64_t host_memory_bytes, int ranks);

// The bound the worker applies to each rank: `configured` when set (0: none), else the
// default from `inventory` (its memory among its GPUs, or its CPU ranks).
uint64_t RankMemoryLimit(const std::optional<uint64_t>& configured, const v1::Inventory& inventory);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_RANK_MEMORY_H_
