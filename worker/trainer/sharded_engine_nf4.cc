// The sharded engine's packed frozen flats: QLoRA's NF4 base (sharded_engine.h's file
// comment has the format).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nf4.h"
#include "sharded_engine.h"
#include "util.h"

namespace llamafleet::trainer {

namespace {
int64_t Align(int64_t n, int64_t to) { return (n + to - 1) / to * to; }
// An NF4 segment: codes [blocks x 32], absmax codes [blocks] (padded to 4 bytes), the
// groups' float scales, the float offset.
int64_t Nf4Groups(int64_t blocks) { return (blocks + kNf4ScaleBlock - 1) / kNf4ScaleBlock; }
int64_t Nf4SegmentBytes(int64_t blocks) {
  return blocks * kNf4Block / 2 + Align(blocks, 4) + 4 * Nf4Groups(blocks) + 4;
}
}  // namespace

absl::StatusOr<bool> ShardedEngine::InitPackedFrozen(int unit, const ShardSource& frozen_source) {
  const UnitLayout& u = layout_[unit];
  bool any = false;
  for (size_t i = 0; i < u.param_names.size() && options_.nf4_frozen; ++i) {
    any = any || (u.is_frozen(i) && options_.nf4_frozen(u.param_names[i]));
  }
  if (!any) return false;
  if (!nf4_pairs_.defined()) {
    std::vector<float> pairs;
    for (int b = 0; b < 256; ++b)
      pairs.insert(pairs.end(), {Nf4Levels()[b >> 4], Nf4Levels()[b & 15]});
    nf4_pairs_ = at::tensor(pairs).view({256, 2}).to(options_.device);
    const std::array<float, 256>& map = DynamicMap8();
    nf4_map_ = at::tensor(std::vector<float>(map.begin(), map.end())).to(options_.device);
  }
  const int64_t elem = static_cast<int64_t>(c10::elementSize(options_.compute_dtype));
  std::vector<PackedSegment>& segs = packed_[unit];
  std::vector<int> tensor_of;
  int64_t offset = 0, bytes = 0;
  for (size_t i = 0; i < u.param_names.size(); ++i) {
    if (!u.is_frozen(i)) continue;
    const int64_t n = u.numel(i);
    const bool nf4 = options_.nf4_frozen(u.param_names[i]);
    const int64_t blocks = nf4 ? (n + kNf4Block - 1) / kNf4Block : 0;
    segs.push_back(PackedSegment{offset, n, bytes, blocks});
    tensor_of.push_back(static_cast<int>(i));
    bytes += Align(nf4 ? Nf4SegmentBytes(blocks) : n * elem, 8);
    offset += n;
  }
  const int64_t group = shard_comm_->size();
  ShardSpan sp;
  sp.numel = bytes;
  sp.padded = (bytes + group - 1) / group * group;
  sp.shard = sp.padded / group;
  sp.begin = shard_comm_->rank() * sp.shard;
  packed_spans_[unit] = sp;

  // Each segment this rank's bytes overlap is encoded whole (NF4 codes depend on the whole
  // tensor through the absmax mean), then the overlap is copied.
  at::Tensor shard = at::zeros({sp.shard}, at::kByte);
  uint8_t* dst = shard.data_ptr<uint8_t>();
  for (size_t k = 0; k < segs.size(); ++k) {
    const PackedSegment& s = segs[k];
    const int64_t size = s.blocks > 0 ? Nf4SegmentBytes(s.blocks) : s.numel * elem;
    const int64_t lo = std::max(sp.begin, s.byte_offset);
    const int64_t hi = std::min(sp.begin + sp.shard, s.byte_offset + size);
    if (lo >= hi) continue;
    if (!frozen_source)
      return absl::InvalidArgumentError("a layout with frozen tensors needs a frozen source");
    at::Tensor w = at::empty({s.numel}, at::kFloat);
    LF_RETURN_IF_ERROR(frozen_source(unit, s.offset, s.offset + s.numel, w));
    std::vector<uint8_t> encoded(size);
    if (s.blocks > 0) {
      absl::StatusOr<Nf4Tensor> q = QuantizeNf4(w.data_ptr<float>(), s.numel);
      if (!q.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            u.param_names[tensor_of[k]], ": cannot quantize to NF4: ", q.status().message()));
      }
      // Codes past numel are never read back (DecodeFrozen stops at numel).
      std::fill(encoded.begin(), encoded.begin() + s.blocks * kNf4Block / 2, uint8_t{0x77});
      std::memcpy(encoded.data(), q->codes.data(), q->codes.size());
      uint8_t* at = encoded.data() + s.blocks * kNf4Block / 2;
      std::memcpy(at, q->absmax_codes.data(), s.blocks);
      at += Align(s.blocks, 4);
      std::memcpy(at, q->absmax_scales.data(), q->absmax_scales.size() * sizeof(float));
      std::memcpy(at + q->absmax_scales.size() * sizeof(float), &q->absmax_offset, sizeof(float));
    } else {
      const at::Tensor cast = w.to(options_.compute_dtype).contiguous();
      std::memcpy(encoded.data(), cast.data_ptr(), size);
    }
    std::memcpy(dst + (lo - sp.begin), encoded.data() + (lo - s.byte_offset), hi - lo);
  }
  frozen_[unit] = shard.to(options_.device);
  return true;
}

void ShardedEngine::DecodeFrozen(int unit, const at::Tensor& packed, at::Tensor out) const {
  at::NoGradGuard no_grad;
  for (const PackedSegment& s : packed_[unit]) {
    at::Tensor dst = out.narrow(0, s.offset, s.numel);
    if (s.blocks == 0) {
      const int64_t elem = static_cast<int64_t>(c10::elementSize(options_.compute_dtype));
      dst.copy_(packed.narrow(0, s.byte_offset, s.numel * elem).view(options_.compute_dtype));
      continue;
    }
    const int64_t code_bytes = s.blocks * kNf4Block / 2, groups = Nf4Groups(s.blocks);
    const at::Tensor codes = packed.narrow(0, s.byte_offset, code_bytes).to(at::kLong);
    const at::Tensor absmax_codes =
        packed.narrow(0, s.byte_offset + code_bytes, s.blocks).to(at::kLong);
    const int64_t scales_at = s.byte_offset + code_bytes + Align(s.blocks, 4);
    const at::Tensor scales = packed.narrow(0, scales_at, 4 * groups + 4).view(at::kFloat);
    // The block absmaxes, map[code] * scale + offset: two fp32 operations, each rounded, as
    // DequantizeNf4 computes them (no fused multiply-add).
    at::Tensor absmax = nf4_map_.index_select(0, absmax_codes);
    absmax.mul_(
        scales.narrow(0, 0, groups).repeat_interleave(kNf4ScaleBlock).narrow(0, 0, s.blocks));
    absmax.add_(scales.narrow(0, groups, 1));
    // [bytes, 2] levels (high nibble first) = [blocks, 64] in element order; times the
    // block's absmax in fp32.
    at::Tensor values = nf4_pairs_.index_select(0, codes).view({s.blocks, kNf4Block});
    values.mul_(absmax.view({s.blocks, 1}));
    dst.copy_(values.view({-1}).narrow(0, 0, s.numel));
  }
}

}  // namespace llamafleet::trainer
