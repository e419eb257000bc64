// Tenant safety on the worker side, against real processes:
// a real llamafleet-worker driven by a stand-in coordinator (a WorkerService on a loopback
// port that assigns hand-made tasks, path roots included) running a /bin/sh stand-in
// trainer; and a real coordinator for worker identities. Each attack asserts the refusal,
// the message naming the field (or the fix), and that nothing changed on disk.
#include <grpcpp/grpcpp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "server/cluster/cluster_manager.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"
#include "worker/path_guard.h"
#include "worker/run_as.h"
#include "worker/token_cache_dir.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::BinaryPath;
using testing::RunCommand;
using testing::Subprocess;
using testing::ReadFile;
using testing::TempDir;

// Prints who it runs as, its environment and arguments, marks that it ran (a file named
// after its task in $LLAMAFLEET_TEST_MARKS), and last lists the descriptors it was started
// with (ls, exec'd in its place, adds only the one it reads /proc/self/fd with).
constexpr char kTrainer[] = R"sh(#!/bin/sh
echo "uid=$(id -u)"
env | sed 's/^/env:/'
echo "args=$*"
touch "$LLAMAFLEET_TEST_MARKS/ran-$LLAMAFLEET_TASK_ID"
exec ls -l /proc/self/fd
)sh";

// A coordinator as far as one worker can tell: welcomes it, assigns the given tasks, and
// records what comes back.
class FakeCoordinator final : public v1::WorkerService::Service {
 public:
  explicit FakeCoordinator(std::vector<v1::TaskSpec> tasks) : tasks_(std::move(tasks)) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~FakeCoordinator() override { server_->Shutdown(std::chrono::system_clock::now()); }

  const std::string& address() const { return address_; }

  grpc::Status Session(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override {
    v1::WorkerMessage in;
    if (!stream->Read(&in) || !in.has_hello()) return grpc::Status::OK;
    v1::CoordinatorMessage welcome;
    welcome.mutable_welcome()->set_worker_id(in.hello().worker_name());
    welcome.mutable_welcome()->set_heartbeat_interval_ms(500);
    stream->Write(welcome);
    for (const v1::TaskSpec& t : tasks_) {
      v1::CoordinatorMessage assign;
      *assign.mutable_assign()->mutable_task() = t;
      stream->Write(assign);
    }
    while (stream->Read(&in)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (in.has_logs()) {
        for (const std::string& l : in.logs().lines()) lines_[in.logs().task_id()].push_back(l);
      } else if (in.has_task_status()) {
        statuses_[in.task_status().task_id()] = in.task_status();
      }
      cv_.notify_all();
    }
    return grpc::Status::OK;
  }

  // The task's terminal status (TASK_STATE_UNSPECIFIED on timeout).
  v1::TaskStatus WaitFinished(const std::string& task_id, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] {
      auto it = statuses_.find(task_id);
      return it != statuses_.end() && it->second.state() != v1::TASK_RUNNING &&
             it->second.state() != v1::TASK_STARTING;
    });
    auto it = statuses_.find(task_id);
    return it == statuses_.end() ? v1::TaskStatus() : it->second;
  }

  // Waits (briefly) for a line of the task starting with `prefix`; "" if none came.
  std::string Line(const std::string& task_id, const std::string& prefix) {
    std::unique_lock<std::mutex> lock(mu_);
    std::string found;
    cv_.wait_for(lock, std::chrono::seconds(5), [&] {
      for (const std::string& l : lines_[task_id]) {
        if (absl::StartsWith(l, prefix)) {
          found = l;
          return true;
        }
      }
      return false;
    });
    return found;
  }

  std::vector<std::string> Lines(const std::string& task_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_[task_id];
  }

 private:
  const std::vector<v1::TaskSpec> tasks_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::string>> lines_;
  std::map<std::string, v1::TaskStatus> statuses_;
};

class WorkerSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Everything here is readable by an unprivileged trainer user; marks is writable.
    fs::permissions(dir_.path(), fs::perms::owner_all | fs::perms::group_read |
                                     fs::perms::group_exec | fs::perms::others_read |
                                     fs::perms::others_exec);
    trainer_ = dir_.path() + "/fake-train.sh";
    std::ofstream(trainer_) << kTrainer;
    fs::permissions(trainer_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
    marks_ = dir_.path() + "/marks";
    fs::create_directories(marks_);
    fs::permissions(marks_, fs::perms::all);
    root_ = dir_.path() + "/root";
    outside_ = dir_.path() + "/outside";
    fs::create_directories(root_);
    fs::create_directories(outside_);
  }

  v1::TaskSpec Task(const std::string& id) {
    v1::TaskSpec t;
    t.set_task_id(id);
    t.set_job_id(id.substr(0, id.find('-')));
    t.set_attempt(1);
    t.set_node_rank(0);
    t.set_nnodes(1);
    t.set_nproc_per_node(1);
    t.set_master_addr("127.0.0.1");
    t.set_master_port(29500);
    t.mutable_spec()->set_name("security");
    return t;
  }

  // A worker for `coordinator`; `run_as` empty: the default for its user.
  std::unique_ptr<Subprocess> StartWorker(const std::string& coordinator, const std::string& run_as,
                                          const std::string& name = "w1",
                                          const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {BinaryPath("llamafleet-worker"), "--coordinator", coordinator,
                                     "--data-dir", dir_.path() + "/" + name, "--cpu-ranks", "3",
                                     "--name", name, "--trainer", trainer_,
                                     "--heartbeat-interval", "0.5"};
    if (!run_as.empty()) argv.insert(argv.end(), {"--run-as", run_as});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = Subprocess::Start(argv,
                               {{"LLAMAFLEET_JOIN_TOKEN", "secret"},
                                {"SECRET_CANARY", "must-not-reach-the-trainer"},
                                {"LLAMAFLEET_TEST_MARKS", marks_}},
                               dir_.path() + "/" + name + ".log");
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  bool Ran(const std::string& task_id) { return fs::exists(marks_ + "/ran-" + task_id); }

  void TearDown() override {
    if (HasFailure()) std::cerr << "worker log:\n" << ReadFile(dir_.path() + "/w1.log");
  }

  TempDir dir_;
  std::string trainer_, marks_, root_, outside_;
};

// ---------------------------------------------------------------- item 4: run unprivileged

TEST_F(WorkerSecurityTest, RootWorkerRunsTrainersUnprivilegedWithNoInheritedFdsAndAMinimalEnvironment) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: checks what a root worker's trainers run as";
  // Without --run-as, each task as the identity the coordinator names for its owner; a
  // task without one (an older coordinator) is refused before anything runs.
  v1::TaskSpec task = Task("1-1-0");
  task.set_owner("bob");
  task.mutable_identity()->set_uid(70005);
  task.mutable_identity()->set_gid(70005);
  task.mutable_identity()->set_name("llamafleet-70005");
  task.mutable_identity()->set_dynamic(true);
  v1::TaskSpec without = Task("2-1-0");
  FakeCoordinator coordinator({task, without});
  std::unique_ptr<Subprocess> w = StartWorker(coordinator.address(), "");
  v1::TaskStatus st = coordinator.WaitFinished("1-1-0", absl::Seconds(20));
  ASSERT_EQ(st.state(), v1::TASK_SUCCEEDED) << st.message();

  EXPECT_EQ(coordinator.Line("1-1-0", "uid="), "uid=70005");
  // stdin, stdout, stderr: nothing else of the worker's (its sockets, its log file, the
  // descriptors the test left open for it) reaches the trainer.
  ASSERT_FALSE(coordinator.Line("1-1-0", "total").empty()) << "no descriptor listing";
  const std::vector<std::string> lines = coordinator.Lines("1-1-0");
  std::vector<std::string> fds;
  for (const std::string& l : lines) {
    const size_t arrow = l.find(" -> ");
    if (arrow == std::string::npos || absl::StartsWith(l, "env:")) continue;
    const size_t space = l.rfind(' ', arrow - 1);
    const std::string fd = l.substr(space + 1, arrow - space - 1);
    const std::string target = l.substr(arrow + 4);
    if (fd == "0" || fd == "1" || fd == "2" || absl::StartsWith(target, "/proc/")) continue;
    fds.push_back(absl::StrCat(fd, " -> ", target));
  }
  EXPECT_TRUE(fds.empty()) << "inherited: " << absl::StrJoin(fds, ", ");
  std::set<std::string> names;
  for (const std::string& l : lines) {
    if (absl::StartsWith(l, "env:")) names.insert(l.substr(4, l.find('=') - 4));
  }
  EXPECT_FALSE(names.count("LLAMAFLEET_JOIN_TOKEN")) << "the worker's secret reached the trainer";
  EXPECT_FALSE(names.count("SECRET_CANARY")) << "an arbitrary variable of the worker leaked";
  for (const char* needed : {"PATH", "HOME", "RANK", "WORLD_SIZE", "MASTER_ADDR", "LLAMAFLEET_JOB_ID"}) {
    EXPECT_TRUE(names.count(needed)) << needed;
  }
  EXPECT_EQ(coordinator.Line("1-1-0", "env:USER="), "env:USER=llamafleet-70005");
  EXPECT_TRUE(Ran("1-1-0"));
  st = coordinator.WaitFinished("2-1-0", absl::Seconds(20));
  EXPECT_EQ(st.state(), v1::TASK_FAILED);
  EXPECT_NE(st.message().find("identity: the coordinator named no Unix identity"), std::string::npos) << st.message();
  EXPECT_EQ(ClassifyFailure(st), AttemptOutcome::kPermanent);
  EXPECT_FALSE(Ran("2-1-0"));
  w.reset();
  EXPECT_NE(ReadFile(dir_.path() + "/w1.log").find("trainers: per-owner identities"), std::string::npos);
  // Its working directory was handed to it, private.
  struct stat wd;
  ASSERT_EQ(stat((dir_.path() + "/w1/tasks/1-1-0").c_str(), &wd), 0);
  EXPECT_EQ(wd.st_uid, 70005u);
  EXPECT_EQ(wd.st_mode & 07777, 0700u);
}

