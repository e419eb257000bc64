#include "nf4_base_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nf4.h"
#include "util.h"

namespace llamafleet::trainer {

ShardSource Nf4BaseSource(ShardSource whole, const std::vector<UnitLayout>& layout,
                          std::function<bool(const std::string& name)> quantized) {
  return [whole = std::move(whole), layout, quantized = std::move(quantized)](
             int unit, int64_t begin, int64_t end, at::Tensor out) -> absl::Status {
    LF_RETURN_IF_ERROR(whole(unit, begin, end, out));
    const UnitLayout& u = layout[unit];
    int64_t offset = 0;
    for (size_t i = 0; i < u.param_names.size(); ++i) {
      if (!u.is_frozen(i)) continue;
      const int64_t n = u.numel(i);
      const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + n);
      if (lo < hi && quantized(u.param_names[i])) {
        // The codes depend on every block of the tensor only through the absmax mean, so
        // the whole tensor is quantized even when only a slice is asked for.
        at::Tensor w = at::empty({n}, at::kFloat);
        LF_RETURN_IF_ERROR(whole(unit, offset, offset + n, w));
        absl::StatusOr<Nf4Tensor> q = QuantizeNf4(w.data_ptr<float>(), n);
        if (!q.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(u.param_names[i], ": cannot quantize to NF4: ", q.status().message()));
        }
        DequantizeNf4(*q, w.data_ptr<float>());
        out.narrow(0, lo - begin, hi - lo).copy_(w.narrow(0, lo - offset, hi - lo));
      }
      offset += n;
    }
    return absl::OkStatus();
  };
}

}  // namespace llamafleet::trainer
