// TaskRunner with /bin/sh scripts standing in for the trainer's ranks: the supervision
// (environment, gang failure, cancel, no process left behind, relay) is what is tested.
#include "worker/task_runner.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/byte_size.h"
#include "common/usable_cpus.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"
#include "worker/rank_memory.h"

namespace llamafleet::worker {
namespace {

class Recorder : public TaskListener {
 public:
  void OnLine(const std::string& task_id, int rank, bool is_stderr,
              const std::string& line) override {
    std::lock_guard<std::mutex> lock(mu_);
    lines.push_back(absl::StrCat(rank, is_stderr ? " err " : " out ", line));
  }
  void OnFinished(const std::string& task_id, v1::TaskState s, const std::vector<v1::RankExit>& e,
                  const std::string& m) override {
    std::lock_guard<std::mutex> lock(mu_);
    state = s;
    exits = e;
    message = m;
    done = true;
    cv_.notify_all();
  }
  bool WaitDone(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] { return done; });
  }
  bool HasLine(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& l : lines) {
      if (l.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  std::vector<std::string> lines;
  v1::TaskState state = v1::TASK_STATE_UNSPECIFIED;
  std::vector<v1::RankExit> exits;
  std::string message;
  bool done = false;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

class TaskRunnerTest : public ::testing::Test {
 protected:
  TaskLaunch Launch(const std::string& script, int nproc = 2) {
    TaskLaunch l;
    l.task.set_task_id("7-1-0");
    l.task.set_job_id("7");
    l.task.set_attempt(1);
    l.task.set_node_rank(1);
    l.task.set_nnodes(2);
    l.task.set_nproc_per_node(nproc);
    l.task.set_master_addr("10.0.0.5");
    l.task.set_master_port(29500);
    l.task.mutable_spec()->set_name("test");
    (*l.task.mutable_env())["EXTRA"] = "yes";
    l.trainer_command = {"/bin/sh", "-c", script, "trainer"};
    l.work_dir = dir_.path() + "/task";
    l.gpu_indices = {3, 5};
    l.efa = true;
    return l;
  }
  testing::TempDir dir_;
  Recorder recorder_;
};

// No live (non-zombie) process is left in the group. Zombies of reparented grandchildren
// may linger until the container's init reaps them; they run nothing.
bool ProcessGroupGone(pid_t pgid) {
  return testing::WaitFor(
      [&] {
        for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
          std::ifstream stat(entry.path() / "stat");
          std::string pid, comm, state, ppid, pgrp;
          if (!(stat >> pid >> comm >> state >> ppid >> pgrp)) continue;
          if (pgrp == std::to_string(pgid) && state != "Z") return false;
        }
        return true;
      },
      absl::Seconds(2));
}

TEST_F(TaskRunnerTest, RanksGetTorchrunEnvironmentAndTheSpec) {
  auto runner = TaskRunner::Start(
      Launch("echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR:$MASTER_PORT "
             "cuda=$CUDA_VISIBLE_DEVICES efa=$FI_PROVIDER huge=$FI_EFA_USE_HUGE_PAGE "
             "extra=$EXTRA args=$*\"; test -s spec.json && echo spec-ok"),
      &recorder_, absl::Seconds(5));
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(10)));
  EXPECT_EQ(recorder_.state, v1::TASK_SUCCEEDED);
  EXPECT_TRUE(recorder_.HasLine("2 out 2 0 4 2 10.0.0.5:29500 cuda=3,5 efa=efa huge=0 extra=yes "
                                "args=train --spec "));
  EXPECT_TRUE(recorder_.HasLine("3 out 3 1 4 2 10.0.0.5:29500"));
  EXPECT_TRUE(recorder_.HasLine("2 out spec-ok"));
  ASSERT_EQ(recorder_.exits.size(), 2u);
  EXPECT_EQ(recorder_.exits[0].rank(), 2);
  EXPECT_EQ(recorder_.exits[0].exit_code(), 0);
}