TEST_F(WorkerSecurityTest, RunAsNamesAnUnknownUserAndTheWorkerRefusesToStart) {
  absl::StatusOr<testing::CommandResult> r =
      RunCommand({BinaryPath("llamafleet-worker"), "--coordinator", "127.0.0.1:1", "--data-dir",
                  dir_.path() + "/x", "--run-as", "no-such-user-llamafleet"},
                 "", {{"LLAMAFLEET_JOIN_TOKEN", "secret"}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_NE(r->err.find("--run-as: no such user 'no-such-user-llamafleet'"), std::string::npos) << r->err;
}

// ---------------------------------------------------------------- items 1 and 3: paths

TEST_F(WorkerSecurityTest, PathsAreRecheckedWithLinksResolvedAndExportsReplaceNothingForeign) {
  // A file outside the root, and a link to it inside the root.
  std::ofstream(outside_ + "/secret.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
  fs::create_symlink(outside_ + "/secret.jsonl", root_ + "/data.jsonl");
  // Someone's files where a job wants its export.
  fs::create_directories(root_ + "/exports/theirs");
  std::ofstream(root_ + "/exports/theirs/keep.txt") << "precious";
  std::ofstream(root_ + "/good.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";

  v1::TaskSpec linked = Task("11-1-0");
  linked.add_path_roots(root_);
  linked.mutable_spec()->mutable_data()->set_train_path(root_ + "/data.jsonl");
  v1::TaskSpec foreign_export = Task("12-1-0");
  foreign_export.add_path_roots(root_);
  foreign_export.mutable_spec()->mutable_data()->set_train_path(root_ + "/good.jsonl");
  foreign_export.mutable_spec()->mutable_output()->set_export_dir(root_ + "/exports/theirs");
  v1::TaskSpec fine = Task("13-1-0");
  fine.add_path_roots(root_);
  fine.mutable_spec()->mutable_data()->set_train_path(root_ + "/good.jsonl");
  fine.mutable_spec()->mutable_output()->set_export_dir(root_ + "/exports/mine");

  FakeCoordinator coordinator({linked, foreign_export, fine});
  std::unique_ptr<Subprocess> w = StartWorker(coordinator.address(), std::to_string(geteuid()));

  v1::TaskStatus st = coordinator.WaitFinished("11-1-0", absl::Seconds(20));
  EXPECT_EQ(st.state(), v1::TASK_FAILED);
  ASSERT_EQ(st.exits_size(), 1);
  EXPECT_TRUE(absl::StartsWith(st.exits(0).last_error(), "INVALID_ARGUMENT: data.train_path: "))
      << st.exits(0).last_error();
  EXPECT_NE(st.exits(0).last_error().find("outside the path roots"), std::string::npos);
  EXPECT_EQ(ClassifyFailure(st), AttemptOutcome::kPermanent) << "a bad path is the job's fault";
  EXPECT_FALSE(Ran("11-1-0")) << "the trainer started although a path left the roots";

  st = coordinator.WaitFinished("12-1-0", absl::Seconds(20));
  EXPECT_EQ(st.state(), v1::TASK_FAILED);
  ASSERT_EQ(st.exits_size(), 1);
  EXPECT_TRUE(absl::StartsWith(st.exits(0).last_error(), "FAILED_PRECONDITION: output.export_dir: "))
      << st.exits(0).last_error();
  EXPECT_EQ(ClassifyFailure(st), AttemptOutcome::kPermanent);
  EXPECT_FALSE(Ran("12-1-0"));
  EXPECT_EQ(ReadFile(root_ + "/exports/theirs/keep.txt"), "precious");
  EXPECT_EQ(std::distance(fs::directory_iterator(root_ + "/exports/theirs"), fs::directory_iterator()), 1);

  st = coordinator.WaitFinished("13-1-0", absl::Seconds(20));
  EXPECT_EQ(st.state(), v1::TASK_SUCCEEDED) << st.message();
  EXPECT_TRUE(Ran("13-1-0"));
  // The trainer gets the roots too, to check again where it opens its files.
  EXPECT_NE(coordinator.Line("13-1-0", "args=").find("--path-root " + root_), std::string::npos);
}

// A link into another user's checkpoint dir, made after submission (the coordinator
// refuses it at submission where it sees one): the worker refuses the directories a job
// writes when a link is on the way, before any trainer starts.
TEST_F(WorkerSecurityTest, ALinkOnTheWayToADirTheJobWritesFailsTheTaskBeforeStart) {
  fs::create_directories(root_ + "/alice/ck/step-4");
  std::ofstream(root_ + "/alice/ck/step-4/manifest.json") << "alice's";
  fs::create_directories(root_ + "/bob2");
  fs::create_symlink(root_ + "/alice/ck", root_ + "/bob2/ck2");
  std::ofstream(root_ + "/good.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
  v1::TaskSpec ck = Task("21-1-0"), exp = Task("22-1-0");
  for (v1::TaskSpec* t : {&ck, &exp}) {
    t->add_path_roots(root_);
    t->mutable_spec()->mutable_data()->set_train_path(root_ + "/good.jsonl");
  }
  ck.mutable_spec()->mutable_checkpoint()->set_dir(root_ + "/bob2/ck2");
  exp.mutable_spec()->mutable_output()->set_export_dir(root_ + "/bob2/ck2/export");
  FakeCoordinator coordinator({ck, exp});
  std::unique_ptr<Subprocess> w = StartWorker(coordinator.address(), std::to_string(geteuid()));
  for (const auto& [id, field] : {std::pair<std::string, std::string>{"21-1-0", "checkpoint.dir"},
                                  {"22-1-0", "output.export_dir"}}) {
    v1::TaskStatus st = coordinator.WaitFinished(id, absl::Seconds(20));
    EXPECT_EQ(st.state(), v1::TASK_FAILED);
    ASSERT_EQ(st.exits_size(), 1);
    EXPECT_TRUE(absl::StartsWith(st.exits(0).last_error(), "FAILED_PRECONDITION: " + field + ": "))
        << st.exits(0).last_error();
    EXPECT_NE(st.exits(0).last_error().find("symbolic link"), std::string::npos);
    EXPECT_EQ(ClassifyFailure(st), AttemptOutcome::kPermanent);
    EXPECT_FALSE(Ran(id));
  }
  EXPECT_EQ(ReadFile(root_ + "/alice/ck/step-4/manifest.json"), "alice's");
  EXPECT_FALSE(fs::exists(root_ + "/alice/ck/export"));
}

// ---------------------------------------------------------------- token caches per owner

TEST_F(WorkerSecurityTest, EachOwnerHasATokenCacheNoOtherOwnersJobCanReadOrPlantIn) {
  // A root worker runs its trainers as llamafleet (--run-as); any other runs them as itself.
  const struct passwd* pw = geteuid() == 0 ? getpwnam(worker::kDefaultTrainerUser) : nullptr;
  const std::string run_as = pw != nullptr ? worker::kDefaultTrainerUser : std::to_string(geteuid());
  const uid_t trainer_uid = pw != nullptr ? pw->pw_uid : geteuid();
  std::ofstream(root_ + "/good.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
  const std::string caches = root_ + "/llamafleet/token-cache";
  auto task = [&](const std::string& id, const std::string& owner) {
    v1::TaskSpec t = Task(id);
    t.add_path_roots(root_);
    t.set_owner(owner);
    t.mutable_spec()->mutable_data()->set_train_path(root_ + "/good.jsonl");
    return t;
  };
  auto private_to_trainers = [&](const std::string& dir) {
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0) return std::string("missing");
    if (!S_ISDIR(st.st_mode)) return std::string("not a directory");
    if (st.st_uid != trainer_uid) return absl::StrCat("owned by uid ", st.st_uid);
    if ((st.st_mode & 07777) != 0700) return absl::StrCat("mode ", st.st_mode & 07777);
    return std::string("ok");
  };

  // Yvonne's job: the worker makes her directory and hands only it to the trainer, with
  // the worker's bound on it.
  {
    FakeCoordinator coordinator({task("21-1-0", "yvonne")});
    std::unique_ptr<Subprocess> w =
        StartWorker(coordinator.address(), run_as, "w1", {"--token-cache-max-size", "5G"});
    v1::TaskStatus st = coordinator.WaitFinished("21-1-0", absl::Seconds(20));
    ASSERT_EQ(st.state(), v1::TASK_SUCCEEDED) << st.message();
    EXPECT_NE(coordinator.Line("21-1-0", "args=").find("--token-cache-dir " + caches +
                                                        "/yvonne --token-cache-max-size 5368709120"),
              std::string::npos)
        << coordinator.Line("21-1-0", "args=");
  }
  EXPECT_EQ(private_to_trainers(caches + "/yvonne"), "ok");
  struct stat level;
  ASSERT_EQ(::lstat(caches.c_str(), &level), 0);
  EXPECT_EQ(level.st_uid, geteuid()) << "the level of owners' directories is the worker's";
  EXPECT_EQ(level.st_mode & 07777, 0755u);
  // An entry of hers, as her build left it.
  std::ofstream(caches + "/yvonne/k.tokens") << "hers";
  ASSERT_EQ(::chown((caches + "/yvonne/k.tokens").c_str(), trainer_uid, static_cast<gid_t>(-1)), 0);

  // Xavier's jobs: one of his own, one that names her entry as its data, one that writes
  // through a link of his into her directory; jobs of owners whose directory someone planted
  // (a link out of the root; as root also one owned by another uid); an odd owner name.
  fs::create_symlink(caches + "/yvonne", root_ + "/x-link");
  v1::TaskSpec read = task("23-1-0", "xavier");
  read.mutable_spec()->mutable_data()->set_train_path(caches + "/yvonne/k.tokens");
  v1::TaskSpec plant = task("24-1-0", "xavier");
  plant.mutable_spec()->mutable_checkpoint()->set_dir(root_ + "/x-link/ckpt");
  fs::create_symlink(outside_, caches + "/zed");
  std::vector<v1::TaskSpec> tasks = {task("22-1-0", "xavier"), read, plant, task("25-1-0", "zed"),
                                     task("26-1-0", "../yvonne")};
  if (geteuid() == 0) {
    fs::create_directories(caches + "/wanda");
    ASSERT_EQ(::chown((caches + "/wanda").c_str(), 65534, 65534), 0);
    tasks.push_back(task("27-1-0", "wanda"));
  }
  FakeCoordinator coordinator(tasks);
  std::unique_ptr<Subprocess> w = StartWorker(coordinator.address(), run_as);

  v1::TaskStatus st = coordinator.WaitFinished("22-1-0", absl::Seconds(20));
  ASSERT_EQ(st.state(), v1::TASK_SUCCEEDED) << st.message();
  EXPECT_NE(coordinator.Line("22-1-0", "args=").find("--token-cache-dir " + caches + "/xavier"), std::string::npos);
  EXPECT_EQ(private_to_trainers(caches + "/xavier"), "ok");
  for (const auto& [id, field] : {std::pair<std::string, std::string>{"23-1-0", "data.train_path"},
                                  {"24-1-0", "checkpoint.dir"}}) {
    st = coordinator.WaitFinished(id, absl::Seconds(20));
    EXPECT_EQ(st.state(), v1::TASK_FAILED) << id;
    ASSERT_EQ(st.exits_size(), 1) << id;
    EXPECT_TRUE(absl::StartsWith(st.exits(0).last_error(), "INVALID_ARGUMENT: " + field + ": ")) << st.exits(0).last_error();
    EXPECT_NE(st.exits(0).last_error().find("which holds owners' token caches"), std::string::npos);
    EXPECT_EQ(ClassifyFailure(st), AttemptOutcome::kPermanent);
    EXPECT_FALSE(Ran(id)) << id;
  }
  st = coordinator.WaitFinished("25-1-0", absl::Seconds(20));
  EXPECT_EQ(st.state(), v1::TASK_FAILED);
  EXPECT_NE(st.message().find(caches + "/zed is not a directory (a symbolic link?)"), std::string::npos) << st.message();
  EXPECT_EQ(ClassifyFailure(st), AttemptOutcome::kPermanent);
  EXPECT_FALSE(Ran("25-1-0"));
  EXPECT_TRUE(fs::is_empty(outside_)) << "nothing was made through the planted link";
  st = coordinator.WaitFinished("26-1-0", absl::Seconds(20));
  EXPECT_EQ(st.state(), v1::TASK_SUCCEEDED) << st.message();
  EXPECT_NE(coordinator.Line("26-1-0", "args=").find("--token-cache-dir " + caches + "/%2E%2E%2Fyvonne"),
            std::string::npos)
      << "an owner's name is never a path: " << coordinator.Line("26-1-0", "args=");
  if (geteuid() == 0) {
    st = coordinator.WaitFinished("27-1-0", absl::Seconds(20));
    EXPECT_EQ(st.state(), v1::TASK_FAILED);
    EXPECT_NE(st.message().find(caches + "/wanda is owned by uid 65534, not by the trainers' uid"), std::string::npos)
        << st.message();
    EXPECT_FALSE(Ran("27-1-0"));
  }
  // Her directory holds her entry, unchanged, and nothing else.
  EXPECT_EQ(ReadFile(caches + "/yvonne/k.tokens"), "hers");
  EXPECT_EQ(std::distance(fs::directory_iterator(caches + "/yvonne"), fs::directory_iterator()), 1);
  EXPECT_EQ(private_to_trainers(caches + "/yvonne"), "ok");
}

TEST_F(WorkerSecurityTest, WorkersSharingStoragePrepareOneOwnersTokenCacheAtOnce) {
  // Several workers start one job's tasks on the same shared root at the same moment: each
  // may find the owner's directory made by a peer that has not yet handed it over.
  if (geteuid() != 0) GTEST_SKIP() << "needs a root worker, whose trainers run as another uid";
  const struct passwd* pw = getpwnam(worker::kDefaultTrainerUser);
  ASSERT_NE(pw, nullptr) << "the default trainer user " << worker::kDefaultTrainerUser;
  const worker::RunAs trainers{pw->pw_name, pw->pw_uid, pw->pw_gid, {}, ""};
  const std::string caches = root_ + "/llamafleet/token-cache";
  for (int round = 0; round < 20; ++round) {
    const worker::TokenCacheDir dir = worker::OwnerTokenCacheDir({root_}, "/unused", absl::StrCat("o", round));
    std::vector<absl::StatusOr<std::string>> got(4, absl::UnknownError("not run"));
    std::vector<std::thread> peers;
    for (size_t i = 0; i < got.size(); ++i) {
      peers.emplace_back([&, i] { got[i] = worker::PrepareTokenCacheDir(dir, trainers); });
    }
    for (std::thread& t : peers) t.join();
    for (const auto& g : got) ASSERT_TRUE(g.ok()) << "round " << round << ": " << g.status();
    struct stat st;
    ASSERT_EQ(::lstat(dir.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, pw->pw_uid);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
  }
  // One a peer left behind (killed between its mkdir and its chown) is taken over too.
  ASSERT_EQ(::mkdir((caches + "/left").c_str(), 0700), 0);
  const absl::StatusOr<std::string> left =
      worker::PrepareTokenCacheDir(worker::OwnerTokenCacheDir({root_}, "/unused", "left"), trainers);
  ASSERT_TRUE(left.ok()) << left.status();
  struct stat st;
  ASSERT_EQ(::lstat(left->c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, pw->pw_uid);
}

TEST_F(WorkerSecurityTest, OwnerNamesBecomeOneDirectoryNameEach) {
  EXPECT_EQ(worker::TokenCacheOwnerName("alice"), "alice");
  EXPECT_EQ(worker::TokenCacheOwnerName("a.b/c"), "a%2Eb%2Fc");
  EXPECT_EQ(worker::TokenCacheOwnerName(".."), "%2E%2E");
  EXPECT_EQ(worker::TokenCacheOwnerName(""), "%none");
  EXPECT_NE(worker::TokenCacheOwnerName("%none"), "%none") << "no name escapes to another's";
  const std::string long_name(200, 'x');
  EXPECT_TRUE(absl::StartsWith(worker::TokenCacheOwnerName(long_name), "%sha256-"));
  EXPECT_NE(worker::TokenCacheOwnerName(long_name), worker::TokenCacheOwnerName(long_name + "y"));
  const worker::TokenCacheDir without_roots = worker::OwnerTokenCacheDir({}, "/var/lib/w", "bob");
  EXPECT_EQ(without_roots.path(), "/var/lib/w/token-cache/bob");
  EXPECT_EQ(worker::OwnerTokenCacheDir({"/fsx", "/other"}, "/var/lib/w", "bob").path(),
            "/fsx/llamafleet/token-cache/bob");
}

// ---------------------------------------------------------------- the checks themselves

TEST_F(WorkerSecurityTest, PathGuardResolvesLinksAndJudgesNewPathsByTheirNearestAncestor) {
  using worker::CheckPathInRoots;
  const std::vector<std::string> roots = {root_};
  fs::create_directories(root_ + "/models/m");
  fs::create_symlink(outside_, root_ + "/escape");
  std::ofstream(outside_ + "/weights.safetensors") << "x";

  EXPECT_TRUE(CheckPathInRoots("model.path", root_ + "/models/m", roots).ok());
  EXPECT_TRUE(CheckPathInRoots("checkpoint.dir", root_ + "/new/deeper/dir", roots).ok());
  // Through a link: refused, whether the target exists or not.
  for (const std::string& p : {root_ + "/escape", root_ + "/escape/new-dir", root_ + "/escape/../x"}) {
    absl::Status s = CheckPathInRoots("checkpoint.dir", p, roots);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_TRUE(absl::StartsWith(s.message(), "checkpoint.dir: ")) << s.message();
  }
  // A link inside a directory the job names (a model's shard): refused too.
  fs::create_symlink(outside_ + "/weights.safetensors", root_ + "/models/m/model.safetensors");
  absl::Status s = CheckPathInRoots("model.path", root_ + "/models/m", roots);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model.safetensors leads to"), std::string::npos) << s.message();
  // Relative paths and no roots at all are refused.
  EXPECT_EQ(CheckPathInRoots("data.train_path", "rel/x", roots).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(CheckPathInRoots("data.train_path", root_ + "/x", {}).ok());
  // A root given through a link counts as its target.
  fs::create_symlink(root_, dir_.path() + "/root-link");
  EXPECT_TRUE(CheckPathInRoots("data.train_path", root_ + "/x", {dir_.path() + "/root-link"}).ok());
}

TEST_F(WorkerSecurityTest, ExportDirMustBeNewEmptyOrThisJobsOwn) {
  using worker::CheckExportDir;
  const std::string d = root_ + "/export";
  EXPECT_TRUE(CheckExportDir(d, "7").ok());
  fs::create_directories(d);
  EXPECT_TRUE(CheckExportDir(d, "7").ok());
  std::ofstream(d + "/" + worker::kExportMarker) << "7";
  std::ofstream(d + "/model.safetensors") << "weights";
  EXPECT_TRUE(CheckExportDir(d, "7").ok());
  absl::Status other = CheckExportDir(d, "8");
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.message().find("the export of another job (job 7)"), std::string::npos) << other.message();
  fs::create_directories(root_ + "/home");
  std::ofstream(root_ + "/home/.bashrc") << "mine";
  absl::Status foreign = CheckExportDir(root_ + "/home", "7");
  EXPECT_EQ(foreign.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(foreign.message(), "output.export_dir: ")) << foreign.message();
  EXPECT_EQ(ReadFile(root_ + "/home/.bashrc"), "mine");
  std::ofstream(root_ + "/file") << "f";
  EXPECT_EQ(CheckExportDir(root_ + "/file", "7").code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(WorkerSecurityTest, TrainerEnvironmentKeepsOnlyWhatATrainerNeeds) {
  const char* inherited[] = {"PATH=/usr/bin",         "LLAMAFLEET_JOIN_TOKEN=secret",
                             "AWS_SECRET_ACCESS_KEY=x", "NCCL_DEBUG=INFO",
                             "LD_PRELOAD=/evil.so",   "LLAMAFLEET_PEAK_TFLOPS=989",
                             "LANG=C.UTF-8",          nullptr};
  worker::RunAs r;
  r.user = "llamafleet";
  const std::vector<std::string> env = worker::TrainerBaseEnvironment(inherited, r, "/work/dir");
  const std::string joined = absl::StrJoin(env, " ");
  EXPECT_EQ(joined,
            "HOME=/work/dir LANG=C.UTF-8 LLAMAFLEET_PEAK_TFLOPS=989 LOGNAME=llamafleet "
            "NCCL_DEBUG=INFO PATH=/usr/bin USER=llamafleet");
}

// ---------------------------------------------------------------- item 5: worker identities

class WorkerIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::Coordinator> c =
        testing::StartCoordinator({.data_dir = dir_.path() + "/coord",
                                   .flags = {"--join-token-file", TokenFile()},
                                   .log_path = dir_.path() + "/coordinator.log"});
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(c->process);
    address_ = c->address;
  }
  std::string TokenFile() {
    const std::string path = dir_.path() + "/join-token";
    std::ofstream(path) << "secret\n";
    return path;
  }
  std::vector<std::string> WorkerArgv(const std::string& data_dir) {
    return {BinaryPath("llamafleet-worker"), "--coordinator", address_, "--join-token-file",
            dir_.path() + "/join-token", "--data-dir", dir_.path() + "/" + data_dir, "--name",
            "node-a", "--cpu-ranks", "1", "--trainer", "/bin/false", "--heartbeat-interval", "0.3",
            "--run-as", std::to_string(geteuid())};
  }
  std::unique_ptr<Subprocess> Start(const std::string& data_dir) {
    auto p = Subprocess::Start(WorkerArgv(data_dir), {}, dir_.path() + "/" + data_dir + ".log");
    EXPECT_TRUE(p.ok());
    return p.ok() ? std::move(*p) : nullptr;
  }
  bool WaitForLog(const std::string& file, const std::string& needle, absl::Duration timeout) {
    return testing::WaitFor([&] { return ReadFile(file).find(needle) != std::string::npos; }, timeout,
                            absl::Milliseconds(50));
  }
  void TearDown() override {
    if (HasFailure()) {
      for (const char* f : {"coordinator.log", "a.log", "b.log"}) {
        std::cerr << "---- " << f << "\n" << ReadFile(dir_.path() + "/" + f);
      }
    }
  }

  TempDir dir_;
  std::unique_ptr<Subprocess> coordinator_;
  std::string address_;
};

TEST_F(WorkerIdentityTest, ANameIsBoundToTheCredentialOfItsFirstJoinUntilAnAdminForgetsIt) {
  std::unique_ptr<Subprocess> a = Start("a");
  ASSERT_TRUE(WaitForLog(dir_.path() + "/a.log", "registered with", absl::Seconds(20)));
  // The credential is kept in the worker's data dir, readable by its owner only.
  const std::string cred = dir_.path() + "/a/worker-credential";
  struct stat st;
  ASSERT_EQ(stat(cred.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(ReadFile(cred).find("node-a\nlfw_"), std::string::npos);

  // Same name and join token, no credential: refused, naming the fix, and the session of
  // the worker that holds the name stays.
  absl::StatusOr<testing::CommandResult> b = RunCommand(WorkerArgv("b"), "", {}, absl::Seconds(20));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->exit_code, 1);
  EXPECT_NE(b->err.find("worker name 'node-a' is already registered"), std::string::npos) << b->err;
  EXPECT_NE(b->err.find("llamafleet-coordinator worker forget node-a --data-dir"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_.path() + "/b/worker-credential"));
  absl::SleepFor(absl::Milliseconds(500));  // time for a disturbance to show: none may
  EXPECT_EQ(ReadFile(dir_.path() + "/a.log").find("session with"), std::string::npos)
      << "the first worker's session was disturbed";
  EXPECT_EQ(ReadFile(dir_.path() + "/coordinator.log").find("replaced by a newer session"),
            std::string::npos);

  // A wrong credential is refused the same way.
  fs::create_directories(dir_.path() + "/c");
  std::ofstream(dir_.path() + "/c/worker-credential") << "node-a\nlfw_0000\n";
  absl::StatusOr<testing::CommandResult> c = RunCommand(WorkerArgv("c"), "", {}, absl::Seconds(20));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->exit_code, 1);
  EXPECT_NE(c->err.find("carries a different one"), std::string::npos) << c->err;

  // The rightful worker restarts with its data dir and is welcome.
  a->Signal(SIGTERM);
  ASSERT_TRUE(a->Wait(absl::Seconds(20)).ok());
  a = Start("a");
  ASSERT_TRUE(WaitForLog(dir_.path() + "/a.log", "registered with", absl::Seconds(20)));
  a->Signal(SIGTERM);
  ASSERT_TRUE(a->Wait(absl::Seconds(20)).ok());

  // An admin releases the name (the coordinator keeps running); the next join gets a new one.
  absl::StatusOr<testing::CommandResult> forget =
      RunCommand({BinaryPath("llamafleet-coordinator"), "worker", "forget", "node-a", "--data-dir",
                  dir_.path() + "/coord"});
  ASSERT_TRUE(forget.ok());
  EXPECT_EQ(forget->exit_code, 0) << forget->err;
  absl::StatusOr<testing::CommandResult> again =
      RunCommand({BinaryPath("llamafleet-coordinator"), "worker", "forget", "node-a", "--data-dir",
                  dir_.path() + "/coord"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->exit_code, 1);
  EXPECT_NE(again->err.find("no worker named node-a holds a credential"), std::string::npos) << again->err;
  std::unique_ptr<Subprocess> b2 = Start("b");
  ASSERT_TRUE(WaitForLog(dir_.path() + "/b.log", "registered with", absl::Seconds(20)));
  EXPECT_TRUE(fs::exists(dir_.path() + "/b/worker-credential"));
  EXPECT_NE(ReadFile(dir_.path() + "/b/worker-credential"), ReadFile(cred));
}

}  // namespace
}  // namespace llamafleet
