// Who a task's trainers run as and the directories a root worker makes for them
// (worker/task_identity.h, worker/fs_identity.h, worker/job_dirs.h): the identity the
// coordinator sends checked field by field; acting as an identity on one thread only; the
// job's checkpoint and export directories made as it, mode 0700 (or its group mode), and
// refused where the identity itself may not make them. The parts that switch identities
// need root (the tests here run as root) and skip otherwise.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/process.h"
#include "worker/fs_identity.h"
#include "worker/job_dirs.h"
#include "worker/task_identity.h"

namespace llamafleet::worker {
namespace {

namespace fs = std::filesystem;
using ::llamafleet::testing::TempDir;

v1::RunIdentity Identity(uint32_t uid, uint32_t gid, uint32_t dir_mode = 0700) {
  v1::RunIdentity id;
  id.set_uid(uid);
  id.set_gid(gid);
  id.set_name(absl::StrCat("llamafleet-", uid));
  id.set_dir_mode(dir_mode);
  id.set_dynamic(true);
  return id;
}

v1::TaskSpec TaskWith(const v1::RunIdentity& id) {
  v1::TaskSpec t;
  t.set_task_id("7-1-0");
  t.set_job_id("7");
  t.set_owner("bob");
  *t.mutable_identity() = id;
  return t;
}

TrainerIdentities PerOwner() { return TrainerIdentities{TrainerIdentityMode::kPerOwner, std::nullopt}; }

TEST(TaskIdentityTest, PerOwnerTakesTheTasksIdentityWithAMatchingUmask) {
  absl::StatusOr<TaskIdentity> got = IdentityForTask(PerOwner(), TaskWith(Identity(70001, 70001)));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->run_as.has_value());
  EXPECT_EQ(got->run_as->uid, 70001u);
  EXPECT_EQ(got->run_as->gid, 70001u);
  EXPECT_EQ(got->run_as->user, "llamafleet-70001");
  EXPECT_EQ(got->run_as->groups, std::vector<gid_t>{70001});
  EXPECT_TRUE(got->run_as->home.empty()) << "HOME is the task dir";
  EXPECT_EQ(*got->dir_mode, 0700u);
  EXPECT_EQ(*got->umask, 077u);
  v1::RunIdentity shared = Identity(70002, 3000, 0770);
  shared.add_groups(70002);
  got = IdentityForTask(PerOwner(), TaskWith(shared));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->run_as->groups, (std::vector<gid_t>{3000, 70002}));
  EXPECT_EQ(*got->umask, 007u);
  EXPECT_EQ(*IdentityForTask(PerOwner(), TaskWith(Identity(70003, 3000, 0750)))->umask, 027u);
  EXPECT_EQ(*IdentityForTask(PerOwner(), TaskWith(Identity(70003, 70003, 0)))->dir_mode, 0700u) << "0: 0700";
}

TEST(TaskIdentityTest, OtherModesIgnoreTheTasksIdentity) {
  const v1::TaskSpec task = TaskWith(Identity(70001, 70001));
  absl::StatusOr<TaskIdentity> own = IdentityForTask(TrainerIdentities{}, task);
  ASSERT_TRUE(own.ok());
  EXPECT_FALSE(own->run_as.has_value());
  EXPECT_FALSE(own->umask.has_value());
  RunAs single;
  single.user = "llamafleet";
  single.uid = 999;
  absl::StatusOr<TaskIdentity> one = IdentityForTask(TrainerIdentities{TrainerIdentityMode::kSingle, single}, task);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->run_as->uid, 999u);
  EXPECT_FALSE(one->dir_mode.has_value());
}