TEST_F(TaskRunnerTest, MemoryLimitIsEachRanksRlimitDataAndNoAddressSpaceLimit) {
  TaskLaunch l = Launch("echo \"data=$(ulimit -d) hard=$(ulimit -H -d) as=$(ulimit -v)\"", 1);
  l.memory_limit = uint64_t{512} << 20;
  auto runner = TaskRunner::Start(l, &recorder_, absl::Seconds(5));
  ASSERT_TRUE(runner.ok()) << runner.status();
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(10)));
  EXPECT_TRUE(recorder_.HasLine("1 out data=524288 hard=524288 as=unlimited"))
      << absl::StrJoin(recorder_.lines, "\n");
}

TEST(RankMemoryLimit, AShareOfTheHostAmongItsRanksUnlessConfigured) {
  // 90% of 80 GiB among 8 GPUs: 9 GiB each.
  v1::Inventory gpus;
  gpus.set_memory_bytes(int64_t{80} << 30);
  for (int i = 0; i < 8; ++i) gpus.add_gpus()->set_index(i);
  EXPECT_EQ(RankMemoryLimit(std::nullopt, gpus), uint64_t{9} << 30);
  v1::Inventory cpus;
  cpus.set_memory_bytes(int64_t{10} << 30);
  cpus.set_cpu_ranks(3);
  EXPECT_EQ(RankMemoryLimit(std::nullopt, cpus),
            static_cast<uint64_t>((int64_t{10} << 30) * 0.9 / 3));
  // --trainer-memory-limit: its size, or none (0).
  EXPECT_EQ(RankMemoryLimit(uint64_t{48} << 30, gpus), uint64_t{48} << 30);
  EXPECT_EQ(RankMemoryLimit(uint64_t{0}, gpus), 0u);
  // Never below the floor; nothing when the host's memory is unknown.
  EXPECT_EQ(DefaultRankMemoryLimit(uint64_t{1} << 20, 8), kMinRankMemoryLimit);
  EXPECT_EQ(DefaultRankMemoryLimit(0, 8), 0u);
}

TEST(ByteSize, OperatorsSizes) {
  EXPECT_EQ(ParseByteSize("0"), 0u);
  EXPECT_EQ(ParseByteSize("4096"), 4096u);
  EXPECT_EQ(ParseByteSize("64M"), uint64_t{64} << 20);
  EXPECT_EQ(ParseByteSize("48g"), uint64_t{48} << 30);
  EXPECT_EQ(ParseByteSize("2T"), uint64_t{2} << 40);
  for (const char* bad : {"", "G", "-1G", "+1G", "1.5G", "1GB", "1Gi", "18446744073709551616", "16777216T", " 1G"}) {
    EXPECT_FALSE(ParseByteSize(bad).has_value()) << bad;
  }
}

