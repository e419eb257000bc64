// Tensor data of the GGUF tensor types (gguf_types.h) from float values and back, as
// ggml's reference code rounds them: F16 and BF16 to nearest even; Q8_0 per block of 32
// values with d = max|x| / 127 (stored as F16) and q = round(x / d), ties away from zero,
// quantized with the unrounded d as ggml's quantize_row_q8_0_ref does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gguf_types.h"

namespace llamafleet::trainer {

// The bytes of `count` values as `type`. INVALID_ARGUMENT when Q8_0 is asked for a count
// that is not a multiple of 32.
absl::StatusOr<std::string> EncodeGgufTensor(GgufTensorType type, const float* values,
                                             uint64_t count);

// The float values of `bytes` holding `count` values of `type`; INVALID_ARGUMENT when the
// size does not match.
absl::StatusOr<std::vector<float>> DecodeGgufTensor(GgufTensorType type, absl::string_view bytes,
                                                    uint64_t count);

// The largest error Q8_0 may make on a block whose largest magnitude is `block_absmax`:
// half a quantization step (d / 2) plus 127 times the F16 rounding error of d (plus a few
// float roundings).
double Q8_0ErrorBound(float block_absmax);

}  // namespace llamafleet::trainer
