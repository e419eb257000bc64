// Stragglers (server/cluster/straggler_rules.h): busy seconds per step against the other
// ranks' median, N rounds in a row, each rank flagged once; as tables of rounds.
#include "server/cluster/straggler_rules.h"

#include <gtest/gtest.h>

namespace llamafleet {
namespace {

// Each round: every rank does one step and works `busy[r]` seconds in it.
struct Case {
  const char* name;
  std::vector<std::vector<double>> rounds;  // busy per rank per round
  int flagged_rank;                         // -1: none
  int flagged_in_round;                     // 1-based
};

TEST(StragglerTrackerTest, Rounds) {
  StragglerPolicy policy;
  policy.factor = 2;
  policy.consecutive = 3;
  policy.min_busy_per_step_s = 0.01;
  const Case cases[] = {
      {"even gang", {{1, 1, 1}, {1, 1.1, 0.9}, {1, 1, 1}, {1, 1, 1}}, -1, 0},
      {"rank 2 slow three rounds", {{1, 1, 3}, {1, 1, 3}, {1, 1, 3}, {1, 1, 3}}, 2, 3},
      {"a fast round resets", {{1, 1, 3}, {1, 1, 3}, {1, 1, 1}, {1, 1, 3}, {1, 1, 3}, {1, 1, 3}}, 2, 6},
      {"exactly the factor is not slow", {{1, 1, 2}, {1, 1, 2}, {1, 1, 2}, {1, 1, 2}}, -1, 0},
      {"below the noise floor", {{0.001, 0.001, 0.009}, {0.001, 0.001, 0.009}, {0.001, 0.001, 0.009}}, -1, 0},
      {"two ranks: the other one is the median", {{0.2, 1}, {0.2, 1}, {0.2, 1}}, 1, 3},
  };
  for (const Case& c : cases) {
    StragglerTracker t;
    const int n = static_cast<int>(c.rounds[0].size());
    std::map<int, RankBusy> ranks;
    for (int r = 0; r < n; ++r) ranks[r] = RankBusy{"w" + std::to_string(r), 0, 0};
    EXPECT_TRUE(t.Observe(ranks, n, policy).empty()) << c.name;  // opens the first round
    int flagged = -1, in_round = 0;
    for (size_t i = 0; i < c.rounds.size(); ++i) {
      for (int r = 0; r < n; ++r) {
        ranks[r].step += 1;
        ranks[r].busy_s += c.rounds[i][r];
      }
      for (const StragglerFlag& f : t.Observe(ranks, n, policy)) {
        EXPECT_EQ(flagged, -1) << c.name << ": flagged twice";
        flagged = f.rank;
        in_round = static_cast<int>(i) + 1;
        EXPECT_EQ(f.worker, "w" + std::to_string(f.rank));
        EXPECT_EQ(f.reason.rfind("straggler: rank " + std::to_string(f.rank) + " on worker w", 0), 0u) << f.reason;
      }
    }
    EXPECT_EQ(flagged, c.flagged_rank) << c.name;
    EXPECT_EQ(in_round, c.flagged_in_round) << c.name;
  }
}

TEST(StragglerTrackerTest, ARoundWaitsForEveryRank) {
  StragglerPolicy policy;
  policy.consecutive = 1;
  StragglerTracker t;
  std::map<int, RankBusy> ranks = {{0, {"a", 0, 0}}, {1, {"b", 0, 0}}};
  t.Observe(ranks, 2, policy);
  ranks[1] = {"b", 1, 5};  // rank 0 has not stepped: no round
  EXPECT_TRUE(t.Observe(ranks, 2, policy).empty());
  ranks[0] = {"a", 1, 0.5};
  ASSERT_EQ(t.Observe(ranks, 2, policy).size(), 1u);
  EXPECT_EQ(*t.flagged().begin(), 1);
  // A gang of one, or one not every rank of which reported, is never judged.
  StragglerTracker alone;
  EXPECT_TRUE(alone.Observe({{0, {"a", 1, 1}}}, 1, policy).empty());
  EXPECT_TRUE(alone.Observe({{0, {"a", 1, 1}}}, 2, policy).empty());
}

TEST(StragglerActionTest, Names) {
  EXPECT_EQ(ParseStragglerAction("flag"), StragglerAction::kFlag);
  EXPECT_EQ(ParseStragglerAction("restart-without"), StragglerAction::kRestartWithout);
  EXPECT_FALSE(ParseStragglerAction("restart_without").has_value());
  EXPECT_STREQ(StragglerActionName(StragglerAction::kRestartWithout), "restart-without");
}

}  // namespace
}  // namespace llamafleet