// A cgroup tree under a temporary directory: `files` maps paths below it to contents.
int CgroupLimitOf(const std::map<std::string, std::string>& files, const std::string& self) {
  testing::TempDir dir;
  for (const auto& [path, text] : files) {
    const std::filesystem::path p = std::filesystem::path(dir.path()) / path;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::ofstream(dir.path() + "/self") << self;
  return CgroupCpuLimit(dir.path(), dir.path() + "/self");
}

TEST(UsableCpus, CgroupCpuLimitInWholeCpusRoundedUp) {
  // v2 at the process's own cgroup; 1.5 CPUs is 2.
  EXPECT_EQ(CgroupLimitOf({{"job/cpu.max", "150000 100000\n"}}, "0::/job\n"), 2);
  EXPECT_EQ(CgroupLimitOf({{"job/cpu.max", "max 100000\n"}}, "0::/job\n"), 0);
  // A container sees its own cgroup at the mount's root while /proc/self/cgroup names the
  // host's path; both are read and the smaller limit counts.
  EXPECT_EQ(CgroupLimitOf({{"cpu.max", "400000 100000\n"}}, "0::/libpod-1\n"), 4);
  EXPECT_EQ(CgroupLimitOf({{"cpu.max", "800000 100000\n"}, {"pod/cpu.max", "300000 100000\n"}}, "0::/pod\n"), 3);
  // v1 (cpu,cpuacct): -1 is no quota.
  EXPECT_EQ(CgroupLimitOf({{"cpu/a/cpu.cfs_quota_us", "50000\n"}, {"cpu/a/cpu.cfs_period_us", "100000\n"}},
                          "4:cpu,cpuacct:/a\n0::/\n"), 1);
  EXPECT_EQ(CgroupLimitOf({{"cpu/cpu.cfs_quota_us", "-1\n"}, {"cpu/cpu.cfs_period_us", "100000\n"}},
                          "4:cpu,cpuacct:/\n"), 0);
  // Nothing readable: no limit.
  EXPECT_EQ(CgroupLimitOf({}, ""), 0);
  EXPECT_GE(UsableCpus(), 1);
}

TEST_F(TaskRunnerTest, OneRankFailingStopsTheWholeGang) {
  // Rank 3 fails fast; rank 2 would run for a minute.
  const absl::Time start = absl::Now();
  auto runner = TaskRunner::Start(
      Launch("if [ \"$LOCAL_RANK\" = 1 ]; then echo 'error: bad shard' >&2; exit 3; fi; sleep 60"),
      &recorder_, absl::Seconds(2));
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(20)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(recorder_.state, v1::TASK_FAILED);
  EXPECT_NE(recorder_.message.find("rank 3 exited with code 3"), std::string::npos)
      << recorder_.message;
  // Stderr is logs only: a rank that printed no exit record says so.
  EXPECT_EQ(recorder_.message.find("error: bad shard"), std::string::npos) << recorder_.message;
  EXPECT_NE(recorder_.message.find("rank 3 exited with code 3 (no exit record)"), std::string::npos)
      << recorder_.message;
  EXPECT_EQ(recorder_.exits[1].status_code(), 0);
  EXPECT_EQ(recorder_.exits[1].last_error(), "");
  EXPECT_EQ(recorder_.exits[0].exit_code(), 128 + SIGTERM);
  EXPECT_TRUE(ProcessGroupGone((*runner)->process_group()));
}

TEST_F(TaskRunnerTest, StopIsSigtermThenSigkillAndLeavesNothing) {
  // Ignores SIGTERM and starts a grandchild: both must be gone after the grace period.
  auto runner = TaskRunner::Start(Launch("trap '' TERM; sleep 300 & echo started; wait"),
                                  &recorder_, absl::Seconds(2));
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE(testing::WaitFor([&] { return recorder_.HasLine("started"); }, absl::Seconds(10)));
  const absl::Time start = absl::Now();
  (*runner)->Stop(absl::Milliseconds(500), "cancelled by alice");
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(recorder_.state, v1::TASK_KILLED);
  EXPECT_EQ(recorder_.message, "cancelled by alice");
  EXPECT_EQ(recorder_.exits[0].exit_code(), 128 + SIGKILL);
  EXPECT_TRUE(ProcessGroupGone((*runner)->process_group()));
}

TEST_F(TaskRunnerTest, ErrorEventIsTheRankLastError) {
  auto runner = TaskRunner::Start(
      Launch("echo '{\"type\":\"event\",\"event\":\"error\",\"message\":\"data.train_path: no "
             "such file\",\"code\":\"INVALID_ARGUMENT\"}'; exit 1",
             1),
      &recorder_, absl::Seconds(2));
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(10)));
  EXPECT_EQ(recorder_.state, v1::TASK_FAILED);
  ASSERT_EQ(recorder_.exits.size(), 1u);
  EXPECT_EQ(recorder_.exits[0].last_error(), "INVALID_ARGUMENT: data.train_path: no such file");
  EXPECT_EQ(recorder_.exits[0].status_code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(recorder_.exits[0].status_message(), "data.train_path: no such file");
}

