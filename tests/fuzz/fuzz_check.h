// What every harness shares: the input as text, and FUZZ_CHECK, which aborts (a finding
// libFuzzer records as a crash) when a property of the code under test does not hold.
#ifndef LLAMAFLEET_TESTS_FUZZ_FUZZ_CHECK_H_
#define LLAMAFLEET_TESTS_FUZZ_FUZZ_CHECK_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

#define FUZZ_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                              \
      std::abort();                                                            \
    }                                                                          \
  } while (0)

namespace llamafleet::fuzz {

inline std::string_view Text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}
// The same, for the APIs that take absl's (which need not be std's).
inline absl::string_view AbslText(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

// Splits `text` at every `separator` (the separators dropped).
inline std::vector<std::string> Split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(separator, start);
    parts.emplace_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

// A path whose file holds exactly `data` (one in-memory file per process, rewritten on
// each call), for parsers that open a path.
inline const std::string& InMemoryFile(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz-input", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  FUZZ_CHECK(fd >= 0, "memfd_create failed");
  FUZZ_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == static_cast<ssize_t>(size), "cannot write");
  return path;
}

}  // namespace llamafleet::fuzz

#endif  // LLAMAFLEET_TESTS_FUZZ_FUZZ_CHECK_H_
