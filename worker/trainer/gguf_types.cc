#include "gguf_types.h"

#include <cmath>
#include <cstring>

namespace llamafleet::trainer {

const char* GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
      return "u8";
    case GgufValueType::kI8:
      return "i8";
    case GgufValueType::kU16:
      return "u16";
    case GgufValueType::kI16:
      return "i16";
    case GgufValueType::kU32:
      return "u32";
    case GgufValueType::kI32:
      return "i32";
    case GgufValueType::kF32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "u64";
    case GgufValueType::kI64:
      return "i64";
    case GgufValueType::kF64:
      return "f64";
  }
  return nullptr;
}

int GgufScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    default:
      return 0;
  }
}

const char* GgufTensorTypeName(GgufTensorType type) {
  switch (type) {
    case GgufTensorType::kF32:
      return "F32";
    case GgufTensorType::kF16:
      return "F16";
    case GgufTensorType::kQ8_0:
      return "Q8_0";
    case GgufTensorType::kBf16:
      return "BF16";
  }
  return nullptr;
}

bool IsKnownGgufTensorType(uint32_t raw) {
  return GgufTensorTypeName(static_cast<GgufTensorType>(raw)) != nullptr;
}

std::optional<uint64_t> GgufRowBytes(GgufTensorType type, uint64_t values) {
  switch (type) {
    case GgufTensorType::kF32:
      return values * 4;
    case GgufTensorType::kF16:
    case GgufTensorType::kBf16:
      return values * 2;
    case GgufTensorType::kQ8_0:
      if (values % kQ8_0BlockValues != 0) return std::nullopt;
      return values / kQ8_0BlockValues * kQ8_0BlockBytes;
  }
  return std::nullopt;
}

uint32_t GgufFileType(GgufTensorType type) {
  switch (type) {
    case GgufTensorType::kF32:
      return 0;  // ALL_F32
    case GgufTensorType::kF16:
      return 1;  // MOSTLY_F16
    case GgufTensorType::kQ8_0:
      return 7;  // MOSTLY_Q8_0
    case GgufTensorType::kBf16:
      return 32;  // MOSTLY_BF16
  }
  return 0;
}

uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a multiple of 2^-24, rounded to nearest even
    // (scaling by a power of two is exact; lrintf rounds ties to even).
    float magnitude;
    std::memcpy(&magnitude, &abs, 4);
    return static_cast<uint16_t>(sign |
                                 static_cast<uint32_t>(std::lrintf(magnitude * 16777216.0f)));
  }
  const uint32_t rebased = abs - 0x38000000u;  // exponent bias 127 -> 15
  return static_cast<uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  uint32_t x;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    std::memcpy(&x, &magnitude, 4);
    x |= sign;
  } else if (exponent == 31) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else {
    x = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &x, 4);
  return out;
}

uint16_t FloatToBf16(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float Bf16ToFloat(uint16_t bits) {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &x, 4);
  return out;
}

}  // namespace llamafleet::trainer
