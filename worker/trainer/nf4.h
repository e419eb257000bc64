// NF4 block quantization of a frozen base weight, as QLoRA defines it (Dettmers et al.,
// "QLoRA: Efficient Finetuning of Quantized LLMs", 2023) and bitsandbytes stores it:
//   - blocks of kNf4Block weights, each scaled by its absmax into [-1, 1] (multiplying by the
//     float reciprocal) and coded as the nearest of the 16 published NormalFloat levels
//     (a value exactly halfway between two levels takes the lower one; the halfway points
//     are the levels' midpoints rounded to float);
//   - "double quantization" of the absmaxes: their mean (summed in double, in order, then
//     rounded to float) is subtracted, and the centred absmaxes are coded in groups of
//     kNf4ScaleBlock blocks with the signed 8-bit dynamic map (DynamicMap8), each group scaled
//     by its own absmax (the nearest map value; an exact tie takes the lower one).
// Two 4-bit codes per byte, element 2i in the high nibble. A block of zeros codes as the
// level 0.0 (bitsandbytes' reciprocal of 0 would give NaN there). Every step is float
// arithmetic in a fixed order (nf4.cc is built without FMA contraction), so the codes are
// the same on every machine and at any world size; tests/trainer/nf4_reference.py is the
// independent reference they are checked against bit for bit.
// No Torch here: plain float buffers.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace llamafleet::trainer {

inline constexpr int64_t kNf4Block = 64;        // weights per first-level absmax
inline constexpr int64_t kNf4ScaleBlock = 256;  // absmaxes per second-level scale

struct Nf4Tensor {
  int64_t numel = 0;
  std::vector<uint8_t> codes;         // (numel + 1) / 2 bytes
  std::vector<uint8_t> absmax_codes;  // one per block: an index into DynamicMap8()
  std::vector<float> absmax_scales;   // one per group of kNf4ScaleBlock blocks
  float absmax_offset = 0;            // the mean of the blocks' absmaxes
};

// The 16 NormalFloat levels as published with QLoRA, ascending, from -1 to 1.
const std::array<float, 16>& Nf4Levels();

// bitsandbytes' signed dynamic 8-bit map (create_dynamic_map(signed=True, 7, 8)): 256
// ascending values in [-1, 1] holding 0 and 1, computed in double and rounded to float.
const std::array<float, 256>& DynamicMap8();

// Quantizes x[0..n). INVALID_ARGUMENT naming the first element that is not finite.
absl::StatusOr<Nf4Tensor> QuantizeNf4(const float* x, int64_t n);

// Writes q.numel values: level * (map[absmax_code] * scale + offset), in float.
void DequantizeNf4(const Nf4Tensor& q, float* out);

// Bytes Nf4Tensor holds for n weights: about 0.516 per weight (4 bits, one byte per 64
// weights, one float per 16,384 weights).
int64_t Nf4StorageBytes(int64_t n);

}  // namespace llamafleet::trainer
