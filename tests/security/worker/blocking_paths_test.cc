// A user with a shell on the storage puts a FIFO where a job names a file (the export
// directory's .llamafleet-export, data.train_path): opening one blocks until someone writes
// into it. Against a real llamafleet-worker under a scripted stand-in coordinator, such a
// task must fail at once with a message naming the field, and the worker must go on
// serving its session meanwhile: heartbeats, a cancel of another tenant's task, a
// reconnect. TaskStarts, which keeps task starts off the session's thread, is checked on
// its own below.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"
#include "worker/task_starts.h"

namespace llamafleet {
namespace {

namespace fs = std::filesystem;
using testing::BinaryPath;
using testing::ReadFile;
using testing::Subprocess;
using testing::TempDir;

// Marks that it ran, then runs until stopped.
constexpr char kTrainer[] = R"sh(#!/bin/sh
touch "$LLAMAFLEET_TEST_MARKS/ran-$LLAMAFLEET_TASK_ID"
echo running
exec sleep 60
)sh";

// How long anything the worker should do at once may take on a loaded 2-core machine.
constexpr absl::Duration kPrompt = absl::Seconds(10);

// A coordinator as far as one worker can tell. Its first session welcomes the worker,
// assigns `first`, and once that runs assigns each of `then` and cancels `first`; it
// closes the session when every task it sent has ended, or kPrompt after the cancel.
// Later sessions are welcomed and only listened to.
class ScriptedCoordinator final : public v1::WorkerService::Service {
 public:
  ScriptedCoordinator(v1::TaskSpec first, std::vector<v1::TaskSpec> then)
      : first_(std::move(first)), then_(std::move(then)) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~ScriptedCoordinator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  const std::string& address() const { return address_; }

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override {
    v1::WorkerMessage in;
    if (!stream->Read(&in) || !in.has_hello()) return grpc::Status::OK;
    int session;
    {
      std::lock_guard<std::mutex> lock(mu_);
      session = ++hellos_;
    }
    cv_.notify_all();
    v1::CoordinatorMessage welcome;
    welcome.mutable_welcome()->set_worker_id(in.hello().worker_name());
    welcome.mutable_welcome()->set_heartbeat_interval_ms(500);
    stream->Write(welcome);
    std::thread reader([&] {
      v1::WorkerMessage m;
      while (stream->Read(&m)) {
        std::lock_guard<std::mutex> lock(mu_);
        if (m.has_heartbeat()) ++heartbeats_;
        if (m.has_task_status()) statuses_[m.task_status().task_id()] = m.task_status();
        cv_.notify_all();
      }
    });
    if (session == 1) RunScript(stream);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (session > 1) cv_.wait(lock, [&] { return stopping_; });
    }
    context->TryCancel();  // ends the reader's Read, and the worker's session
    reader.join();
    return grpc::Status::OK;
  }

  // The task's terminal status, waiting until `deadline` (TASK_STATE_UNSPECIFIED then).
  v1::TaskStatus WaitFinished(const std::string& task_id, absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return Ended(task_id); });
    auto it = statuses_.find(task_id);
    return it == statuses_.end() ? v1::TaskStatus() : it->second;
  }
  // When the script cancelled `first` (InfiniteFuture before).
  absl::Time WaitCancelSent(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                 [&] { return cancel_sent_ != absl::InfiniteFuture(); });
    return cancel_sent_;
  }
  bool WaitHellos(int n, absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return hellos_ >= n; });
  }
  // Whether `n` heartbeats came after the cancel, in any session, by `deadline`.
  bool WaitHeartbeatsAfterCancel(int n, absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] {
      return cancel_sent_ != absl::InfiniteFuture() && heartbeats_ - heartbeats_at_cancel_ >= n;
    });
  }

 private:
  bool Ended(const std::string& task_id) const {
    auto it = statuses_.find(task_id);
    return it != statuses_.end() && it->second.state() != v1::TASK_RUNNING &&
           it->second.state() != v1::TASK_STARTING;
  }

  void RunScript(grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) {
    v1::CoordinatorMessage m;
    *m.mutable_assign()->mutable_task() = first_;
    stream->Write(m);
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool running = cv_.wait_for(lock, std::chrono::seconds(20), [&] {
        auto it = statuses_.find(first_.task_id());
        return stopping_ || (it != statuses_.end() && it->second.state() == v1::TASK_RUNNING);
      });
      if (!running || stopping_) return;
    }
    for (const v1::TaskSpec& t : then_) {
      *m.mutable_assign()->mutable_task() = t;
      stream->Write(m);
    }
    m.Clear();
    m.mutable_cancel()->set_task_id(first_.task_id());
    m.mutable_cancel()->set_reason("cancelled by its owner");
    m.mutable_cancel()->set_grace_period_ms(1000);
    stream->Write(m);
    std::unique_lock<std::mutex> lock(mu_);
    cancel_sent_ = absl::Now();
    heartbeats_at_cancel_ = heartbeats_;
    cv_.notify_all();
    auto all_ended = [&] {
      if (!Ended(first_.task_id())) return false;
      for (const v1::TaskSpec& t : then_) {
        if (!Ended(t.task_id())) return false;
      }
      return true;
    };
    cv_.wait_for(lock, absl::ToChronoMilliseconds(kPrompt),
                 [&] { return stopping_ || all_ended(); });
  }

  const v1::TaskSpec first_;
  const std::vector<v1::TaskSpec> then_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int hellos_ = 0;
  int heartbeats_ = 0;
  int heartbeats_at_cancel_ = 0;
  absl::Time cancel_sent_ = absl::InfiniteFuture();
  std::map<std::string, v1::TaskStatus> statuses_;
};

class BlockingPathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trainer_ = dir_.path() + "/fake-train.sh";
    std::ofstream(trainer_) << kTrainer;
    fs::permissions(trainer_, fs::perms::owner_all);
    marks_ = dir_.path() + "/marks";
    root_ = dir_.path() + "/root";
    fs::create_directories(marks_);
    fs::create_directories(root_);
    std::ofstream(root_ + "/good.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
  }

  v1::TaskSpec Task(const std::string& id) {
    v1::TaskSpec t;
    t.set_task_id(id);
    t.set_job_id(id.substr(0, id.find('-')));
    t.set_attempt(1);
    t.set_nnodes(1);
    t.set_nproc_per_node(1);
    t.set_master_addr("127.0.0.1");
    t.set_master_port(29500);
    t.add_path_roots(root_);
    t.mutable_spec()->set_name("blocking-paths");
    t.mutable_spec()->mutable_data()->set_train_path(root_ + "/good.jsonl");
    return t;
  }

  std::unique_ptr<Subprocess> StartWorker(const std::string& coordinator) {
    auto p = Subprocess::Start(
        {BinaryPath("llamafleet-worker"), "--coordinator", coordinator, "--data-dir",
         dir_.path() + "/w1", "--cpu-ranks", "3", "--name", "w1", "--trainer", trainer_,
         "--heartbeat-interval", "0.5", "--run-as", std::to_string(geteuid())},
        {{"LLAMAFLEET_JOIN_TOKEN", "secret"}, {"LLAMAFLEET_TEST_MARKS", marks_}},
        dir_.path() + "/w1.log");
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  bool Ran(const std::string& task_id) { return fs::exists(marks_ + "/ran-" + task_id); }

  void TearDown() override {
    if (HasFailure()) std::cerr << "worker log:\n" << ReadFile(dir_.path() + "/w1.log");
  }

  TempDir dir_;
  std::string trainer_, marks_, root_;
};

