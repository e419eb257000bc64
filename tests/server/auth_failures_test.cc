// AuthFailures on a fake clock: a block after `limit` failures within the window and its
// end, windows that pass without a block, forwarded addresses believed only with the
// process's proof, the peers remembered bounded, and gRPC peer strings read as addresses.
#include "server/auth_failures.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace llamafleet {
namespace {

TEST(AuthFailuresTest, APeerIsBlockedAfterTheLimitWithinTheWindowUntilTheBlockPasses) {
  FakeClock clock;
  AuthFailures f(
      {.limit = 3, .window = absl::Minutes(1), .block = absl::Minutes(5), .clock = &clock});
  for (int i = 0; i < 2; ++i) f.RecordFailure("10.0.0.5", "invalid or revoked token");
  EXPECT_TRUE(f.CheckPeer("10.0.0.5").ok());
  // The window passes: the count starts over.
  clock.Advance(absl::Minutes(2));
  for (int i = 0; i < 2; ++i) f.RecordFailure("10.0.0.5", "invalid or revoked token");
  EXPECT_TRUE(f.CheckPeer("10.0.0.5").ok());
  f.RecordFailure("10.0.0.5", "invalid or revoked token");
  absl::Status s = f.CheckPeer("10.0.0.5");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(),
                                "too many failed credential attempts from 10.0.0.5 (3 within 1m"))
      << s;
  EXPECT_TRUE(f.CheckPeer("10.0.0.6").ok()) << "other addresses are not blocked";
  clock.Advance(absl::Minutes(5));
  EXPECT_TRUE(f.CheckPeer("10.0.0.5").ok());
  AuthFailures off({.limit = 0, .clock = &clock});
  for (int i = 0; i < 100; ++i) off.RecordFailure("10.0.0.5", "x");
  EXPECT_TRUE(off.CheckPeer("10.0.0.5").ok());
}

TEST(AuthFailuresTest, ForwardedAddressesNeedTheProofAndPeersAreBounded) {
  FakeClock clock;
  AuthFailures f({.limit = 2, .max_peers = 3, .clock = &clock});
  ASSERT_EQ(f.forward_proof().size(), 64u);
  EXPECT_EQ(f.CallerAddress("unknown", "10.1.1.1", f.forward_proof()), "10.1.1.1");
  EXPECT_EQ(f.CallerAddress("ipv4:10.0.0.9:4242", "10.1.1.1", "guess"), "10.0.0.9");
  EXPECT_EQ(f.CallerAddress("ipv4:10.0.0.9:4242", "10.1.1.1", ""), "10.0.0.9");
  // A blocked peer is kept over those with a count only.
  f.RecordFailure("a", "x");
  f.RecordFailure("a", "x");
  for (int i = 0; i < 10; ++i) {
    clock.Advance(absl::Seconds(1));
    f.RecordFailure(absl::StrCat("p", i), "x");
  }
  EXPECT_TRUE(absl::IsResourceExhausted(f.CheckPeer("a")));
}

TEST(AuthFailuresTest, GrpcPeersAreReadAsAddresses) {
  EXPECT_EQ(PeerAddress("ipv4:10.0.0.5:41234"), "10.0.0.5");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:5"), "::1");
  EXPECT_EQ(PeerAddress("ipv6:[fe80::1%eth0]:5"), "fe80::1%eth0");
  EXPECT_EQ(PeerAddress("unix:/run/x.sock"), "unix:/run/x.sock");
  EXPECT_EQ(PeerAddress("unknown"), "unknown");
}

}  // namespace
}  // namespace llamafleet
