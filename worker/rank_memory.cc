#include "worker/rank_memory.h"

#include <algorithm>

namespace llamafleet::worker {

uint64_t DefaultRankMemoryLimit(uint64_t host_memory_bytes, int ranks) {
  if (host_memory_bytes == 0) return 0;
  const double share =
      static_cast<double>(host_memory_bytes) * kRanksShareOfHostMemory / std::max(ranks, 1);
  return std::max(static_cast<uint64_t>(share), kMinRankMemoryLimit);
}

uint64_t RankMemoryLimit(const std::optional<uint64_t>& configured,
                         const v1::Inventory& inventory) {
  if (configured.has_value()) return *configured;
  const int ranks = inventory.gpus_size() > 0 ? inventory.gpus_size() : inventory.cpu_ranks();
  return DefaultRankMemoryLimit(
      static_cast<uint64_t>(std::max<int64_t>(inventory.memory_bytes(), 0)), ranks);
}

}  // namespace llamafleet::worker
