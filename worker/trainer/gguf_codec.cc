#include "gguf_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace llamafleet::trainer {

absl::StatusOr<std::string> EncodeGgufTensor(GgufTensorType type, const float* values,
                                             uint64_t count) {
  const std::optional<uint64_t> bytes = GgufRowBytes(type, count);
  if (!bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(GgufTensorTypeName(type), " needs a multiple of 32 values, got ", count));
  }
  std::string out(*bytes, '\0');
  char* p = out.data();
  switch (type) {
    case GgufTensorType::kF32:
      if (count > 0) std::memcpy(p, values, count * 4);
      break;
    case GgufTensorType::kF16:
    case GgufTensorType::kBf16:
      for (uint64_t i = 0; i < count; ++i) {
        const uint16_t h =
            type == GgufTensorType::kF16 ? FloatToHalf(values[i]) : FloatToBf16(values[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      break;
    case GgufTensorType::kQ8_0:
      for (uint64_t b = 0; b < count / kQ8_0BlockValues; ++b) {
        const float* x = values + b * kQ8_0BlockValues;
        char* block = p + b * kQ8_0BlockBytes;
        float amax = 0;
        for (int j = 0; j < kQ8_0BlockValues; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float inverse = d != 0 ? 1.0f / d : 0.0f;
        const uint16_t d16 = FloatToHalf(d);
        std::memcpy(block, &d16, 2);
        for (int j = 0; j < kQ8_0BlockValues; ++j) {
          block[2 + j] = static_cast<char>(static_cast<int8_t>(std::roundf(x[j] * inverse)));
        }
      }
      break;
  }
  return out;
}

absl::StatusOr<std::vector<float>> DecodeGgufTensor(GgufTensorType type, absl::string_view bytes,
                                                    uint64_t count) {
  const std::optional<uint64_t> expected = GgufRowBytes(type, count);
  if (!expected || *expected != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        count, " values of ", GgufTensorTypeName(type) ? GgufTensorTypeName(type) : "?",
        " do not take ", bytes.size(), " bytes"));
  }
  std::vector<float> out(count);
  const char* p = bytes.data();
  for (uint64_t i = 0; i < count; ++i) {
    switch (type) {
      case GgufTensorType::kF32:
        std::memcpy(&out[i], p + 4 * i, 4);
        break;
      case GgufTensorType::kF16:
      case GgufTensorType::kBf16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = type == GgufTensorType::kF16 ? HalfToFloat(h) : Bf16ToFloat(h);
        break;
      }
      case GgufTensorType::kQ8_0: {
        const char* block = p + (i / kQ8_0BlockValues) * kQ8_0BlockBytes;
        uint16_t d16;
        std::memcpy(&d16, block, 2);
        out[i] = HalfToFloat(d16) *
                 static_cast<float>(static_cast<int8_t>(block[2 + i % kQ8_0BlockValues]));
        break;
      }
    }
  }
  return out;
}

double Q8_0ErrorBound(float block_absmax) {
  const float d = block_absmax / 127.0f;
  // (plus a few float roundings of x / d and of the product d * q)
  return d / 2.0 + 127.0 * std::fabs(static_cast<double>(HalfToFloat(FloatToHalf(d))) - d) +
         4.0 * std::numeric_limits<float>::epsilon() * block_absmax;
}

}  // namespace llamafleet::trainer
