#ifndef LLAMAFLEET_COMMON_RANDOM_HEX_H_
#define LLAMAFLEET_COMMON_RANDOM_HEX_H_

// Secrets and ids from the system's cryptographic randomness (OpenSSL's RAND_bytes), as
// lowercase hex: API tokens, join tokens, worker credentials, worker instance ids.

#include <cstddef>
#include <optional>
#include <string>

namespace llamafleet {

// `bytes` random bytes as 2 x `bytes` hex digits; nullopt when no randomness is available
// (the caller says what it could not make).
std::optional<std::string> RandomHex(size_t bytes);

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_RANDOM_HEX_H_
