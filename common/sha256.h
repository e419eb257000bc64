#ifndef LLAMAFLEET_COMMON_SHA256_H_
#define LLAMAFLEET_COMMON_SHA256_H_

#include <string>

#include "absl/strings/string_view.h"

namespace llamafleet {

// Lowercase hex SHA-256 of `data` (OpenSSL's EVP interface). Credentials are stored and
// compared by this hash; a process whose OpenSSL cannot compute it aborts.
std::string Sha256Hex(absl::string_view data);

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_SHA256_H_
