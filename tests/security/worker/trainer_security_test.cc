// Tenant safety in the real llamafleet-train: the trainer checks
// the job's paths again where it opens them (--path-root, links resolved) and writes an
// export only where nothing foreign is replaced, failing before it touches any file; and
// a model directory's hostile files (a sparse 3 GB config.json, a safetensors header of
// "[[[[...") fail it fast, naming the file, within a small peak of memory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::BinaryPath;
using testing::RunCommand;
using testing::TempDir;

using testing::ReadFile;

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

// A run of a command with its private memory bounded (RLIMIT_DATA, so that what the
// unbounded parsers take fails in it instead of taking this shared machine's memory),
// and its peak resident memory (wait4's ru_maxrss).
struct MeasuredRun {
  int exit_code = -1;
  std::string out, err;
  int64_t peak_rss_bytes = 0;
  absl::Duration took;
};

MeasuredRun RunMeasured(const std::vector<std::string>& argv, const std::string& dir,
                        uint64_t data_limit) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string out_path = dir + "/run.out", err_path = dir + "/run.err";
  const absl::Time start = absl::Now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) {
      _exit(127);
    }
    const struct rlimit limit = {data_limit, data_limit};
    if (setrlimit(RLIMIT_DATA, &limit) != 0) _exit(127);
    execv(args[0], args.data());
    _exit(127);
  }
  MeasuredRun r;
  if (pid < 0) return r;
  int status = 0;
  struct rusage usage = {};
  while (wait4(pid, &status, WNOHANG, &usage) == 0) {
    if (absl::Now() - start > absl::Minutes(2)) {
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    usleep(20000);
  }
  r.took = absl::Now() - start;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  return r;
}

// A model directory of the tiny shape whose config.json or model.safetensors a test replaces.
class HostileModelFileTest : public TrainerSecurityTest {
 protected:
  void SetUp() override {
    TrainerSecurityTest::SetUp();
    model_ = root_ + "/model";
    fs::create_directories(model_);
    std::ofstream(model_ + "/config.json")
        << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,)"
        << R"( "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,)"
        << R"( "max_position_embeddings": 64, "rms_norm_eps": 1e-05})";
  }

  // llamafleet-train eval of the model on the fixture's data, its memory bounded to 1 GiB.
  MeasuredRun Eval() {
    return RunMeasured(
        {BinaryPath("llamafleet-train"), "eval", "--model", model_, "--data",
         root_ + "/train.jsonl", "--format", "tokens", "--device", "cpu", "--micro-batch", "2"},
        dir_.path(), uint64_t{1} << 30);
  }

  // The hostile file must fail the run at once, naming it, in well under the memory
  // unbounded parsers take (2x a config read whole, 85x a header of brackets): the
  // trainer's own start-up (LibTorch loaded) is ~100 MB.
  void ExpectRefusedSmall(const MeasuredRun& r, const std::string& needle) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_LT(r.peak_rss_bytes, int64_t{400} << 20) << r.err;
    EXPECT_LT(r.took, absl::Seconds(30));
  }

  std::string model_;
};

TEST_F(HostileModelFileTest, ASparse3GBConfigJsonIsRefusedBeforeItIsRead) {
  ASSERT_EQ(truncate((model_ + "/config.json").c_str(), int64_t{3} << 30), 0);
  ExpectRefusedSmall(Eval(),
                     model_ + "/config.json: 3.0 GiB, more than the 1.0 MiB such a file may hold");
}

TEST_F(HostileModelFileTest, ASafetensorsHeaderOfBracketsIsRefusedWithoutBuildingIt) {
  // The report's 20 MB header of '[' (past the header bound now); one of the same just
  // within the bound; and brackets nested inside an entry, refused at the 4th level instead
  // of parsed into a DOM of ~85x their size.
  const std::string file = model_ + "/model.safetensors";
  const uint64_t within = (uint64_t{16} << 20) - 8;
  const struct {
    std::string header;
    std::string needle;
  } cases[] = {
      {std::string(uint64_t{20} << 20, '['), "header length 20971520 exceeds the 16.0 MiB"},
      {std::string(within, '['), "header is not a JSON object"},
      {R"({"t": {"x": )" + std::string(within - 12, '['),
       R"(tensor "t": nested deeper than a safetensors header)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.needle);
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      for (int i = 0; i < 8; ++i) out.put(static_cast<char>((c.header.size() >> (8 * i)) & 0xff));
      out << c.header;
    }
    ExpectRefusedSmall(Eval(), file + ": invalid safetensors: " + c.needle);
  }
}

}  // namespace
}  // namespace llamafleet
