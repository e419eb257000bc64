#include "common/crc32c.h"

#include <array>

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

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, absl::string_view data) {
  uint32_t c = ~crc;
  for (unsigned char byte : data) c = kTable[(c ^ byte) & 0xFFu] ^ (c >> 8);
  return ~c;
}

uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data); }

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace llamafleet
