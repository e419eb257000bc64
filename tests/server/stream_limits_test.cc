// StreamLimits on a fake clock: the per-user cap and its message, slots given back, a
// stream whose client takes no message for the idle timeout (cancelled: its write is
// pending), one past its lifetime (finished with UNAVAILABLE), each ended once and never
// after its slot is gone.
#include "server/stream_limits.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/match.h"

namespace llamafleet {
namespace {

struct Ended {
  absl::Status why;
  bool write_pending = false;
};

class StreamLimitsTest : public ::testing::Test {
 protected:
  StreamLimitsTest()
      : limits_(StreamLimitOptions{.max_per_user = 2,
                                   .idle_timeout = absl::Minutes(5),
                                   .max_lifetime = absl::Hours(1),
                                   .sweep_interval = absl::Hours(1),  // swept by hand
                                   .clock = &clock_}) {}

  std::unique_ptr<StreamLimits::Slot> Acquire(const std::string& user, std::vector<Ended>* ended) {
    absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> slot =
        limits_.Acquire(user, "WatchJob", [ended](const absl::Status& why, bool pending) {
          ended->push_back({why, pending});
        });
    EXPECT_TRUE(slot.ok()) << slot.status();
    return slot.ok() ? std::move(*slot) : nullptr;
  }

  FakeClock clock_;
  StreamLimits limits_;
};

TEST_F(StreamLimitsTest, AUserHoldsAtMostTheCapAndAClosedStreamGivesItsSlotBack) {
  std::vector<Ended> ended;
  std::unique_ptr<StreamLimits::Slot> a = Acquire("vic", &ended), b = Acquire("vic", &ended);
  absl::StatusOr<std::unique_ptr<StreamLimits::Slot>> c =
      limits_.Acquire("vic", "StreamJobLogs", nullptr);
  ASSERT_TRUE(absl::IsResourceExhausted(c.status())) << c.status();
  EXPECT_TRUE(absl::StrContains(c.status().message(), "user vic already holds 2 open streams"))
      << c.status();
  EXPECT_TRUE(absl::StrContains(c.status().message(), "--max-streams-per-user 2")) << c.status();
  EXPECT_NE(Acquire("alice", &ended), nullptr) << "another user's slots are their own";
  EXPECT_EQ(limits_.Open("vic"), 2);
  a.reset();
  EXPECT_EQ(limits_.Open("vic"), 1);
  EXPECT_NE(Acquire("vic", &ended), nullptr);
  EXPECT_TRUE(ended.empty());
}

TEST_F(StreamLimitsTest, AStalledClientIsCancelledAndAnOldStreamFinished) {
  std::vector<Ended> stalled_end, old_end, busy_end;
  std::unique_ptr<StreamLimits::Slot> stalled = Acquire("a", &stalled_end);
  std::unique_ptr<StreamLimits::Slot> busy = Acquire("b", &busy_end);
  stalled->WriteStarted();
  clock_.Advance(absl::Minutes(4));
  busy->WriteStarted();  // a client that keeps reading
  limits_.SweepNow();
  EXPECT_TRUE(stalled_end.empty());
  clock_.Advance(absl::Minutes(1));
  busy->WriteDone();
  limits_.SweepNow();
  ASSERT_EQ(stalled_end.size(), 1u);
  EXPECT_TRUE(stalled_end[0].write_pending);
  EXPECT_TRUE(absl::IsDeadlineExceeded(stalled_end[0].why)) << stalled_end[0].why;
  EXPECT_TRUE(absl::StrContains(stalled_end[0].why.message(), "--stream-idle-timeout"))
      << stalled_end[0].why;
  EXPECT_TRUE(busy_end.empty());
  limits_.SweepNow();
  EXPECT_EQ(stalled_end.size(), 1u) << "ended once";

  // Past the lifetime: finished (no write pending), UNAVAILABLE saying so.
  std::unique_ptr<StreamLimits::Slot> old = Acquire("c", &old_end);
  clock_.Advance(absl::Hours(1));
  limits_.SweepNow();
  ASSERT_EQ(old_end.size(), 1u);
  EXPECT_FALSE(old_end[0].write_pending);
  EXPECT_TRUE(absl::IsUnavailable(old_end[0].why)) << old_end[0].why;
  EXPECT_TRUE(absl::StrContains(old_end[0].why.message(), "--stream-max-lifetime"))
      << old_end[0].why;
  // A slot that is gone is never ended.
  std::vector<Ended> gone_end;
  std::unique_ptr<StreamLimits::Slot> gone = Acquire("d", &gone_end);
  gone.reset();
  clock_.Advance(absl::Hours(2));
  limits_.SweepNow();
  EXPECT_TRUE(gone_end.empty());
}

}  // namespace
}  // namespace llamafleet
