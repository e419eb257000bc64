// The cluster loop never waits on the shared storage: with the ClusterManager on a real
// store and fake workers (tests/server/cluster_manager_fixture.h) and a job's directory on
// a FUSE mount that never answers (as a hung NFS or Lustre server: every lookup below it
// blocks), a checkpoint report naming that directory, and the removal of a job deleted by
// its ttl_after_finished there, leave the next scheduling pass on time. Skips without root
// or /dev/fuse.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "tests/server/cluster_manager_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_cluster;  // NOLINT: the fixture's names

// A FUSE file system mounted at `dir` that answers nothing: a lookup, stat or open below
// it blocks until the destructor aborts the connection (then it fails with ENOTCONN).
class HungMount {
 public:
  explicit HungMount(const std::string& dir) : dir_(dir) {
    fd_ = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd_ < 0) {
      error_ = absl::StrCat("/dev/fuse: ", std::strerror(errno));
      return;
    }
    const std::string options = absl::StrCat("fd=", fd_, ",rootmode=40000,user_id=0,group_id=0");
    if (::mount("llamafleet-hung", dir.c_str(), "fuse", MS_NOSUID | MS_NODEV, options.c_str()) !=
        0) {
      error_ = absl::StrCat("mount fuse: ", std::strerror(errno));
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~HungMount() {
    if (fd_ < 0) return;
    ::umount2(dir_.c_str(), MNT_DETACH);
    ::close(fd_);  // the last descriptor of the connection: it is aborted, blocked calls fail
  }
  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }

 private:
  const std::string dir_;
  int fd_ = -1;
  std::string error_;
};

class ClusterLoopStorageTest : public ClusterManagerTest {
 protected:
  void Configure(ClusterOptions* o) override {
    // What the coordinator removes of a deleted job (its default checkpoint dir, its
    // export) lies on the storage: here a look at the hung mount once armed.
    o->on_job_deleted = [this](int64_t, const std::string&) {
      struct stat st;
      if (armed_.load()) (void)::stat((fsx_ + "/ck").c_str(), &st);
      return std::vector<std::string>{};
    };
  }

  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: mounts a FUSE file system that never answers";
    ClusterManagerTest::SetUp();
    fsx_ = dir_.path() + "/fsx";
    fs::create_directories(fsx_);
  }

  // Submits a one-node job and says whether it is placed on `free` within `bound`
  // (without waiting on the loop: it may be stuck).
  bool PlacedWithin(FakeLink& free, absl::Duration bound) {
    const absl::Time submitted = absl::Now();
    Submit("", "{nodes: 1, gpus_per_node: 1}");
    testing::WaitFor([&] { return !free.Assignments().empty(); }, bound + absl::Seconds(1),
                     absl::Milliseconds(10));
    return !free.Assignments().empty() && absl::Now() - submitted < bound;
  }

  std::string fsx_;
  std::atomic<bool> armed_{false};
};

TEST_F(ClusterLoopStorageTest, ACheckpointReportOnHungStorageDoesNotStallScheduling) {
  HungMount hung(fsx_);
  if (!hung.ok()) GTEST_SKIP() << "no FUSE here: " << hung.error();
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  std::shared_ptr<FakeLink> w1 = Hello("w1");
  const int64_t id = Submit(absl::StrCat("checkpoint: {dir: ", fsx_, "/ck, keep_last: 1}\n"));
  const std::string t0 = absl::StrCat(id, "-1-0"), t1 = absl::StrCat(id, "-1-1");
  ASSERT_TRUE(Eventually([&] { return !w0->Assignments().empty() && !w1->Assignments().empty(); }));
  Report("w0", t0, v1::TASK_RUNNING);
  Report("w1", t1, v1::TASK_RUNNING);
  std::shared_ptr<FakeLink> w2 = Hello("w2");

  // Rank 0's report names a step-N of the job's directory, on the hung storage.
  v1::WorkerMessage m;
  m.mutable_checkpoint()->set_task_id(t0);
  m.mutable_checkpoint()->set_step(5);
  m.mutable_checkpoint()->set_path(fsx_ + "/ck/step-5");
  m.mutable_checkpoint()->set_manifest_sha256("sha-5");
  manager_->OnWorkerMessage("w0", m);
  EXPECT_TRUE(PlacedWithin(*w2, absl::Seconds(2)))
      << "the cluster loop waits on the checkpoint's storage";
  // Its path is recorded from the job's recorded directory alone, storage or not.
  EXPECT_TRUE(testing::WaitFor([&] { return Checkpoints(id).size() == 1; }, absl::Seconds(2)));
}

TEST_F(ClusterLoopStorageTest, RemovingAnExpiredJobsFilesOnHungStorageDoesNotStallScheduling) {
  HungMount hung(fsx_);
  if (!hung.ok()) GTEST_SKIP() << "no FUSE here: " << hung.error();
  std::shared_ptr<FakeLink> w0 = Hello("w0");
  // A two-node job (it stays queued on one worker) that is deleted a second after it ends.
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(
      "name: t\nmodel: {preset: tiny}\ndata: {train_path: /data/train.jsonl}\n"
      "resources: {nodes: 2, gpus_per_node: 1}\nrun_policy: {ttl_after_finished_seconds: 1}\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  v1::JobSpec spec = (*parsed)[0].spec;
  ApplyDefaults(&spec);
  absl::StatusOr<std::vector<SubmitJobResult>> submitted =
      store_->SubmitJobsAndWait({SubmitJobInput{spec, "alice", ""}});
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const int64_t id = std::stoll((*submitted)[0].job.id());
  ASSERT_TRUE(store_->CancelJobAndWait(id, "alice", "done with it").ok());
  // The expiry sweep runs every 30 s of the loop's clock: past the TTL, and past the sweep
  // after it, its record goes and what it left is removed.
  AdvanceWithHeartbeats(absl::Seconds(25), {"w0"});
  armed_ = true;
  Heartbeat("w0");
  clock_.Advance(absl::Seconds(6));  // the loop's next tick sweeps (nothing here waits on it)
  ASSERT_TRUE(testing::WaitFor([&] { return !store_->GetJob(id).ok(); }, absl::Seconds(3)))
      << "not expired";
  absl::SleepFor(absl::Milliseconds(50));  // the removal starts
  EXPECT_TRUE(PlacedWithin(*w0, absl::Seconds(2)))
      << "the cluster loop waits on a deleted job's storage";
}

}  // namespace
}  // namespace llamafleet