TEST(TaskIdentityTest, RefusesABadIdentityNamingItsField) {
  auto refused = [](const v1::TaskSpec& task) { return IdentityForTask(PerOwner(), task).status(); };
  v1::TaskSpec none = TaskWith(Identity(1, 1));
  none.clear_identity();
  absl::Status s = refused(none);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(s.message(), "identity: the coordinator named no Unix identity for owner 'bob'")) << s;
  EXPECT_NE(s.message().find("--run-as"), std::string::npos) << s;
  v1::RunIdentity with_root_group = Identity(70001, 70001);
  with_root_group.add_groups(0);
  v1::RunIdentity nameless = Identity(70001, 70001);
  nameless.set_name("bad name");
  v1::RunIdentity assigning = Identity(70001, 70001);
  assigning.set_name("USER=root");
  const std::vector<std::pair<v1::RunIdentity, std::string>> cases = {
      {Identity(0, 70001), "identity.uid: 0 is root"},
      {Identity(70001, 0), "identity.gid: 0 is root's group"},
      {with_root_group, "identity.groups: 0 is root's group"},
      {nameless, "identity.name: must be"},
      {assigning, "identity.name: must be"},
      {Identity(70001, 70001, 0755), "identity.dir_mode: 0755 is not 0700, 0750 or 0770"},
      {Identity(70001, 70001, 0777), "identity.dir_mode: 0777"},
      // A dynamic uid this host's user database names would hand that account's files over.
      {Identity(65534, 65534), "identity.uid: dynamic uid 65534 is user 'nobody' on this worker"},
  };
  for (const auto& [id, want] : cases) {
    s = refused(TaskWith(id));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << want;
    EXPECT_TRUE(absl::StartsWith(s.message(), want)) << s;
  }
  v1::RunIdentity mapped_nobody = Identity(65534, 65534);
  mapped_nobody.set_dynamic(false);
  EXPECT_TRUE(refused(TaskWith(mapped_nobody)).ok()) << "a mapped account is the operator's choice";
}

RunAs As(uint32_t uid, uint32_t gid) {
  RunAs r;
  r.user = absl::StrCat("llamafleet-", uid);
  r.uid = uid;
  r.gid = gid;
  r.groups = {gid};
  return r;
}

struct stat Stat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

class JobDirsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: switches identities";
    // The storage as operators set it up: every identity may pass the path to the root and
    // make its own directories in it (sticky, like /tmp), and none may touch another's.
    fs::permissions(dir_.path(), fs::perms(0755));
    root_ = dir_.path() + "/root";
    fs::create_directories(root_);
    fs::permissions(root_, fs::perms(01777));
  }
  v1::TaskSpec Task(const std::string& checkpoint_dir, const std::string& export_dir = "") {
    v1::TaskSpec t;
    t.set_job_id("42");
    t.add_path_roots(root_);
    t.mutable_spec()->mutable_checkpoint()->set_dir(checkpoint_dir);
    t.mutable_spec()->mutable_output()->set_export_dir(export_dir);
    return t;
  }
  TempDir dir_;
  std::string root_;
};

TEST_F(JobDirsTest, ActingAsAnIdentityChangesOnlyTheCallingThread) {
  const RunAs alice = As(70001, 70001);
  uid_t other_thread_owner = 1;
  int refused_errno = 0;
  // A thread of the worker's, started before (one started inside would inherit the
  // identity, as a clone copies its creator's credentials), makes a directory meanwhile.
  std::promise<void> go, done;
  std::thread other([&, go = go.get_future()]() mutable {
    go.wait();
    EXPECT_EQ(::mkdir((root_ + "/theirs").c_str(), 0700), 0);
    other_thread_owner = Stat(root_ + "/theirs").st_uid;
    done.set_value();
  });
  absl::Status s = WithFsIdentity(alice, [&]() -> absl::Status {
    EXPECT_EQ(::mkdir((root_ + "/mine").c_str(), 0700), 0);
    // Root's 0755 directory is not the identity's to write in.
    if (::mkdir((dir_.path() + "/not-hers").c_str(), 0700) != 0) refused_errno = errno;
    go.set_value();
    done.get_future().wait();
    return absl::InvalidArgumentError("fn's own");
  });
  other.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "fn's status comes back";
  EXPECT_EQ(refused_errno, EACCES);
  EXPECT_FALSE(fs::exists(dir_.path() + "/not-hers"));
  EXPECT_EQ(Stat(root_ + "/mine").st_uid, 70001u);
  EXPECT_EQ(Stat(root_ + "/mine").st_gid, 70001u);
  EXPECT_EQ(other_thread_owner, 0u) << "another thread acted as the identity too";
  ASSERT_EQ(::mkdir((root_ + "/after").c_str(), 0700), 0);
  EXPECT_EQ(Stat(root_ + "/after").st_uid, 0u) << "the thread's own identity came back";
  EXPECT_EQ(geteuid(), 0u);
}

