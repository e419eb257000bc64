#ifndef LLAMAFLEET_COMMON_UTF8_H_
#define LLAMAFLEET_COMMON_UTF8_H_

#include <cstddef>
#include <string_view>

namespace llamafleet {

// The length of the longest prefix of `s` that is at most `limit` bytes and does not end
// inside a UTF-8 character: a cut that would fall on a continuation byte moves back to
// the start of its character. Bytes that are not UTF-8 are counted as they are.
inline size_t Utf8PrefixLength(std::string_view s, size_t limit) {
  if (s.size() <= limit) return s.size();
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return end;
}

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_UTF8_H_
