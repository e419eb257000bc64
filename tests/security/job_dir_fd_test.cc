// Attacks by a user with a shell on the shared storage against the pieces that create,
// write, rename and delete job directories: directories swapped for symbolic links (or
// renamed away) between a check and a use. Each test does the swap itself, as that user
// would, at the moment that matters, and asserts that nothing outside the root is
// written or deleted and that the victim's files stay as they were.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/dir_fd.h"
#include "common/job_dir_marker.h"
#include "server/cluster/checkpoint_retention.h"
#include "tests/testing/process.h"
#include "worker/job_checkpoint_dir.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

using testing::ReadFile;

class JobDirFdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    outside_ = dir_.path() + "/outside";
    fs::create_directories(root_);
    fs::create_directories(outside_ + "/step-1");
    std::ofstream(outside_ + "/step-1/precious") << "not the job's";
  }
  TempDir dir_;
  std::string root_, outside_;
};

TEST_F(JobDirFdTest, OpeningBeneathARootRefusesALinkAtAnyLevelAndCreatesNothingPastIt) {
  fs::create_directories(root_ + "/bob");
  fs::create_symlink(outside_, root_ + "/bob/ck");
  absl::StatusOr<UniqueFd> r = OpenRootDir(root_);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const std::string rel : {"bob/ck", "bob/ck/step-1", "bob/ck/new/deeper"}) {
    absl::StatusOr<UniqueFd> fd = OpenDirBeneath(r->get(), rel, 0755, rel);
    EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition) << rel;
    EXPECT_NE(fd.status().message().find("symbolic link"), std::string::npos) << fd.status();
    fd = OpenDirBeneath(r->get(), rel, std::nullopt, rel);  // the openat2 path
    EXPECT_FALSE(fd.ok()) << rel;
  }
  EXPECT_FALSE(fs::exists(outside_ + "/new"));
  EXPECT_EQ(OpenDirBeneath(r->get(), "../outside", std::nullopt, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Made where missing, one level at a time.
  absl::StatusOr<UniqueFd> made = OpenDirInRoots({root_}, root_ + "/alice/a/b", 0755);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(fs::is_directory(root_ + "/alice/a/b"));
}

TEST_F(JobDirFdTest, RemovingATreeRemovesLinksItMeetsAndNeverWhatTheyLeadTo) {
  fs::create_directories(root_ + "/ck/step-2/sub");
  std::ofstream(root_ + "/ck/step-2/sub/f") << "x";
  fs::create_symlink(outside_, root_ + "/ck/step-2/link-dir");
  fs::create_symlink(outside_ + "/step-1/precious", root_ + "/ck/step-2/link-file");
  absl::StatusOr<UniqueFd> ck = OpenDirInRoots({root_}, root_ + "/ck", std::nullopt);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(RemoveTreeAt(ck->get(), "step-2").ok());
  EXPECT_FALSE(fs::exists(root_ + "/ck/step-2"));
  EXPECT_EQ(ReadFile(outside_ + "/step-1/precious"), "not the job's");
  EXPECT_TRUE(RemoveTreeAt(ck->get(), "gone").ok());  // missing: nothing to do
  EXPECT_FALSE(RemoveTreeAt(ck->get(), "../outside").ok());
}

// Issue finding H2: after step-1 was recorded the user moves the job's directory away and
// puts a link to a directory outside the roots in its place; the coordinator's retention
// then deletes step-1. Nothing outside the roots may go.
TEST_F(JobDirFdTest, RetentionThroughASwappedLinkDeletesNothingAndSaysWhy) {
  const std::string ck = root_ + "/bob/ck";
  fs::create_directories(ck + "/step-1");
  {
    absl::StatusOr<UniqueFd> fd = OpenDirInRoots({root_}, ck, std::nullopt);
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(WriteJobDirMarker(fd->get(), "7").ok());
  }
  fs::rename(ck, ck + ".real");
  fs::create_symlink(outside_, ck);
  v1::Checkpoint c;
  c.set_step(1);
  c.set_path(ck + "/step-1");
  std::vector<std::string> errors;
  std::vector<int64_t> gone = RemoveCheckpointFiles({root_}, ck, 7, {c}, &errors);
  EXPECT_TRUE(gone.empty());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("symbolic link"), std::string::npos) << errors[0];
  EXPECT_EQ(ReadFile(outside_ + "/step-1/precious"), "not the job's");
  EXPECT_TRUE(fs::exists(ck + ".real/step-1"));
  // A TTL deletion of a default checkpoint dir that is a link removes nothing either.
  fs::create_directories(root_ + "/llamafleet/checkpoints");
  fs::create_symlink(outside_, root_ + "/llamafleet/checkpoints/9");
  EXPECT_FALSE(RemoveJobDir({root_}, root_ + "/llamafleet/checkpoints/9", 9).ok());
  EXPECT_EQ(ReadFile(outside_ + "/step-1/precious"), "not the job's");
}