TEST_F(JobDirsTest, NamedDirsAreMadeAsTheIdentityPrivateToIt) {
  const RunAs alice = As(70001, 70001);
  ASSERT_TRUE(PrepareJobDirs(Task(root_ + "/alice/runs/ck", root_ + "/alice/out"), alice, 0700).ok());
  for (const std::string& d : {root_ + "/alice", root_ + "/alice/runs", root_ + "/alice/runs/ck", root_ + "/alice/out"}) {
    const struct stat st = Stat(d);
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << d;
    EXPECT_EQ(st.st_uid, 70001u) << d;
    EXPECT_EQ(st.st_gid, 70001u) << d;
    EXPECT_EQ(st.st_mode & 07777, 0700u) << d;
  }
  // Again (a restart, another node of the job): found, nothing changed.
  EXPECT_TRUE(PrepareJobDirs(Task(root_ + "/alice/runs/ck/", root_ + "/alice/out"), alice, 0700).ok());
}

TEST_F(JobDirsTest, AnotherUsersDirectoryIsRefusedByTheKernelOrByItsOwner) {
  const RunAs alice = As(70001, 70001), bob = As(70002, 70002);
  ASSERT_TRUE(PrepareJobDirs(Task(root_ + "/alice/ck"), alice, 0700).ok());
  // Inside alice's 0700 directory bob's identity can make nothing, so neither does the
  // worker on his behalf.
  absl::Status s = PrepareJobDirs(Task(root_ + "/alice/ck2"), bob, 0700);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(s.message(), "checkpoint.dir: ")) << s;
  EXPECT_NE(s.message().find("Permission denied"), std::string::npos) << s;
  EXPECT_NE(s.message().find("llamafleet-70002 (uid 70002)"), std::string::npos) << s;
  s = PrepareJobDirs(Task(root_ + "/bob/ck", root_ + "/alice/ck/export"), bob, 0700);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(s.message(), "output.export_dir: ")) << s;
  EXPECT_FALSE(fs::exists(root_ + "/alice/ck2"));
  EXPECT_FALSE(fs::exists(root_ + "/alice/ck/export"));
  // A directory that exists and is someone else's (here one the old single trainer user
  // would have made, open to all): refused naming its owner and the chown that hands it over.
  fs::create_directories(root_ + "/shared/old-run");
  ASSERT_EQ(::chown((root_ + "/shared/old-run").c_str(), 70001, 70001), 0);
  fs::permissions(root_ + "/shared", fs::perms(0755));
  s = PrepareJobDirs(Task(root_ + "/shared/old-run"), bob, 0700);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(s.message(), "checkpoint.dir: " + root_ + "/shared/old-run belongs to uid 70001, not to "
                                            "llamafleet-70002 (uid 70002)"))
      << s;
  EXPECT_NE(s.message().find("chown -R 70002:70002 " + root_ + "/shared/old-run"), std::string::npos) << s;
}

TEST_F(JobDirsTest, TheDefaultCheckpointDirIsHandedToTheIdentityBelowTheWorkersLevels) {
  const RunAs bob = As(70002, 70002);
  const std::string dir = root_ + "/llamafleet/checkpoints/42";
  ASSERT_TRUE(PrepareJobDirs(Task(dir), bob, 0700).ok());
  for (const std::string& level : {root_ + "/llamafleet", root_ + "/llamafleet/checkpoints"}) {
    EXPECT_EQ(Stat(level).st_uid, 0u) << level;
    EXPECT_EQ(Stat(level).st_mode & 07777, 0755u) << level;
  }
  EXPECT_EQ(Stat(dir).st_uid, 70002u);
  EXPECT_EQ(Stat(dir).st_mode & 07777, 0700u);
  // Another owner's job dir there is not bob's to take.
  fs::create_directories(root_ + "/llamafleet/checkpoints/43");
  ASSERT_EQ(::chown((root_ + "/llamafleet/checkpoints/43").c_str(), 70001, 70001), 0);
  absl::Status s = PrepareJobDirs(Task(root_ + "/llamafleet/checkpoints/43"), bob, 0700);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("is owned by uid 70001, not by the trainers' uid 70002"), std::string::npos) << s;
  EXPECT_EQ(Stat(root_ + "/llamafleet/checkpoints/43").st_uid, 70001u);
}

TEST_F(JobDirsTest, AGroupModeSharesTheDirsWithTheGroup) {
  RunAs carol = As(70003, 3000);
  carol.groups = {3000, 70003};
  ASSERT_TRUE(PrepareJobDirs(Task(root_ + "/team/ck"), carol, 0770).ok());
  for (const std::string& d : {root_ + "/team", root_ + "/team/ck"}) {
    EXPECT_EQ(Stat(d).st_uid, 70003u) << d;
    EXPECT_EQ(Stat(d).st_gid, 3000u) << d;
    EXPECT_EQ(Stat(d).st_mode & 07777, 0770u) << d;
  }
}

}  // namespace
}  // namespace llamafleet::worker
