// PeerPool: the cap per peer, a full pool making room by evicting the oldest evictable
// member of the peer holding the most (only when it holds more than the newcomer's peer),
// and members that are not evictable kept.
#include "server/peer_pool.h"

#include <gtest/gtest.h>

namespace llamafleet {
namespace {

using Verdict = PeerPool::Verdict;

TEST(PeerPoolTest, APeerHoldsAtMostItsShare) {
  PeerPool pool(/*max_total=*/10, /*max_per_peer=*/2);
  EXPECT_EQ(pool.Admit(1, "a").verdict, Verdict::kAdmitted);
  EXPECT_EQ(pool.Admit(2, "a").verdict, Verdict::kAdmitted);
  EXPECT_EQ(pool.Admit(3, "a").verdict, Verdict::kPeerFull);
  EXPECT_EQ(pool.held_by("a"), 2);
  EXPECT_TRUE(pool.Remove(1));
  EXPECT_FALSE(pool.Remove(1));
  EXPECT_FALSE(pool.Remove(3)) << "refused: never a member";
  EXPECT_EQ(pool.Admit(4, "a").verdict, Verdict::kAdmitted);
}

TEST(PeerPoolTest, AFullPoolEvictsFromThePeerHoldingTheMost) {
  PeerPool pool(/*max_total=*/5, /*max_per_peer=*/3);
  for (uint64_t id : {1, 2, 3}) pool.Admit(id, "a");
  for (uint64_t id : {4, 5}) pool.Admit(id, "b");
  // "c" holds none: "a" (3) gives up its oldest.
  PeerPool::Admission c = pool.Admit(6, "c");
  EXPECT_EQ(c.verdict, Verdict::kAdmitted);
  EXPECT_EQ(c.evicted, 1u);
  EXPECT_EQ(pool.size(), 5);
  EXPECT_FALSE(pool.Remove(1)) << "an evicted member is gone";
  // "a" and "b" hold 2 each: the one whose member is older ("a": 2) goes first.
  EXPECT_EQ(pool.Admit(7, "d").evicted, 2u);
  // Now "b" holds 2, everyone else 1: a second one from "d" takes "b"'s oldest.
  EXPECT_EQ(pool.Admit(8, "d").evicted, 4u);
  // Everyone holds at most as much as "d" (2): a third from "d" is refused.
  EXPECT_EQ(pool.Admit(9, "d").verdict, Verdict::kPoolFull);
  EXPECT_EQ(pool.size(), 5);
}

TEST(PeerPoolTest, OnlyEvictableMembersMakeRoom) {
  PeerPool pool(/*max_total=*/2, /*max_per_peer=*/0);
  pool.Admit(1, "a");
  pool.Admit(2, "a");
  pool.SetEvictable(1, false);
  EXPECT_EQ(pool.Admit(3, "b").evicted, 2u);
  pool.SetEvictable(3, false);
  EXPECT_EQ(pool.Admit(4, "c").verdict, Verdict::kPoolFull);
  pool.SetEvictable(1, true);
  EXPECT_EQ(pool.Admit(5, "c").evicted, 1u);
}

}  // namespace
}  // namespace llamafleet
