// Issue finding M4, against the trainer's export staging (worker/trainer/util.h StagedDir,
// no Torch): a user with a shell on the storage swaps a parent of the job's export
// directory for a link to a directory outside the roots while the export is being
// written, and again just before its final rename. Nothing may land outside the roots.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/testing/process.h"
#include "worker/trainer/util.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;

using testing::ReadFile;

bool Empty(const std::string& dir) { return fs::is_empty(dir); }

class ExportStagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    outside_ = dir_.path() + "/outside";
    fs::create_directories(root_ + "/bob/exports");
    fs::create_directories(outside_);
  }
  testing::TempDir dir_;
  std::string root_, outside_;
};

TEST_F(ExportStagingTest, AParentSwappedForALinkMidExportWritesNothingOutsideTheRoots) {
  const std::string out = root_ + "/bob/exports/model";
  absl::StatusOr<trainer::StagedDir> staged = trainer::StagedDir::Create(out, "7", {root_});
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_TRUE(trainer::WriteStringToFile(staged->path() + "/config.json", "{}").ok());
  // Mid-job: the parent moved away and a link to outside put in its place.
  fs::rename(root_ + "/bob/exports", root_ + "/bob/exports.real");
  fs::create_symlink(outside_, root_ + "/bob/exports");
  ASSERT_TRUE(trainer::WriteStringToFile(staged->path() + "/model.safetensors", "weights").ok());
  ASSERT_TRUE(staged->Commit().ok());
  EXPECT_TRUE(Empty(outside_)) << "written outside the roots";
  EXPECT_EQ(ReadFile(root_ + "/bob/exports.real/model/model.safetensors"), "weights");
  EXPECT_EQ(ReadFile(root_ + "/bob/exports.real/model/.llamafleet-export"), "7");
}

TEST_F(ExportStagingTest, AParentThatIsALinkAtTheStartIsRefusedNamingTheField) {
  fs::create_symlink(outside_, root_ + "/bob/link");
  absl::StatusOr<trainer::StagedDir> staged = trainer::StagedDir::Create(root_ + "/bob/link/model", "7", {root_});
  EXPECT_EQ(staged.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(staged.status().message().find("output.export_dir"), std::string::npos) << staged.status();
  EXPECT_TRUE(Empty(outside_));
}

TEST_F(ExportStagingTest, ForeignFilesPutInTheFinalPlaceMidExportAreNeverReplaced) {
  const std::string out = root_ + "/bob/exports/model";
  absl::StatusOr<trainer::StagedDir> staged = trainer::StagedDir::Create(out, "7", {root_});
  ASSERT_TRUE(staged.ok()) << staged.status();
  fs::create_directories(out);
  std::ofstream(out + "/alices.bin") << "alice";
  absl::Status s = staged->Commit();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(out), std::string::npos) << s;  // the path as named, not /proc
  EXPECT_EQ(ReadFile(out + "/alices.bin"), "alice");
}

}  // namespace
}  // namespace llamafleet
