// Submit-to-assignment latency through the real coordinator, with free capacity.
//
// Starts `llamafleet-coordinator` (synchronous=FULL), connects W simulated workers over
// the real WorkerService protocol (each reports G GPUs; on an assignment it records the
// time, reports RUNNING then SUCCEEDED at once, so capacity stays free), then submits N
// one-GPU jobs one at a time and measures, per job, the time from sending SubmitJob to
// the worker receiving its AssignTask. Prints p50/p90/p99 and the max.
//
//   build/bin/dispatch_bench [--workers 8] [--gpus 8] [--jobs 500]
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "clients/jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

struct Arrivals {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, absl::Time> by_job;  // job id → when its assignment arrived
};

// One simulated worker: a session stream, a reader thread.
class FakeWorker {
 public:
  FakeWorker(const std::string& address, const std::string& name, int gpus, Arrivals* arrivals)
      : stub_(v1::WorkerService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        arrivals_(arrivals) {
    stream_ = stub_->Session(&context_);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_name(name);
    hello.mutable_hello()->set_join_token("bench");
    v1::Inventory* inv = hello.mutable_hello()->mutable_inventory();
    inv->set_host(name);
    inv->set_address("127.0.0.1");
    for (int i = 0; i < gpus; ++i) {
      v1::Gpu* g = inv->add_gpus();
      g->set_index(i);
      g->set_model("simulated");
    }
    stream_->Write(hello);
    reader_ = std::thread([this] { Read(); });
  }
  ~FakeWorker() {
    context_.TryCancel();
    reader_.join();
  }

 private:
  void Read() {
    v1::CoordinatorMessage m;
    while (stream_->Read(&m)) {
      if (!m.has_assign()) continue;
      const absl::Time now = absl::Now();
      const v1::TaskSpec& t = m.assign().task();
      {
        std::lock_guard<std::mutex> lock(arrivals_->mu);
        arrivals_->by_job.emplace(t.job_id(), now);
      }
      arrivals_->cv.notify_all();
      for (v1::TaskState s : {v1::TASK_RUNNING, v1::TASK_SUCCEEDED}) {
        v1::WorkerMessage status;
        status.mutable_task_status()->set_task_id(t.task_id());
        status.mutable_task_status()->set_state(s);
        std::lock_guard<std::mutex> lock(write_mu_);
        stream_->Write(status);
      }
    }
  }

  std::unique_ptr<v1::WorkerService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream_;
  std::mutex write_mu_;
  Arrivals* arrivals_;
  std::thread reader_;
};

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace
}  // namespace llamafleet

int main(int argc, char** argv) {
  using namespace llamafleet;
  int workers = 8, gpus = 8, jobs = 500;
  CLI::App app{"submit-to-assignment latency through a real coordinator"};
  app.add_option("--workers", workers, "simulated workers");
  app.add_option("--gpus", gpus, "GPUs per simulated worker");
  app.add_option("--jobs", jobs, "jobs submitted one after another");
  CLI11_PARSE(app, argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  testing::TempDir dir;
  auto coordinator = testing::Subprocess::Start(
      {testing::BinaryPath("llamafleet-coordinator"), "--listen", "127.0.0.1:0", "--insecure-no-auth", "--data-dir",
       dir.path(), "--join-token", "bench", "--log-level", "warn", "--path-root", dir.path(),
       "--path-root", "/"});
  if (!coordinator.ok()) return 1;
  absl::StatusOr<std::string> address = (*coordinator)->WaitForListening();
  if (!address.ok()) return 1;

  Arrivals arrivals;
  std::vector<std::unique_ptr<FakeWorker>> pool;
  for (int i = 0; i < workers; ++i) {
    pool.push_back(std::make_unique<FakeWorker>(*address, absl::StrCat("sim-", i), gpus, &arrivals));
  }
  auto stub = v1::JobService::NewStub(grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  auto parsed = ParseJobDocuments(
      "name: dispatch\nmodel: {preset: tiny, tokenizer: /t.model}\ndata: {train_path: /d}\n"
      "resources: {nodes: 1, gpus_per_node: 1}\n");
  v1::SubmitJobRequest req;
  *req.mutable_spec() = (*parsed)[0].spec;
  absl::SleepFor(absl::Seconds(1));  // workers registered

  std::vector<double> latencies_ms;
  int missing = 0;
  for (int i = 0; i < jobs + 20; ++i) {  // the first 20 warm up
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    const absl::Time start = absl::Now();
    if (!stub->SubmitJob(&ctx, req, &resp).ok()) return 1;
    std::unique_lock<std::mutex> lock(arrivals.mu);
    if (!arrivals.cv.wait_for(lock, std::chrono::seconds(5),
                              [&] { return arrivals.by_job.count(resp.job().id()) > 0; })) {
      ++missing;
      continue;
    }
    if (i >= 20) latencies_ms.push_back(absl::ToDoubleMilliseconds(arrivals.by_job[resp.job().id()] - start));
  }
  std::printf("dispatch_bench: %d simulated workers x %d GPUs, %d one-GPU jobs submitted one at a time, synchronous=FULL\n",
              workers, gpus, jobs);
  std::printf("submit-to-assignment latency: p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms  (no assignment within 5 s: %d)\n",
              Percentile(latencies_ms, 0.5), Percentile(latencies_ms, 0.9),
              Percentile(latencies_ms, 0.99), Percentile(latencies_ms, 1.0), missing);
  std::printf("target: p99 <= 50 ms\n");
  pool.clear();
  (*coordinator)->Signal(SIGTERM);
  (void)(*coordinator)->Wait(absl::Seconds(20));
  return 0;
}
