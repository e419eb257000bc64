#include "server/http/connection_limits.h"

#include "gtest/gtest.h"

namespace llamafleet::http {
namespace {

using Admission = ConnectionLimits::Admission;

TEST(ConnectionLimitsTest, OnePeerCannotTakeEverySlot) {
  ConnectionLimits limits(/*max_total=*/5, /*max_per_peer=*/2);
  EXPECT_EQ(limits.Admit("10.0.0.1"), Admission::kAdmitted);
  EXPECT_EQ(limits.Admit("10.0.0.1"), Admission::kAdmitted);
  EXPECT_EQ(limits.Admit("10.0.0.1"), Admission::kTooManyFromPeer);
  EXPECT_EQ(limits.Admit("10.0.0.2"), Admission::kAdmitted);
  EXPECT_EQ(limits.total(), 3);
  limits.Release("10.0.0.1");
  EXPECT_EQ(limits.Admit("10.0.0.1"), Admission::kAdmitted);
  EXPECT_EQ(limits.Admit("10.0.0.3"), Admission::kAdmitted);
  EXPECT_EQ(limits.Admit("10.0.0.3"), Admission::kAdmitted);
  EXPECT_EQ(limits.Admit("10.0.0.4"), Admission::kTooManyInAll);
  EXPECT_EQ(limits.total(), 5);
  // A release of a peer that holds nothing changes nothing.
  limits.Release("10.9.9.9");
  EXPECT_EQ(limits.total(), 5);
}

TEST(ConnectionLimitsTest, NoPerPeerCapWhenZero) {
  ConnectionLimits limits(/*max_total=*/3, /*max_per_peer=*/0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limits.Admit("a"), Admission::kAdmitted);
  EXPECT_EQ(limits.Admit("a"), Admission::kTooManyInAll);
  for (int i = 0; i < 3; ++i) limits.Release("a");
  EXPECT_EQ(limits.total(), 0);
}

}  // namespace
}  // namespace llamafleet::http