// Issue finding H1: a directory renamed into the place of a job's directory (another job's,
// or one without the job's marker) is not the job's: retention and TTL deletion refuse it.
TEST_F(JobDirFdTest, DeletionNeedsTheJobsMarker) {
  const std::string ck = root_ + "/bob/ck";
  fs::create_directories(ck + "/step-1");
  std::ofstream(ck + "/step-1/alices") << "alice's weights";
  v1::Checkpoint c;
  c.set_step(1);
  c.set_path(ck + "/step-1");
  std::vector<std::string> errors;
  EXPECT_TRUE(RemoveCheckpointFiles({root_}, ck, 7, {c}, &errors).empty());  // no marker
  {
    absl::StatusOr<UniqueFd> fd = OpenDirInRoots({root_}, ck, std::nullopt);
    ASSERT_TRUE(WriteJobDirMarker(fd->get(), "3").ok());  // alice's job 3
  }
  EXPECT_TRUE(RemoveCheckpointFiles({root_}, ck, 7, {c}, &errors).empty());
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[1].find("job 3"), std::string::npos) << errors[1];
  EXPECT_FALSE(RemoveJobDir({root_}, ck, 7).ok());
  EXPECT_EQ(ReadFile(ck + "/step-1/alices"), "alice's weights");
  // Job 3's own retention does remove it.
  EXPECT_EQ(RemoveCheckpointFiles({root_}, ck, 3, {c}, &errors), std::vector<int64_t>{1});
  EXPECT_FALSE(fs::exists(ck + "/step-1"));
  // A directory not there at all (storage this machine does not see): nothing to remove.
  EXPECT_TRUE(RemoveJobDir({root_}, root_ + "/nothing/here", 3).ok());
}

// The trainer's half of H1/H2: it holds its checkpoint directory open from the start and
// writes through the descriptor; a later swap of the directory for a link changes nothing
// it writes. Another job's directory is refused by its marker.
TEST_F(JobDirFdTest, ATrainersHeldCheckpointDirIgnoresASwapAndRefusesAnotherJobsDir) {
  const std::string ck = root_ + "/bob/ck";
  absl::StatusOr<UniqueFd> held = worker::OpenJobCheckpointDir({root_}, ck, "7");
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(ReadFile(ck + "/.llamafleet-job"), "7\n");
  fs::rename(ck, ck + ".real");
  fs::create_symlink(outside_, ck);
  const std::string io = FdPath(held->get());
  const std::string step = worker::ThroughHeldDir(ck + "/step-300", ck, io);
  EXPECT_EQ(step, io + "/step-300");
  fs::create_directories(step);
  std::ofstream(step + "/manifest.json") << "{}";
  EXPECT_TRUE(fs::exists(ck + ".real/step-300/manifest.json"));
  EXPECT_FALSE(fs::exists(outside_ + "/step-300"));
  // Opened again (a restart): the link is refused, naming the field.
  absl::StatusOr<UniqueFd> again = worker::OpenJobCheckpointDir({root_}, ck, "7");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("checkpoint.dir"), std::string::npos) << again.status();
  // Job 8 may not write into job 7's directory, whatever its name now.
  absl::StatusOr<UniqueFd> other = worker::OpenJobCheckpointDir({root_}, ck + ".real", "8");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("job 7"), std::string::npos) << other.status();
  // The worker refuses a written dir with a link before any trainer starts.
  EXPECT_EQ(worker::CheckWrittenDirHasNoLinks({root_}, ck + "/sub", "checkpoint.dir").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(worker::CheckWrittenDirHasNoLinks({root_}, root_ + "/new/dir", "checkpoint.dir").ok());
}

// The ranks of one job on several nodes claim its new directory at the same moment (in
// containers, often with the same pid); every one of them succeeds. Of two jobs racing for
// one directory, exactly one gets it.
TEST_F(JobDirFdTest, RacingClaimsAgreeOnOneMarker) {
  for (int round = 0; round < 20; ++round) {
    const std::string ck = root_ + "/race-" + std::to_string(round);
    fs::create_directories(ck);
    std::vector<absl::Status> results(8);
    std::vector<std::thread> claimants;
    for (size_t i = 0; i < results.size(); ++i) {
      claimants.emplace_back([&, i] {
        absl::StatusOr<UniqueFd> fd = OpenDirInRoots({root_}, ck, std::nullopt);
        const std::string job = round % 2 == 0 ? "7" : std::to_string(7 + i % 2);
        results[i] = fd.ok() ? ClaimJobDir(fd->get(), job, "checkpoint.dir", ck) : fd.status();
      });
    }
    for (std::thread& t : claimants) t.join();
    const std::string marker = ReadFile(ck + "/.llamafleet-job");
    size_t ok = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      const std::string job = round % 2 == 0 ? "7" : std::to_string(7 + i % 2);
      EXPECT_EQ(results[i].ok(), marker == job + "\n") << round << ": " << results[i];
      ok += results[i].ok();
    }
    EXPECT_EQ(ok, round % 2 == 0 ? results.size() : results.size() / 2) << round;
    size_t files = 0;
    for ([[maybe_unused]] const fs::directory_entry& e : fs::directory_iterator(ck)) ++files;
    EXPECT_EQ(files, 1u) << "no temporary file is left behind";
  }
}

}  // namespace
}  // namespace llamafleet
