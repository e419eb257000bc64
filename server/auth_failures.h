#ifndef LLAMAFLEET_SERVER_AUTH_FAILURES_H_
#define LLAMAFLEET_SERVER_AUTH_FAILURES_H_

// Failed credential attempts, per peer address: API tokens over gRPC and over HTTP (the
// gateway's in-process calls carry the HTTP client's address, kForwardedPeerKey), and
// workers' join tokens and credentials. The contract:
//   - every failure is logged with its peer, rate-limited: a peer's first failure in its
//     window, and the one that blocks it; beyond kMaxLinesPerSecond lines a second in all,
//     lines are dropped and counted in the next one;
//   - a peer with `limit` failures within `window` is blocked for `block`: each call it
//     makes meanwhile is refused RESOURCE_EXHAUSTED (HTTP 429) saying until when, before
//     any credential is looked at (a good one too), so guessing stays slow;
//   - at most max_peers peers are remembered; past that the one heard from longest ago is
//     forgotten (a block is kept over a count).
// One address behind NAT is one peer: tune limit to the clients that share one.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace llamafleet {

// Metadata the HTTP gateway's calls carry: the HTTP client's address, and the proof that
// the coordinator's own HTTP server put it there (AuthFailures::forward_proof(), a random
// secret of this process that never leaves it). The HTTP server sets both on every request,
// replacing any the client sent; a forwarded address without the proof is not believed.
inline constexpr char kForwardedPeerKey[] = "x-llamafleet-peer";
inline constexpr char kForwardedPeerProofKey[] = "x-llamafleet-peer-proof";

struct AuthFailureOptions {
  int limit = 20;  // failures per window before a block; <= 0: off
  absl::Duration window = absl::Minutes(1);
  absl::Duration block = absl::Minutes(5);
  size_t max_peers = 10000;
  Clock* clock = Clock::Real();
};

class AuthFailures {
 public:
  static constexpr int kMaxLinesPerSecond = 10;

  explicit AuthFailures(AuthFailureOptions options);

  // What the HTTP server sends as kForwardedPeerProofKey.
  const std::string& forward_proof() const { return forward_proof_; }
  // Who a call comes from: kForwardedPeerKey when `proof` is forward_proof(), else the
  // address of `grpc_peer`.
  std::string CallerAddress(absl::string_view grpc_peer, absl::string_view forwarded,
                            absl::string_view proof) const;

  // RESOURCE_EXHAUSTED while `peer` is blocked (naming the flags), else OK.
  absl::Status CheckPeer(const std::string& peer);
  // A failed attempt from `peer`: `what` says which ("invalid or revoked token").
  void RecordFailure(const std::string& peer, absl::string_view what);

 private:
  struct Peer {
    absl::Time window_start;
    int failures = 0;
    absl::Time blocked_until = absl::InfinitePast();
    absl::Time last_seen;
  };
  // Whether a line may be logged now (the global rate); `*dropped` gets the count skipped.
  bool MayLogLocked(absl::Time now, int64_t* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AuthFailureOptions options_;
  const std::string forward_proof_;
  std::mutex mu_;
  std::map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
  absl::Time log_second_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int lines_this_second_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_lines_ ABSL_GUARDED_BY(mu_) = 0;
};

// The address of a gRPC peer: "ipv4:10.0.0.5:41234" → "10.0.0.5", "ipv6:[::1]:5" → "::1";
// anything else as it is.
std::string PeerAddress(absl::string_view grpc_peer);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_AUTH_FAILURES_H_