TEST_F(BlockingPathsTest,
       AFifoWhereAJobNamesAFileFailsItsTaskAtOnceAndTheWorkerServesOtherTenants) {
  // Mallory's FIFOs: one as the marker of an export directory, one as a training file.
  fs::create_directories(root_ + "/mallory/export");
  ASSERT_EQ(::mkfifo((root_ + "/mallory/export/.llamafleet-export").c_str(), 0666), 0);
  ASSERT_EQ(::mkfifo((root_ + "/mallory/train.jsonl").c_str(), 0666), 0);
  v1::TaskSpec alice = Task("1-1-0");
  v1::TaskSpec marker = Task("2-1-0");
  marker.mutable_spec()->mutable_output()->set_export_dir(root_ + "/mallory/export");
  v1::TaskSpec data = Task("3-1-0");
  data.mutable_spec()->mutable_data()->set_train_path(root_ + "/mallory/train.jsonl");

  ScriptedCoordinator coordinator(alice, {marker, data});
  std::unique_ptr<Subprocess> w = StartWorker(coordinator.address());
  const absl::Time cancelled = coordinator.WaitCancelSent(absl::Seconds(30));
  ASSERT_NE(cancelled, absl::InfiniteFuture()) << "alice's task never ran";
  const absl::Time deadline = cancelled + kPrompt;

  for (const auto& [task, field] :
       {std::pair<v1::TaskSpec, std::string>{marker, "output.export_dir"},
        {data, "data.train_path"}}) {
    const v1::TaskStatus st = coordinator.WaitFinished(task.task_id(), deadline);
    EXPECT_EQ(st.state(), v1::TASK_FAILED) << task.task_id() << " did not end within " << kPrompt
                                           << " (the worker is stuck opening the FIFO?)";
    ASSERT_LE(st.exits_size(), 1);
    if (st.exits_size() == 1) {
      EXPECT_TRUE(absl::StrContains(st.exits(0).last_error(), field + ": "))
          << st.exits(0).last_error();
      EXPECT_TRUE(absl::StrContains(st.exits(0).last_error(), "is not a regular file"))
          << st.exits(0).last_error();
      // The job's fault: a code the coordinator classifies as permanent.
      EXPECT_TRUE(st.exits(0).status_code() ==
                      static_cast<int>(absl::StatusCode::kFailedPrecondition) ||
                  st.exits(0).status_code() == static_cast<int>(absl::StatusCode::kInvalidArgument))
          << st.exits(0).status_code();
    }
    EXPECT_FALSE(Ran(task.task_id()));
  }
  // Another tenant's cancel is heard: her trainer stops, its slot is free again.
  const v1::TaskStatus st = coordinator.WaitFinished(alice.task_id(), deadline);
  EXPECT_EQ(st.state(), v1::TASK_KILLED)
      << "alice's cancelled task was not stopped within " << kPrompt;
  // The coordinator closes the session: the worker comes back, and keeps heartbeating.
  EXPECT_TRUE(coordinator.WaitHellos(2, deadline + kPrompt)) << "the worker did not reconnect";
  EXPECT_TRUE(coordinator.WaitHeartbeatsAfterCancel(2, deadline + kPrompt));
  // Nothing was written into Mallory's directory.
  EXPECT_EQ(
      std::distance(fs::directory_iterator(root_ + "/mallory/export"), fs::directory_iterator()),
      1);
}

// ---------------------------------------------------------------- TaskStarts on its own

TEST(TaskStartsTest, AHungStartDelaysOnlyItsOwnTaskAndCanBeCancelledMeanwhile) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  bool other_done = false;
  worker::TaskStarts starts(2);
  ASSERT_EQ(starts.Begin("hung",
                         [&] {
                           std::unique_lock<std::mutex> lock(mu);
                           cv.wait(lock, [&] { return release; });
                         }),
            worker::TaskStarts::Begun::kStarted);
  // A repeated assignment of a start in flight is ignored.
  EXPECT_EQ(starts.Begin("hung", [] {}), worker::TaskStarts::Begun::kAlreadyStarting);
  ASSERT_EQ(starts.Begin("other",
                         [&] {
                           std::lock_guard<std::mutex> lock(mu);
                           other_done = true;
                           cv.notify_all();
                         }),
            worker::TaskStarts::Begun::kStarted);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return other_done; }))
        << "a hung start held up another";
  }
  ASSERT_TRUE(testing::WaitFor([&] { return starts.InFlight().size() == 1; }, absl::Seconds(10)));
  EXPECT_EQ(starts.InFlight(), std::vector<std::string>{"hung"});
  // Bounded: beyond max_in_flight (counting the hung one) a start is refused.
  ASSERT_EQ(starts.Begin("third",
                         [&] {
                           std::unique_lock<std::mutex> lock(mu);
                           cv.wait(lock, [&] { return release; });
                         }),
            worker::TaskStarts::Begun::kStarted);
  EXPECT_EQ(starts.Begin("fourth", [] {}), worker::TaskStarts::Begun::kFull);
  // A cancel while it hangs is kept for whoever finishes the start.
  EXPECT_FALSE(starts.Cancelled("hung").has_value());
  EXPECT_TRUE(starts.Cancel("hung", "cancelled by its owner"));
  EXPECT_EQ(starts.Cancelled("hung").value_or(""), "cancelled by its owner");
  EXPECT_FALSE(starts.Cancel("never-started", "x"));
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(testing::WaitFor([&] { return starts.InFlight().empty(); }, absl::Seconds(10)));
  EXPECT_FALSE(starts.Cancelled("hung").has_value()) << "forgotten once the start is over";
}

}  // namespace
}  // namespace llamafleet
