// The vocabulary of the GGUF format (version 3) that llama.cpp and Ollama load, as the
// specification (ggml's docs/gguf.md, gguf-py's constants.py) defines it: metadata value
// types, the tensor types written here, their block sizes, and the half-precision
// conversions the tensor types need. Shared by the writer, the reader and the tests.
//
// File layout (all little-endian): magic "GGUF", version u32 (3), tensor count u64,
// metadata count u64; metadata entries (key string, value type u32, value); tensor infos
// (name string, n_dims u32, dims u64 innermost first, tensor type u32, offset u64 from the
// data section's start, a multiple of the alignment); padding to general.alignment (32 by
// default); the data section. A string is a u64 byte count and the bytes (no NUL); an
// array is an element type u32, a count u64 and the elements.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace llamafleet::trainer {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;  // GGML_MAX_DIMS

enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
// "u32", "string", ...; nullptr for a value outside the enum.
const char* GgufValueTypeName(GgufValueType type);
// Bytes of one scalar of `type`; 0 for kString and kArray (variable) or an unknown type.
int GgufScalarSize(GgufValueType type);

// The ggml tensor types this code writes and reads (ggml_type numbering).
enum class GgufTensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ8_0 = 8,  // blocks of 32 values: an f16 scale d = max|x| / 127, then 32 int8 q = round(x / d)
  kBf16 = 30,
};
inline constexpr int kQ8_0BlockValues = 32;
inline constexpr int kQ8_0BlockBytes = 2 + 32;
// "F32", "F16", "Q8_0", "BF16"; nullptr for any other number.
const char* GgufTensorTypeName(GgufTensorType type);
// Whether `raw` is one of the types above.
bool IsKnownGgufTensorType(uint32_t raw);
// Bytes of a row of `values` values of `type`, or nullopt when a Q8_0 row is not a whole
// number of blocks.
std::optional<uint64_t> GgufRowBytes(GgufTensorType type, uint64_t values);

// llama.cpp's general.file_type (LlamaFileType) for a model whose matrices are `type`.
uint32_t GgufFileType(GgufTensorType type);

// IEEE half and bfloat16 from float, rounded to nearest even (NaN stays NaN), and back.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t bits);

// Token types of tokenizer.ggml.token_type (SentencePiece's numbering).
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

}  // namespace llamafleet::trainer
