// HelloLimits on a fake clock: the caps per address and in all with their messages, a
// newcomer evicting from the address holding the most, a stream past the hello deadline
// ended once with DEADLINE_EXCEEDED, and places given back, never ended after.
#include "server/hello_limits.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/match.h"

namespace llamafleet {
namespace {

class HelloLimitsTest : public ::testing::Test {
 protected:
  HelloLimitsTest()
      : limits_(HelloLimitOptions{.max_total = 3,
                                  .max_per_peer = 2,
                                  .hello_timeout = absl::Seconds(20),
                                  .sweep_interval = absl::Hours(1),  // swept by hand
                                  .clock = &clock_}) {}

  std::unique_ptr<HelloLimits::Waiting> Admit(const std::string& peer,
                                              std::vector<absl::Status>* ended) {
    absl::StatusOr<std::unique_ptr<HelloLimits::Waiting>> w =
        limits_.Admit(peer, [ended](const absl::Status& why) { ended->push_back(why); });
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? std::move(*w) : nullptr;
  }

  FakeClock clock_;
  HelloLimits limits_;
};

TEST_F(HelloLimitsTest, CapsPerAddressAndInAllAndANewcomerTakesTheHeaviestsOldest) {
  std::vector<absl::Status> a_ended, b_ended;
  auto a1 = Admit("10.0.0.1", &a_ended);
  auto a2 = Admit("10.0.0.1", &a_ended);
  absl::StatusOr<std::unique_ptr<HelloLimits::Waiting>> a3 = limits_.Admit("10.0.0.1", nullptr);
  ASSERT_TRUE(absl::IsResourceExhausted(a3.status())) << a3.status();
  EXPECT_TRUE(
      absl::StrContains(a3.status().message(), "--max-unauthenticated-sessions-per-address 2"))
      << a3.status();
  auto b1 = Admit("10.0.0.2", &b_ended);
  EXPECT_EQ(limits_.waiting(), 3);
  // Full: "10.0.0.3" holds none, so 10.0.0.1's oldest gives up its place.
  std::vector<absl::Status> c_ended;
  auto c1 = Admit("10.0.0.3", &c_ended);
  ASSERT_EQ(a_ended.size(), 1u);
  EXPECT_TRUE(absl::IsResourceExhausted(a_ended[0])) << a_ended[0];
  EXPECT_TRUE(absl::StrContains(a_ended[0].message(), "--max-unauthenticated-sessions 3"))
      << a_ended[0];
  EXPECT_EQ(limits_.waiting_from("10.0.0.1"), 1);
  // Everyone holds one: a second from 10.0.0.3 is refused.
  absl::StatusOr<std::unique_ptr<HelloLimits::Waiting>> c2 = limits_.Admit("10.0.0.3", nullptr);
  EXPECT_TRUE(absl::IsResourceExhausted(c2.status())) << c2.status();
  // A hello accepted gives the place back.
  b1.reset();
  EXPECT_EQ(limits_.waiting(), 2);
  a1.reset();  // evicted before: changes nothing
  EXPECT_EQ(limits_.waiting(), 2);
}

TEST_F(HelloLimitsTest, AStreamPastTheHelloDeadlineIsEndedOnce) {
  std::vector<absl::Status> ended, late_ended;
  auto early = Admit("10.0.0.1", &ended);
  clock_.Advance(absl::Seconds(10));
  auto late = Admit("10.0.0.2", &late_ended);
  clock_.Advance(absl::Seconds(10));
  limits_.SweepNow();
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_TRUE(absl::IsDeadlineExceeded(ended[0])) << ended[0];
  EXPECT_TRUE(absl::StrContains(ended[0].message(), "no hello within 20s")) << ended[0];
  EXPECT_TRUE(absl::StrContains(ended[0].message(), "--worker-hello-timeout")) << ended[0];
  EXPECT_TRUE(late_ended.empty());
  EXPECT_EQ(limits_.waiting(), 1) << "an ended stream's place is free at once";
  limits_.SweepNow();
  EXPECT_EQ(ended.size(), 1u) << "ended once";
  // A stream whose hello was accepted is never ended.
  late.reset();
  clock_.Advance(absl::Hours(1));
  limits_.SweepNow();
  EXPECT_TRUE(late_ended.empty());
  EXPECT_EQ(limits_.waiting(), 0);
}

}  // namespace
}  // namespace llamafleet
