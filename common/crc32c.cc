#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace llamafleet {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reflected

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

// Both update the register without the initial and final inversion.
uint32_t UpdateTable(uint32_t c, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
// The crc32 instruction computes exactly the table's update, 8 bytes at a time.
__attribute__((target("sse4.2"))) uint32_t UpdateSse42(uint32_t c, const unsigned char* p, size_t n) {
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0; --n) c = _mm_crc32_u8(c, *p++);
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return c;
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (kHaveSse42) return ~UpdateSse42(~crc, p, size);
#endif
  return ~UpdateTable(~crc, p, size);
}

uint32_t Crc32cExtend(uint32_t crc, absl::string_view data) { return Crc32cExtend(crc, data.data(), data.size()); }

uint32_t Crc32cExtendPortable(uint32_t crc, absl::string_view data) {
  return ~UpdateTable(~crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data); }

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace llamafleet
