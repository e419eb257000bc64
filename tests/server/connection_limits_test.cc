// ConnectionLimits: caps in all and per address, and the pool of connections without a
// good token: a few addresses fill it only to push each other out, a newcomer from an
// address of its own takes an idle one's place, one mid-request is never taken.
#include "server/http/connection_limits.h"

#include "gtest/gtest.h"

namespace llamafleet::http {
namespace {

using Verdict = ConnectionLimits::Verdict;

TEST(ConnectionLimitsTest, OnePeerCannotTakeEverySlot) {
  ConnectionLimits limits({.max_total = 5,
                           .max_per_peer = 2,
                           .max_unauthenticated = 0,
                           .max_unauthenticated_per_peer = 0});
  uint64_t id = 0;
  EXPECT_EQ(limits.Admit(++id, "10.0.0.1").verdict, Verdict::kAdmitted);
  EXPECT_EQ(limits.Admit(++id, "10.0.0.1").verdict, Verdict::kAdmitted);
  EXPECT_EQ(limits.Admit(++id, "10.0.0.1").verdict, Verdict::kTooManyFromPeer);
  EXPECT_EQ(limits.Admit(++id, "10.0.0.2").verdict, Verdict::kAdmitted);
  EXPECT_EQ(limits.total(), 3);
  limits.Release(1);
  EXPECT_EQ(limits.Admit(++id, "10.0.0.1").verdict, Verdict::kAdmitted);
  EXPECT_EQ(limits.Admit(++id, "10.0.0.3").verdict, Verdict::kAdmitted);
  EXPECT_EQ(limits.Admit(++id, "10.0.0.3").verdict, Verdict::kAdmitted);
  EXPECT_EQ(limits.Admit(++id, "10.0.0.4").verdict, Verdict::kTooManyInAll);
  EXPECT_EQ(limits.total(), 5);
  // A release of a connection never admitted (or released before) changes nothing.
  limits.Release(3);
  limits.Release(1);
  EXPECT_EQ(limits.total(), 5);
}

TEST(ConnectionLimitsTest, AFewAddressesWithoutATokenCannotLockOthersOut) {
  ConnectionLimits limits({.max_total = 10,
                           .max_per_peer = 8,
                           .max_unauthenticated = 4,
                           .max_unauthenticated_per_peer = 2});
  uint64_t id = 0;
  for (const char* peer : {"a", "b"}) {
    for (int i = 0; i < 2; ++i) EXPECT_EQ(limits.Admit(++id, peer).verdict, Verdict::kAdmitted);
    EXPECT_EQ(limits.Admit(++id, peer).verdict, Verdict::kTooManyFromPeer) << peer;
  }
  EXPECT_EQ(limits.unauthenticated(), 4);
  // The pool is full: a newcomer from an address of its own takes the oldest idle one's
  // place ("a"'s first, id 1), which is no longer counted.
  ConnectionLimits::Admission c = limits.Admit(++id, "c");
  EXPECT_EQ(c.verdict, Verdict::kAdmitted);
  EXPECT_EQ(c.evicted, 1u);
  EXPECT_EQ(limits.total(), 4);
  // Mid-request (ids 4, 5 and 7) is not idle: "a"'s other one goes next, then none.
  for (uint64_t busy : {4, 5, 7}) limits.SetIdle(busy, false);
  EXPECT_EQ(limits.Admit(++id, "d").evicted, 2u);
  limits.SetIdle(id, false);
  EXPECT_EQ(limits.Admit(++id, "e").verdict, Verdict::kTooManyInAll);
  // A connection that presented a good token leaves the pool: room for one more.
  limits.Authenticated(4);
  EXPECT_EQ(limits.unauthenticated(), 3);
  ConnectionLimits::Admission f = limits.Admit(++id, "f");
  EXPECT_EQ(f.verdict, Verdict::kAdmitted);
  EXPECT_FALSE(f.evicted.has_value());
  EXPECT_EQ(limits.total(), 5);
  limits.Release(4);
  EXPECT_EQ(limits.total(), 4);
  EXPECT_EQ(limits.unauthenticated(), 4);
}

}  // namespace
}  // namespace llamafleet::http