TEST_F(TaskRunnerTest, ExitRecordIsRelayedAndStderrIsNot) {
  // The exit record is the last stdout line, written just before the rank exits; a later
  // stderr line mentioning an error changes nothing.
  auto runner = TaskRunner::Start(
      Launch("echo 'RuntimeError: some error in a log' >&2; "
             "echo '{\"type\":\"event\",\"event\":\"exit\",\"code\":\"UNAVAILABLE\",\"message\":\"none "
             "of the 2 recorded checkpoints verifies\"}'; echo 'error: later' >&2; exit 1",
             1),
      &recorder_, absl::Seconds(2));
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(10)));
  EXPECT_EQ(recorder_.state, v1::TASK_FAILED);
  ASSERT_EQ(recorder_.exits.size(), 1u);
  EXPECT_EQ(recorder_.exits[0].status_code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(recorder_.exits[0].status_message(), "none of the 2 recorded checkpoints verifies");
  EXPECT_EQ(recorder_.message,
            "rank 1 exited with code 1: UNAVAILABLE: none of the 2 recorded checkpoints verifies");
}

TEST_F(TaskRunnerTest, SuccessfulRankRecordsOk) {
  auto runner = TaskRunner::Start(
      Launch("echo '{\"type\":\"event\",\"event\":\"exit\",\"code\":\"OK\",\"message\":\"\"}'", 1),
      &recorder_, absl::Seconds(2));
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(10)));
  EXPECT_EQ(recorder_.state, v1::TASK_SUCCEEDED);
  EXPECT_EQ(recorder_.exits[0].status_code(), 0);
  EXPECT_EQ(recorder_.exits[0].last_error(), "");
}

TEST_F(TaskRunnerTest, ResumeCandidatesGoToTheTrainerAsAFile) {
  TaskLaunch l = Launch("echo \"args=$*\"; cat resume_candidates.json", 1);
  l.task.set_resume_from("/ck/step-8");  // ignored when candidates are given
  for (auto [path, step, sha] : {std::tuple{"/ck/step-8", 8, "aa"}, std::tuple{"/ck/step-4", 4, "bb"}}) {
    v1::ResumeCandidate* c = l.task.add_resume_candidates();
    c->set_path(path);
    c->set_step(step);
    c->set_manifest_sha256(sha);
  }
  auto runner = TaskRunner::Start(l, &recorder_, absl::Seconds(2));
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(10)));
  EXPECT_EQ(recorder_.state, v1::TASK_SUCCEEDED);
  // Relative to the ranks' working directory (the task dir), like spec.json.
  EXPECT_TRUE(recorder_.HasLine("--resume-candidates resume_candidates.json"));
  EXPECT_FALSE(recorder_.HasLine("--resume "));
  EXPECT_TRUE(recorder_.HasLine(
      "[{\"manifest_sha256\":\"aa\",\"path\":\"/ck/step-8\",\"step\":8},"
      "{\"manifest_sha256\":\"bb\",\"path\":\"/ck/step-4\",\"step\":4}]"));

  // Without candidates the single resume path is passed as before.
  Recorder single;
  TaskLaunch l2 = Launch("echo \"args=$*\"", 1);
  l2.task.set_resume_from("/ck/step-8");
  auto r2 = TaskRunner::Start(l2, &single, absl::Seconds(2));
  ASSERT_TRUE(r2.ok());
  ASSERT_TRUE(single.WaitDone(absl::Seconds(10)));
  EXPECT_TRUE(single.HasLine("--resume /ck/step-8"));
}

TEST_F(TaskRunnerTest, MissingTrainerFailsTheTask) {
  TaskLaunch l = Launch("", 1);
  l.trainer_command = {dir_.path() + "/no-such-trainer"};
  auto runner = TaskRunner::Start(l, &recorder_, absl::Seconds(1));
  ASSERT_TRUE(runner.ok());
  ASSERT_TRUE(recorder_.WaitDone(absl::Seconds(10)));
  EXPECT_EQ(recorder_.state, v1::TASK_FAILED);
  EXPECT_EQ(recorder_.exits[0].exit_code(), 127);
}

TEST_F(TaskRunnerTest, DestroyingTheRunnerKillsEverything) {
  pid_t pgid;
  {
    auto runner = TaskRunner::Start(Launch("sleep 300"), &recorder_, absl::Seconds(1));
    ASSERT_TRUE(runner.ok());
    pgid = (*runner)->process_group();
  }
  EXPECT_TRUE(ProcessGroupGone(pgid));
}

}  // namespace
}  // namespace llamafleet::worker
