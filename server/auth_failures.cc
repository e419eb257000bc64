#include "server/auth_failures.h"

#include <openssl/crypto.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/random_hex.h"
#include "spdlog/spdlog.h"

namespace llamafleet {
namespace {

// Empty without randomness: then no forwarded address is believed.
std::string ForwardProof() { return RandomHex(32).value_or(""); }

}  // namespace

AuthFailures::AuthFailures(AuthFailureOptions options)
    : options_(options), forward_proof_(ForwardProof()) {}

std::string AuthFailures::CallerAddress(absl::string_view grpc_peer, absl::string_view forwarded,
                                        absl::string_view proof) const {
  if (!forward_proof_.empty() && !forwarded.empty() && proof.size() == forward_proof_.size() &&
      CRYPTO_memcmp(proof.data(), forward_proof_.data(), proof.size()) == 0) {
    return std::string(forwarded);
  }
  return PeerAddress(grpc_peer);
}

absl::Status AuthFailures::CheckPeer(const std::string& peer) {
  if (options_.limit <= 0) return absl::OkStatus();
  const absl::Time now = options_.clock->Now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end() || now >= it->second.blocked_until) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "too many failed credential attempts from ", peer, " (", options_.limit, " within ",
      absl::FormatDuration(options_.window),
      ", --auth-failure-limit and --auth-failure-window); refused until ",
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", it->second.blocked_until, absl::UTCTimeZone()),
      " (--auth-failure-block ", absl::FormatDuration(options_.block), ")"));
}

void AuthFailures::RecordFailure(const std::string& peer, absl::string_view what) {
  const absl::Time now = options_.clock->Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (peers_.size() >= options_.max_peers && !peers_.count(peer)) ForgetOldestLocked();
  Peer& p = peers_[peer];
  p.last_seen = now;
  if (p.failures == 0 || now - p.window_start >= options_.window) {
    p.window_start = now;
    p.failures = 0;
  }
  ++p.failures;
  const bool blocks = options_.limit > 0 && p.failures >= options_.limit && now >= p.blocked_until;
  if (blocks) p.blocked_until = now + options_.block;
  if (p.failures != 1 && !blocks) return;
  int64_t dropped = 0;
  if (!MayLogLocked(now, &dropped)) return;
  const std::string skipped =
      dropped > 0 ? absl::StrCat(" (", dropped, " more such lines not logged)") : "";
  if (blocks) {
    spdlog::warn("failed credentials from {}: {}; {} failures within {}: refused for {}{}", peer,
                 std::string(what), p.failures, absl::FormatDuration(options_.window),
                 absl::FormatDuration(options_.block), skipped);
  } else {
    spdlog::warn(
        "failed credentials from {}: {} (further failures from it within {} are counted, not "
        "logged){}",
        peer, std::string(what), absl::FormatDuration(options_.window), skipped);
  }
}

bool AuthFailures::MayLogLocked(absl::Time now, int64_t* dropped) {
  if (now - log_second_ >= absl::Seconds(1)) {
    log_second_ = now;
    lines_this_second_ = 0;
  }
  if (lines_this_second_ >= kMaxLinesPerSecond) {
    ++dropped_lines_;
    return false;
  }
  ++lines_this_second_;
  *dropped = dropped_lines_;
  dropped_lines_ = 0;
  return true;
}

void AuthFailures::ForgetOldestLocked() {
  const absl::Time now = options_.clock->Now();
  auto pick = peers_.end();
  for (auto it = peers_.begin(); it != peers_.end(); ++it) {
    if (pick == peers_.end()) {
      pick = it;
      continue;
    }
    const bool blocked = now < it->second.blocked_until,
               pick_blocked = now < pick->second.blocked_until;
    if (blocked != pick_blocked) {
      if (!blocked) pick = it;  // a block is kept over a count
    } else if (it->second.last_seen < pick->second.last_seen) {
      pick = it;
    }
  }
  if (pick != peers_.end()) peers_.erase(pick);
}

std::string PeerAddress(absl::string_view peer) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    return std::string(colon == absl::string_view::npos ? peer : peer.substr(0, colon));
  }
  if (absl::ConsumePrefix(&peer, "ipv6:")) {
    if (absl::ConsumePrefix(&peer, "[")) {
      const size_t close = peer.find(']');
      return std::string(close == absl::string_view::npos ? peer : peer.substr(0, close));
    }
    return std::string(peer);
  }
  return std::string(peer);
}

}  // namespace llamafleet
