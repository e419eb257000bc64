#ifndef LLAMAFLEET_COMMON_CRC32C_H_
#define LLAMAFLEET_COMMON_CRC32C_H_

// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and final xor
// 0xFFFFFFFF): what TFRecord framing (TensorBoard's event files) checksums with, and what
// checkpoint files carry. On x86-64 processors with SSE 4.2 it runs on the processor's
// crc32 instruction (several GB/s a core); elsewhere one table lookup a byte. Neither
// Debian's abseil nor another installed library offers it. Pure code, thread-safe.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace llamafleet {

// The CRC-32C of `data`. Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(absl::string_view data);

// Extends `crc` (a finished Crc32c of some prefix) over `data`:
// Crc32cExtend(Crc32c(a), b) == Crc32c(a + b). Crc32cExtend(0, b) == Crc32c(b).
uint32_t Crc32cExtend(uint32_t crc, absl::string_view data);
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

// The same, one table lookup a byte whatever the processor: the reference the fast path
// is tested against.
uint32_t Crc32cExtendPortable(uint32_t crc, absl::string_view data);

// TFRecord's masked form of a CRC, stored in place of the CRC itself so that a CRC computed
// over bytes that hold CRCs stays well distributed: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t MaskCrc32c(uint32_t crc);

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_CRC32C_H_
