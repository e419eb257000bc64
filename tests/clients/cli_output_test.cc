#include "clients/cli/output.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace llamafleet::cli {
namespace {

google::protobuf::Timestamp At(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  return t;
}

TEST(SpecErrorsForFileTest, SingleDocumentDropsTheRequestPrefix) {
  EXPECT_EQ(SpecErrorsForFile("spec.training.lr must be > 0 (got -1); spec.resources.nodes must "
                              "be >= 1 (got 0)"),
            "training.lr must be > 0 (got -1); resources.nodes must be >= 1 (got 0)");
}

TEST(SpecErrorsForFileTest, BatchNamesTheDocumentCountingFromOne) {
  EXPECT_EQ(SpecErrorsForFile("jobs[1].spec.training.lr must be > 0; jobs[0].idempotency_key "
                              "must be printable ASCII"),
            "document 2: training.lr must be > 0; document 1: idempotency_key must be "
            "printable ASCII");
}

TEST(SpecErrorsForFileTest, LeavesOtherMessagesAlone) {
  EXPECT_EQ(SpecErrorsForFile("jobs must contain at least one job"),
            "jobs must contain at least one job");
  EXPECT_EQ(SpecErrorsForFile("jobs[x].spec.name bad"), "jobs[x].spec.name bad");
}

TEST(FormatAgeTest, UsesTheLargestReadableUnit) {
  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  EXPECT_EQ(FormatAge(At(1'000'000 - 5), now), "5s");
  EXPECT_EQ(FormatAge(At(1'000'000 - 600), now), "10m");
  EXPECT_EQ(FormatAge(At(1'000'000 - 3 * 3600), now), "3h");
  EXPECT_EQ(FormatAge(At(1'000'000 - 3 * 86400), now), "3d");
  EXPECT_EQ(FormatAge(At(1'000'000 + 30), now), "0s");  // clock skew: never negative
  EXPECT_EQ(FormatAge(google::protobuf::Timestamp(), now), "-");
}

TEST(FormatTableTest, AlignsColumnsAndTrimsTrailingSpace) {
  EXPECT_EQ(FormatTable({{"ID", "NAME"}, {"10", "a"}, {"7", ""}}),
            "ID   NAME\n10   a\n7\n");
}

TEST(EventLineTest, ShowsSeqTimeTransitionAndReason) {
  v1::JobEvent e;
  e.set_seq(3);
  *e.mutable_time() = At(1'796'000'000);
  e.set_from_state(v1::QUEUED);
  e.set_to_state(v1::CANCELLED);
  e.set_reason("cancelled by alice:\nbecause");
  EXPECT_EQ(EventLine(e), "3 2026-11-30T00:53:20Z QUEUED -> CANCELLED cancelled by alice: because");
  e.set_from_state(v1::JOB_STATE_UNSPECIFIED);
  e.set_reason("");
  EXPECT_EQ(EventLine(e), "3 2026-11-30T00:53:20Z - -> CANCELLED");
}

TEST(JobsTableTest, ShortensLongReasonsUnlessWide) {
  v1::Job job;
  job.set_id("1");
  job.mutable_spec()->set_name("n");
  job.set_state(v1::QUEUED);
  job.set_status_reason(std::string(100, 'r'));
  const std::string narrow = JobsTable({job}, /*wide=*/false, absl::Now());
  const std::string wide = JobsTable({job}, /*wide=*/true, absl::Now());
  EXPECT_NE(narrow.find("..."), std::string::npos);
  EXPECT_NE(wide.find(std::string(100, 'r')), std::string::npos);
  EXPECT_EQ(narrow.rfind("ID   NAME   OWNER", 0), 0u) << narrow;
}

TEST(IndentTest, IndentsNonEmptyLinesOnly) {
  EXPECT_EQ(Indent("a:\n  b\n\nc\n", 2), "  a:\n    b\n\n  c\n");
}

}  // namespace
}  // namespace llamafleet::cli
