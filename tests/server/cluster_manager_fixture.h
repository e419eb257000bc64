// The ClusterManager test fixture: a real SQLite store, a fake clock and fake worker links
// (FakeLink records what the coordinator told each worker). Shared by the test files of
// cluster_manager_test.
#ifndef LLAMAFLEET_TESTS_SERVER_CLUSTER_MANAGER_FIXTURE_H_
#define LLAMAFLEET_TESTS_SERVER_CLUSTER_MANAGER_FIXTURE_H_

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "jobspec/jobspec.h"
#include "server/cluster/cluster_manager.h"
#include "server/cluster/node_loss.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"

namespace llamafleet::testing_cluster {

namespace fs = std::filesystem;

// The coordinator's end of a session, recording what it was told.
class FakeLink : public WorkerLink {
 public:
  void Send(v1::CoordinatorMessage message) override {
    absl::MutexLock lock(&mu_);
    sent_.push_back(std::move(message));
  }
  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    closed_ = status;
  }
  std::vector<v1::TaskSpec> Assignments() {
    absl::MutexLock lock(&mu_);
    std::vector<v1::TaskSpec> out;
    for (const auto& m : sent_) {
      if (m.has_assign()) out.push_back(m.assign().task());
    }
    return out;
  }
  std::vector<std::string> Cancels() {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& m : sent_) {
      if (m.has_cancel()) out.push_back(m.cancel().task_id());
    }
    return out;
  }
  std::vector<std::string> Kills() {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& m : sent_) {
      if (m.has_welcome()) out.assign(m.welcome().kill_task_ids().begin(), m.welcome().kill_task_ids().end());
    }
    return out;
  }
  // The welcome's held list (nullopt: no welcome, or one without a held list).
  std::optional<std::vector<std::string>> Held() {
    absl::MutexLock lock(&mu_);
    for (const auto& m : sent_) {
      if (m.has_welcome() && m.welcome().has_held()) {
        return std::vector<std::string>(m.welcome().held().task_ids().begin(), m.welcome().held().task_ids().end());
      }
    }
    return std::nullopt;
  }
  std::optional<absl::Status> closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::CoordinatorMessage> sent_;
  std::optional<absl::Status> closed_;
};

class ClusterManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    JobStoreOptions so;
    so.path = dir_.path() + "/coordinator.db";
    so.synchronous_full = false;
    so.clock = &clock_;
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(so);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    ClusterOptions o;
    o.join_token = "t";
    o.clock = &clock_;
    o.heartbeat_timeout = absl::Seconds(10);
    o.missing_task_grace = absl::Seconds(3);
    o.cancel_grace = absl::Seconds(15);
    o.stop_report_slack = absl::Seconds(10);
    o.tick = absl::Milliseconds(20);
    o.checkpoint_root = dir_.path() + "/checkpoints";
    Configure(&o);
    o.on_attempt_released = [this](int64_t job, int attempt) {
      absl::MutexLock lock(&released_mu_);
      released_.push_back({job, attempt});
    };
    absl::StatusOr<std::unique_ptr<ClusterManager>> m = ClusterManager::Start(store_.get(), o);
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = std::move(*m);
  }

  // A test's own options (before the manager starts).
  virtual void Configure(ClusterOptions*) {}

  void TearDown() override {
    manager_.reset();
    store_.reset();
  }

  // `instance`: Hello.instance_id, the worker process's ("": one that sends none).
  std::shared_ptr<FakeLink> Hello(const std::string& name, std::vector<std::string> running = {},
                                  const std::string& instance = "") {
    auto link = std::make_shared<FakeLink>();
    v1::Hello h;
    h.set_worker_name(name);
    h.set_instance_id(instance);
    h.set_join_token("t");
    h.mutable_inventory()->set_cpu_ranks(1);
    h.mutable_inventory()->set_address("127.0.0.1");
    for (const std::string& t : running) h.add_running_task_ids(t);
    manager_->OnHello(link, h);
    manager_->Sync();
    return link;
  }

  int64_t Submit(const std::string& extra = "",
                 const std::string& resources = "{nodes: 2, gpus_per_node: 1}",
                 const std::string& data = "{train_path: /data/train.jsonl}") {
    absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(
        absl::StrCat("name: t\nmodel: {preset: tiny}\ndata: ", data, "\n", "resources: ", resources,
                     "\n", "run_policy: {max_restarts: 3, restart_backoff_seconds: 1}\n", extra));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    v1::JobSpec spec = (*parsed)[0].spec;
    ApplyDefaults(&spec);
    absl::StatusOr<std::vector<SubmitJobResult>> r =
        store_->SubmitJobsAndWait({SubmitJobInput{spec, "alice", ""}});
    EXPECT_TRUE(r.ok()) << r.status();
    return std::stoll((*r)[0].job.id());
  }

  void Send(const std::string& worker, v1::WorkerMessage m) {
    manager_->OnWorkerMessage(worker, std::move(m));
    manager_->Sync();
  }
  void Report(const std::string& worker, const std::string& task, v1::TaskState state,
              int exit_code = 0) {
    v1::WorkerMessage m;
    m.mutable_task_status()->set_task_id(task);
    m.mutable_task_status()->set_state(state);
    if (state == v1::TASK_FAILED || state == v1::TASK_SUCCEEDED) {
      v1::RankExit* e = m.mutable_task_status()->add_exits();
      e->set_exit_code(exit_code);
      e->set_last_error("RuntimeError: gloo reduce-scatter: Connection reset by peer");
    }
    Send(worker, std::move(m));
  }
  void Heartbeat(const std::string& worker) {
    v1::WorkerMessage m;
    m.mutable_heartbeat();
    Send(worker, std::move(m));
  }
  // Moves the clock in steps shorter than the heartbeat timeout, the workers heartbeating
  // between steps (the loop's own ticks see every step).
  void AdvanceWithHeartbeats(absl::Duration d, const std::vector<std::string>& workers) {
    while (d > absl::ZeroDuration()) {
      const absl::Duration step = std::min(d, absl::Seconds(4));
      for (const std::string& w : workers) Heartbeat(w);
      clock_.Advance(step);
      for (const std::string& w : workers) Heartbeat(w);
      d -= step;
    }
  }
  void Checkpoint(const std::string& worker, const std::string& task, int64_t step,
                  const std::string& path) {
    v1::WorkerMessage m;
    m.mutable_checkpoint()->set_task_id(task);
    m.mutable_checkpoint()->set_step(step);
    m.mutable_checkpoint()->set_path(path);
    m.mutable_checkpoint()->set_manifest_sha256(absl::StrCat("sha-", step));
    Send(worker, std::move(m));
  }

  // Two workers, w0 and w1 (their processes' instance ids `i0`, `i1`), and a two-node job
  // whose tasks both report RUNNING.
  struct RunningGang {
    std::shared_ptr<FakeLink> w0, w1;
    int64_t id = 0;
    std::string t0, t1;
  };
  void StartRunningGang(RunningGang* g, const std::string& i0 = "", const std::string& i1 = "") {
    g->w0 = Hello("w0", {}, i0);
    g->w1 = Hello("w1", {}, i1);
    g->id = Submit();
    g->t0 = absl::StrCat(g->id, "-1-0");
    g->t1 = absl::StrCat(g->id, "-1-1");
    ASSERT_TRUE(Eventually([&] { return !g->w0->Assignments().empty() && !g->w1->Assignments().empty(); }));
    Report("w0", g->t0, v1::TASK_RUNNING);
    Report("w1", g->t1, v1::TASK_RUNNING);
    ASSERT_TRUE(Eventually([&] { return Job(g->id).state() == v1::RUNNING; }));
  }

  // Waits (for the store's writer and the loop, not for time to pass) until `done`.
  bool Eventually(const std::function<bool()>& done) {
    return testing::WaitFor(
        [&] {
          manager_->TickNow();
          return done();
        },
        absl::Seconds(5), absl::Milliseconds(10));
  }
  v1::Job Job(int64_t id) { return *store_->GetJob(id); }
  int Allocated(const std::string& worker) {
    for (const v1::WorkerInfo& w : manager_->Workers()) {
      if (w.name() == worker) return w.gpus_allocated();
    }
    return -1;
  }
  std::vector<v1::Checkpoint> Checkpoints(int64_t job) { return *ListCheckpoints(*store_, job); }
  // A checkpoint in a default dir (<root>/<job id>), the dir marked as the trainer marks it.
  void MakeCheckpoint(const std::string& path) {
    fs::create_directories(path);
    std::ofstream(path + "/manifest.json") << "{}";
    const fs::path dir = fs::path(path).parent_path();
    std::ofstream(dir / ".llamafleet-job") << dir.filename().string() << "\n";
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<ClusterManager> manager_;
  absl::Mutex released_mu_;
  std::vector<std::pair<int64_t, int>> released_;
};

}  // namespace llamafleet::testing_cluster

#endif  // LLAMAFLEET_TESTS_SERVER_CLUSTER_MANAGER_FIXTURE_H_
