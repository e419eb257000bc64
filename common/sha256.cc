// SHA-256 through OpenSSL's EVP interface.

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/sha256.h"

namespace llamafleet {
namespace {

// The digest, fetched from the default provider once per process and never freed. The
// legacy EVP_sha256() handle would make every EVP_Digest call look the implementation up
// in the provider again; an explicitly fetched one is used as is.
const EVP_MD* Sha256Digest() {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
  static const EVP_MD* const md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  return md;
#else
  return EVP_sha256();
#endif
}

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &length, Sha256Digest(), nullptr) != 1) {
    // Credentials are compared by this hash: a process that cannot compute it must not
    // go on with a wrong one.
    std::fputs("llamafleet: OpenSSL cannot compute SHA-256\n", stderr);
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

}  // namespace llamafleet
