// Tenant safety in the real llamafleet-train: the trainer checks
// the job's paths again where it opens them (--path-root, links resolved) and writes an
// export only where nothing foreign is replaced, failing before it touches any file.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::BinaryPath;
using testing::RunCommand;
using testing::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TrainerSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    outside_ = dir_.path() + "/outside";
    fs::create_directories(root_);
    fs::create_directories(outside_);
    for (const std::string& f : {root_ + "/train.jsonl", outside_ + "/theirs.jsonl"}) {
      std::ofstream out(f);
      for (int row = 0; row < 8; ++row) {
        out << "{\"input_ids\": [";
        for (int i = 0; i < 33; ++i) out << (i ? ", " : "") << 3 + (row * 31 + i * 7) % 200;
        out << "]}\n";
      }
    }
  }

  // Runs one training job of 2 steps as job `job_id`; returns the result.
  testing::CommandResult Train(const std::string& train_path, const std::string& export_dir,
                               const std::string& job_id,
                               absl::Duration timeout = absl::Minutes(2)) {
    const std::string spec = dir_.path() + "/spec-" + std::to_string(++runs_) + ".yaml";
    std::ofstream(spec) << "name: t\nmodel: {preset: tiny}\n"
                        << "data: {train_path: " << train_path << ", format: tokens}\n"
                        << "training: {max_steps: 2, micro_batch_size: 2, seq_len: 32, lr: 1.0e-3}\n"
                        << "fsdp: {mixed_precision: fp32, activation_checkpointing: false}\n"
                        << "checkpoint: {dir: " << root_ << "/ckpt-" << runs_ << "}\n"
                        << "output: {export_dir: " << export_dir << ", export_dtype: fp32}\n";
    absl::StatusOr<testing::CommandResult> r = RunCommand(
        {BinaryPath("llamafleet-train"), "train", "--spec", spec, "--path-root", root_}, "",
        {{"LLAMAFLEET_JOB_ID", job_id}, {"OMP_NUM_THREADS", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "1"},
         {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
         {"MASTER_PORT", std::to_string(20000 + (getpid() * 7 + runs_) % 20000)}},
        timeout);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : testing::CommandResult();
  }

  TempDir dir_;
  std::string root_, outside_;
  int runs_ = 0;
};

TEST_F(TrainerSecurityTest, ALinkInsideTheRootLeadingOutsideIsRefusedBeforeAnythingIsRead) {
  fs::create_symlink(outside_ + "/theirs.jsonl", root_ + "/link.jsonl");
  testing::CommandResult r = Train(root_ + "/link.jsonl", root_ + "/export", "5");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("\"code\":\"INVALID_ARGUMENT\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data.train_path: " + root_ + "/link.jsonl leads to"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(root_ + "/ckpt-1"));
  EXPECT_FALSE(fs::exists(root_ + "/export"));
}

TEST_F(TrainerSecurityTest, AnExportDirWithForeignFilesFailsAtStartAndStaysByteIdentical) {
  fs::create_directories(root_ + "/theirs/sub");
  std::ofstream(root_ + "/theirs/notes.txt") << "do not delete";
  std::ofstream(root_ + "/theirs/sub/data.bin") << std::string("\0\1\2", 3);
  const absl::Time start = absl::Now();
  testing::CommandResult r = Train(root_ + "/train.jsonl", root_ + "/theirs", "5");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("\"code\":\"FAILED_PRECONDITION\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output.export_dir: " + root_ + "/theirs is not empty"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"type\":\"metrics\""), std::string::npos) << "it trained before refusing";
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  EXPECT_EQ(ReadFile(root_ + "/theirs/notes.txt"), "do not delete");
  EXPECT_EQ(ReadFile(root_ + "/theirs/sub/data.bin"), std::string("\0\1\2", 3));
  EXPECT_FALSE(fs::exists(root_ + "/ckpt-1"));
}

TEST_F(TrainerSecurityTest, AJobReplacesItsOwnExportButNotAnotherJobs) {
  const std::string out = root_ + "/export";
  testing::CommandResult first = Train(root_ + "/train.jsonl", out, "42");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(ReadFile(out + "/.llamafleet-export"), "42");
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  // The same job again (a restarted attempt): replaced.
  testing::CommandResult again = Train(root_ + "/train.jsonl", out, "42");
  EXPECT_EQ(again.exit_code, 0) << again.err;
  // Another job: refused, the first job's export intact.
  const std::string weights = ReadFile(out + "/model.safetensors");
  testing::CommandResult other = Train(root_ + "/train.jsonl", out, "43");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.out.find("is the export of another job (job 42)"), std::string::npos) << other.out;
  EXPECT_EQ(ReadFile(out + "/.llamafleet-export"), "42");
  EXPECT_EQ(ReadFile(out + "/model.safetensors"), weights);
}

// A FIFO where the job names a file blocks whoever opens it until someone writes into it.
// The trainer refuses it, naming the field, instead of waiting (a wait fails the bound).
TEST_F(TrainerSecurityTest, AFifoAsTheExportMarkerOrTheTrainingDataFailsAtOnce) {
  fs::create_directories(root_ + "/export");
  ASSERT_EQ(::mkfifo((root_ + "/export/.llamafleet-export").c_str(), 0666), 0);
  ASSERT_EQ(::mkfifo((root_ + "/fifo.jsonl").c_str(), 0666), 0);
  const std::pair<std::string, std::string> cases[] = {
      {root_ + "/train.jsonl", "output.export_dir"}, {root_ + "/fifo.jsonl", "data.train_path"}};
  for (const auto& [train_path, field] : cases) {
    const std::string out = field == "output.export_dir" ? root_ + "/export" : root_ + "/export-2";
    testing::CommandResult r = Train(train_path, out, "5", absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 1) << field << ": " << r.err;
    EXPECT_NE(r.out.find(field + ": "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("is not a regular file"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\"type\":\"metrics\""), std::string::npos)
        << "it trained before refusing";
  }
  EXPECT_FALSE(fs::exists(root_ + "/export-2"));
}

}  // namespace
}  // namespace llamafleet
