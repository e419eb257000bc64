#include "common/random_hex.h"

#include <openssl/rand.h>

#include <vector>

namespace llamafleet {

std::optional<std::string> RandomHex(size_t bytes) {
  std::vector<unsigned char> random(bytes);
  if (bytes > 0 && RAND_bytes(random.data(), static_cast<int>(bytes)) != 1) return std::nullopt;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (unsigned char b : random) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace llamafleet
