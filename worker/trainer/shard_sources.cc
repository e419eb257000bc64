// Where a rank's shards come from (sharded_engine.h's ShardSource): an HF directory or the
// seeded init, each over a unit's trainable or its frozen tensors.
#include <memory>

#include "engine.h"
#include "hf_io.h"
#include "sharded_engine.h"
#include "util.h"

namespace llamafleet::trainer {

ShardSource HfShardSource(const HfModelDir& dir, const std::vector<UnitLayout>& layout,
                          bool frozen) {
  return
      [&dir, layout, frozen](int unit, int64_t begin, int64_t end, at::Tensor out) -> absl::Status {
        const UnitLayout& u = layout[unit];
        int64_t offset = 0;
        for (size_t i = 0; i < u.param_names.size(); ++i) {
          if (u.is_frozen(i) != frozen) continue;
          const int64_t n = u.numel(i);
          const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
          if (lo < hi) {
            LF_ASSIGN_OR_RETURN(at::Tensor part,
                                dir.ReadFlatSlice(u.param_names[i], lo - offset, hi - offset));
            out.narrow(0, lo - begin, hi - lo).copy_(part);
          }
          offset += n;
        }
        return absl::OkStatus();
      };
}

ShardSource SeededShardSource(const std::vector<UnitLayout>& layout, uint64_t seed, bool frozen) {
  // Draws only the requested elements of the selected tensors (InitFlatSlice).
  return [layout, seed, frozen](int unit, int64_t begin, int64_t end,
                                at::Tensor out) -> absl::Status {
    const UnitLayout& u = layout[unit];
    int64_t offset = 0;
    for (size_t i = 0; i < u.param_names.size(); ++i) {
      if (u.is_frozen(i) != frozen) continue;
      const int64_t n = u.numel(i);
      const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
      if (lo < hi) {
        out.narrow(0, lo - begin, hi - lo)
            .copy_(InitFlatSlice(u.param_names[i], u.shapes[i], seed, lo - offset, hi - offset));
      }
      offset += n;
    }
    return absl::OkStatus();
  };
}

}  // namespace llamafleet::trainer
