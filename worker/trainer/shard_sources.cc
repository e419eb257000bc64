// Where a rank's shards come from (sharded_engine.h's ShardSource): an HF directory or the
// seeded init, each over a unit's trainable or its frozen tensors.
#include <memory>

#include "hf_io.h"
#include "sharded_engine.h"
#include "util.h"

namespace llamafleet::trainer {

ShardSource HfShardSource(const HfModelDir& dir, const std::vector<UnitLayout>& layout, bool frozen) {
  return [&dir, layout, frozen](int unit, int64_t begin, int64_t end, at::Tensor out) -> absl::Status {
    const UnitLayout& u = layout[unit];
    int64_t offset = 0;
    for (size_t i = 0; i < u.param_names.size(); ++i) {
      if (u.is_frozen(i) != frozen) continue;
      const int64_t n = u.numel(i);
      const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
      if (lo < hi) {
        LF_ASSIGN_OR_RETURN(at::Tensor part, dir.ReadFlatSlice(u.param_names[i], lo - offset, hi - offset));
        out.narrow(0, lo - begin, hi - lo).copy_(part);
      }
      offset += n;
    }
    return absl::OkStatus();
  };
}

ShardSource SeededShardSource(const std::vector<UnitLayout>& layout, uint64_t seed, bool frozen) {
  auto cache = std::make_shared<std::pair<int, at::Tensor>>(-1, at::Tensor());
  return [layout, seed, frozen, cache](int unit, int64_t begin, int64_t end, at::Tensor out) -> absl::Status {
    if (cache->first != unit) {
      // Only the selected tensors are drawn (each has its own generator, see InitUnit).
      UnitLayout part{layout[unit].name, {}, {}, {}, {}};
      for (size_t i = 0; i < layout[unit].param_names.size(); ++i) {
        if (layout[unit].is_frozen(i) != frozen) continue;
        part.param_names.push_back(layout[unit].param_names[i]);
        part.shapes.push_back(layout[unit].shapes[i]);
      }
      std::vector<at::Tensor> flat;
      for (const at::Tensor& t : InitUnit(part, seed)) flat.push_back(t.reshape({-1}));
      *cache = {unit, flat.empty() ? at::empty({0}, at::kFloat) : at::cat(flat)};
    }
    out.copy_(cache->second.narrow(0, begin, end - begin));
    return absl::OkStatus();
  };
}

}  // namespace llamafleet::trainer
