#ifndef LLAMAFLEET_COMMON_BYTE_SIZE_H_
#define LLAMAFLEET_COMMON_BYTE_SIZE_H_

// Sizes as operators write them on command lines: a whole number of bytes, or one followed
// by K, M, G or T (powers of 1024, either case).

#include <cstdint>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace llamafleet {

// The size `text` names; nullopt for anything else (empty, a sign, a fraction, another
// suffix, or more than 2^64 - 1 bytes).
inline std::optional<uint64_t> ParseByteSize(absl::string_view text) {
  int shift = 0;
  if (!text.empty() && !absl::ascii_isdigit(static_cast<unsigned char>(text.back()))) {
    switch (absl::ascii_toupper(static_cast<unsigned char>(text.back()))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: return std::nullopt;
    }
    text.remove_suffix(1);
  }
  uint64_t n = 0;
  if (text.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(text.front())) ||
      !absl::SimpleAtoi(text, &n) || (shift > 0 && n > (UINT64_MAX >> shift))) {
    return std::nullopt;
  }
  return n << shift;
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_BYTE_SIZE_H_
