#ifndef LLAMAFLEET_SERVER_HTTP_CONNECTION_LIMITS_H_
#define LLAMAFLEET_SERVER_HTTP_CONNECTION_LIMITS_H_

// The HTTP server's connection accounting, so that neither one client (half-sent requests,
// a slowloris) nor a few addresses of one attacker can hold every connection the server
// allows. The contract:
//   - at most max_total connections in all, and max_per_peer from one peer address;
//   - a connection is unauthenticated until one of its requests presents a good token
//     (Authenticated()); unauthenticated connections are a PeerPool (server/peer_pool.h):
//     at most max_unauthenticated_per_peer from one address, max_unauthenticated in all,
//     and a newcomer to a full pool takes the place of the oldest idle one (waiting for a
//     request head, SetIdle()) of the address holding the most, which the server closes.
// So the max_total - max_unauthenticated places are only ever held by clients with a good
// token, and a client from an address of its own always gets in to send its request
// (/healthz, or one with a token). Admit() at accept, Release() when the connection ends.
// Thread-safe.

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "server/peer_pool.h"

namespace llamafleet::http {

struct ConnectionLimitOptions {
  int max_total = 512;
  int max_per_peer = 64;                  // <= 0: no cap
  int max_unauthenticated = 128;          // <= 0: no cap but max_total
  int max_unauthenticated_per_peer = 32;  // <= 0: no cap but max_per_peer
};

class ConnectionLimits {
 public:
  explicit ConnectionLimits(ConnectionLimitOptions options);

  enum class Verdict { kAdmitted, kTooManyInAll, kTooManyFromPeer };
  struct Admission {
    Verdict verdict = Verdict::kAdmitted;
    // Admitted in its place: an idle unauthenticated connection, no longer counted, that
    // the server must close.
    std::optional<uint64_t> evicted;
  };
  // Counts connection `id` (greater than every id before) from `peer`, unauthenticated and
  // idle, when admitted; counts nothing otherwise.
  Admission Admit(uint64_t id, const std::string& peer);
  // Whether `id` is waiting for a request head (only idle ones make room for others).
  void SetIdle(uint64_t id, bool idle);
  // `id` presented a good token: it leaves the unauthenticated pool for good.
  void Authenticated(uint64_t id);
  // `id` ended. Nothing when it was evicted or never admitted.
  void Release(uint64_t id);

  int total() const;
  int unauthenticated() const;
  const ConnectionLimitOptions& options() const { return options_; }

 private:
  // Forgets `id` (known) in all and per peer.
  void ForgetLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ConnectionLimitOptions options_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::string> peers_ ABSL_GUARDED_BY(mu_);  // each connection's
  std::map<std::string, int> per_peer_ ABSL_GUARDED_BY(mu_);    // only peers with connections
  PeerPool unauthenticated_ ABSL_GUARDED_BY(mu_);
};

}  // namespace llamafleet::http

#endif  // LLAMAFLEET_SERVER_HTTP_CONNECTION_LIMITS_H_
