#ifndef LLAMAFLEET_COMMON_BYTE_SIZE_H_
#define LLAMAFLEET_COMMON_BYTE_SIZE_H_

// Sizes as operators write them on command lines: a whole number of bytes, or one followed
// by K, M, G or T (powers of 1024, either case); and as they are shown back, in the same
// powers of 1024.

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

// "1023 B", "1.5 KiB", "5.0 GiB": one decimal in the largest unit below 1024 of it;
// "-" for a negative size (unknown).
inline std::string FormatBytes(int64_t bytes) {
  if (bytes < 0) return "-";
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_BYTE_SIZE_H_
