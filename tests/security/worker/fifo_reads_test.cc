// Every read and write of a file a job names, or of a marker or manifest in a job's
// directories, against a FIFO in its place (worker/path_guard.h, common/job_dir_marker.h and
// the trainer's file helpers, no Torch): opening a FIFO blocks until someone opens its other
// end, so each call must refuse it at once, naming the file, instead of waiting. A call that
// does wait is released by opening the FIFO from the test's side, and fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "absl/strings/match.h"
#include "common/dir_fd.h"
#include "common/job_dir_marker.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"
#include "worker/path_guard.h"
#include "worker/trainer/checkpoint_manifest.h"
#include "worker/trainer/data.h"
#include "worker/trainer/util.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;

// What a call that refuses a FIFO needs at most, on a loaded machine.
constexpr absl::Duration kPrompt = absl::Seconds(5);

// Runs `fn`; true when it returned within kPrompt by itself. Otherwise the FIFO is opened
// from the other side (read and write) until `fn` returns, and the answer is false.
bool ReturnsPromptly(const std::string& fifo, const std::function<void()>& fn) {
  std::atomic<bool> done{false};
  std::thread call([&] {
    fn();
    done = true;
  });
  const bool prompt = testing::WaitFor([&] { return done.load(); }, kPrompt);
  while (!done) {
    const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (fd >= 0) ::close(fd);
  }
  call.join();
  return prompt;
}

class FifoReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);  // a released writer writes into a closed FIFO
    root_ = dir_.path() + "/root";
    fs::create_directories(root_ + "/export");
    fifo_ = root_ + "/fifo";
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0666), 0);
    ASSERT_EQ(::mkfifo((root_ + "/export/" + kExportMarker).c_str(), 0666), 0);
  }
  testing::TempDir dir_;
  std::string root_, fifo_;
};

TEST_F(FifoReadsTest, TheWorkersChecksRefuseAFifoNamingTheField) {
  absl::Status s;
  EXPECT_TRUE(ReturnsPromptly(root_ + "/export/" + kExportMarker, [&] {
    s = worker::CheckExportDir(root_ + "/export", "7");
  })) << "CheckExportDir waited on a FIFO marker";
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "output.export_dir: ")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a regular file")) << s;

  // A path the job names (a training file, a model shard below a directory) is a regular
  // file or a directory; anything else is refused before any trainer opens it.
  s = worker::CheckPathInRoots("data.train_path", fifo_, {root_});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "data.train_path: ")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a regular file")) << s;
  fs::create_directories(root_ + "/model");
  ASSERT_EQ(::mkfifo((root_ + "/model/model.safetensors").c_str(), 0666), 0);
  s = worker::CheckPathInRoots("model.path", root_ + "/model", {root_});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "model.safetensors is not a regular file")) << s;

  // A job directory's marker.
  UniqueFd dir(::open((root_ + "/export").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir.valid());
  absl::StatusOr<std::optional<std::string>> marker;
  EXPECT_TRUE(ReturnsPromptly(root_ + "/export/" + kExportMarker,
                              [&] { marker = ReadJobDirMarker(dir.get(), kExportMarker); }));
  EXPECT_EQ(marker.status().code(), absl::StatusCode::kFailedPrecondition) << marker.status();
  EXPECT_TRUE(absl::StrContains(marker.status().message(), "is not a regular file"))
      << marker.status();
}

TEST_F(FifoReadsTest, TheTrainersReadsAndWritesRefuseAFifo) {
  // Manifests, configs and resume candidates go through ReadFileToString; checkpoint files
  // through FileChecksum; JSONL data through LoadJsonl; markers and manifests it writes
  // through WriteStringToFile.
  absl::Status s;
  EXPECT_TRUE(ReturnsPromptly(fifo_, [&] { s = trainer::ReadFileToString(fifo_).status(); }))
      << "ReadFileToString waited on a FIFO";
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a regular file")) << s;
  EXPECT_TRUE(ReturnsPromptly(fifo_, [&] { s = trainer::FileChecksum(fifo_, "crc32c").status(); }))
      << "FileChecksum waited on a FIFO";
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a regular file")) << s;
  EXPECT_TRUE(ReturnsPromptly(fifo_, [&] {
    s = trainer::LoadJsonl(fifo_, trainer::DataLoadOptions{trainer::DataFormat::kTokens}).status();
  })) << "LoadJsonl waited on a FIFO";
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a regular file")) << s;
  EXPECT_TRUE(ReturnsPromptly(fifo_, [&] { s = trainer::WriteStringToFile(fifo_, "7"); }))
      << "WriteStringToFile waited on a FIFO";
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a regular file")) << s;
  // A file of ordinary size still reads and writes as before.
  ASSERT_TRUE(trainer::WriteStringToFile(root_ + "/plain", "hello").ok());
  EXPECT_EQ(trainer::ReadFileToString(root_ + "/plain").value_or(""), "hello");
}

}  // namespace
}  // namespace llamafleet
