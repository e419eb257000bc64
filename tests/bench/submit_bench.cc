// Submission throughput and latency through a real coordinator process.
//
// C concurrent clients (each its own channel and TCP connection, one call in flight at a
// time) submit jobs for a fixed time against `llamafleet-coordinator --synchronous full`,
// first with group commit (the default), then with one transaction per submission as the
// baseline; each mode runs R times and the medians are printed, with the ratio.
//
//   build/bin/submit_bench [--clients 64] [--seconds 5] [--runs 3] [--group-only] [--floor]
//
// Also prints the coordinator's CPU time per acknowledged submission (from /proc).
//
// --floor also runs the same clients, against the same coordinator build, with calls that
// do less than a submission: the gRPC health check (no credential, no database) and
// WhoAmI (the credential check, no write). They are the floor under the submission
// figures on this machine: no submission path can be faster than the health check.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

using testing::BinaryPath;
using testing::Percentile;
using testing::ProcessCpuMicros;
using testing::Subprocess;
using testing::TempDir;

// Every submission carries a real API token (a user token made with `token create`), so
// the figures include the coordinator's per-call credential check.
std::string g_bearer;

struct RunResult {
  double acks_per_second = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  int64_t errors = 0;
  // The coordinator's CPU time (user + system, all threads) over the measured window,
  // per acknowledged submission: what one submission costs the server.
  double server_cpu_us_per_ack = 0;
  // This process's CPU time per acknowledged submission: the 64 clients' gRPC work,
  // which shares the machine's cores with the coordinator.
  double client_cpu_us_per_ack = 0;
  std::string writer_line;  // the coordinator's own account of its transactions
};

// What each client calls in a loop.
enum class Call {
  kSubmit,  // SubmitJob: credential, validation, durable write
  kWhoAmI,  // WhoAmI: the credential check alone
  kHealth,  // grpc.health.v1.Health/Check: gRPC alone (no credential, no database)
};

// One client: a channel and a loop of SubmitJob calls, each started from the previous
// call's completion callback.
class Client {
 public:
  Client(const std::string& address, int index, Call call, const v1::JobSpec& spec,
         std::atomic<bool>* measuring, std::atomic<bool>* stopping)
      : channel_(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                           ChannelArgs(index))),
        stub_(v1::JobService::NewStub(channel_)),
        generic_stub_(channel_),
        index_(index),
        call_(call),
        measuring_(measuring),
        stopping_(stopping) {
    request_template_.mutable_spec()->CopyFrom(spec);
  }

  void Start() { Next(); }

  void WaitDone() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

  std::vector<double> latencies_ms;
  int64_t errors = 0;

 private:
  static grpc::ChannelArguments ChannelArgs(int index) {
    grpc::ChannelArguments args;
    args.SetInt("llamafleet.bench.client", index);  // distinct channels, distinct connections
    return args;
  }

  void Next() {
    if (stopping_->load()) {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
      return;
    }
    context_ = std::make_unique<grpc::ClientContext>();
    if (call_ != Call::kHealth) context_->AddMetadata("authorization", g_bearer);
    context_->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    start_ = absl::Now();
    const bool counted = measuring_->load();
    auto done = [this, counted](grpc::Status status) {
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - start_);
      if (!status.ok()) {
        if (errors++ == 0) std::fprintf(stderr, "call failed: %s\n", status.error_message().c_str());
      } else if (counted && measuring_->load()) {
        latencies_ms.push_back(ms);
      }
      Next();
    };
    switch (call_) {
      case Call::kSubmit:
        request_ = request_template_;
        request_.mutable_spec()->set_name(absl::StrCat("bench-", index_, "-", sequence_++));
        stub_->async()->SubmitJob(context_.get(), &request_, &response_, std::move(done));
        break;
      case Call::kWhoAmI:
        stub_->async()->WhoAmI(context_.get(), &whoami_request_, &whoami_response_, std::move(done));
        break;
      case Call::kHealth: {
        // An empty HealthCheckRequest (service "": the whole server) is zero bytes.
        grpc::Slice empty("");
        health_request_ = grpc::ByteBuffer(&empty, 1);
        generic_stub_.UnaryCall(context_.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                                &health_request_, &health_response_, std::move(done));
        break;
      }
    }
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> stub_;
  grpc::GenericStub generic_stub_;
  const int index_;
  const Call call_;
  v1::WhoAmIRequest whoami_request_;
  v1::WhoAmIResponse whoami_response_;
  grpc::ByteBuffer health_request_, health_response_;
  std::atomic<bool>* measuring_;
  std::atomic<bool>* stopping_;
  v1::SubmitJobRequest request_template_;
  v1::SubmitJobRequest request_;
  v1::SubmitJobResponse response_;
  std::unique_ptr<grpc::ClientContext> context_;
  absl::Time start_;
  int64_t sequence_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

RunResult RunOnce(bool group_commit, Call call, int clients, double seconds,
                  const v1::JobSpec& spec) {
  TempDir dir;
  std::vector<std::string> argv = testing::CoordinatorArgv({.data_dir = dir.path(),
                                                            .auth = true,
                                                            .flags = {"--synchronous", "full"},
                                                            .config = dir.path() + "/config.yaml",
                                                            .log_level = "info"});
  // The spec names /fsx/... and the queue bench; the bench submits more jobs than the
  // default per-user limit.
  std::ofstream(dir.path() + "/config.yaml")
      << "paths: {roots: [/fsx]}\nqueues: {bench: {gpu_quota: 0}}\n"
         "limits: {max_active_jobs_per_user: 0}\n";
  if (!group_commit) argv.push_back("--no-group-commit");
  absl::StatusOr<testing::CommandResult> token =
      testing::RunCommand({BinaryPath("llamafleet-coordinator"), "token", "create", "--data-dir",
                           dir.path(), "--user", "bench", "--role", "user"});
  if (!token.ok() || token->exit_code != 0) {
    std::fprintf(stderr, "cannot create a token: %s\n",
                 token.ok() ? token->err.c_str() : token.status().ToString().c_str());
    std::exit(1);
  }
  g_bearer = "Bearer " + std::string(absl::StripAsciiWhitespace(token->out));
  const std::string log = dir.path() + "/coordinator.log";
  auto coordinator = Subprocess::Start(argv, {}, log);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "cannot start coordinator: %s\n", coordinator.status().ToString().c_str());
    std::exit(1);
  }
  absl::StatusOr<std::string> address = (*coordinator)->WaitForListening();
  if (!address.ok()) {
    std::fprintf(stderr, "coordinator did not start: %s\n", address.status().ToString().c_str());
    std::exit(1);
  }
  std::atomic<bool> measuring{false}, stopping{false};
  std::vector<std::unique_ptr<Client>> pool;
  for (int i = 0; i < clients; ++i) {
    pool.push_back(std::make_unique<Client>(*address, i, call, spec, &measuring, &stopping));
  }
  for (auto& c : pool) c->Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // warm-up: connections, caches
  measuring = true;
  const absl::Time begin = absl::Now();
  const double cpu_begin = ProcessCpuMicros((*coordinator)->pid());
  const double client_cpu_begin = ProcessCpuMicros(getpid());
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(absl::Seconds(seconds)));
  measuring = false;
  const double cpu_end = ProcessCpuMicros((*coordinator)->pid());
  const double client_cpu_end = ProcessCpuMicros(getpid());
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - begin);
  stopping = true;
  for (auto& c : pool) c->WaitDone();

  RunResult result;
  std::vector<double> all;
  for (auto& c : pool) {
    all.insert(all.end(), c->latencies_ms.begin(), c->latencies_ms.end());
    result.errors += c->errors;
  }
  result.acks_per_second = all.size() / elapsed;
  if (!all.empty()) {
    result.server_cpu_us_per_ack = (cpu_end - cpu_begin) / all.size();
    result.client_cpu_us_per_ack = (client_cpu_end - client_cpu_begin) / all.size();
  }
  result.p50_ms = Percentile(all, 0.50);
  result.p99_ms = Percentile(all, 0.99);
  (*coordinator)->Signal(SIGTERM);
  (void)(*coordinator)->Wait(absl::Seconds(30));
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    size_t at = line.find("writer: ");
    if (at != std::string::npos) result.writer_line = line.substr(at);
  }
  return result;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One mode of the bench (a call, with or without group commit) and its runs.
struct Mode {
  bool group_commit;
  Call call;
  const char* name;
  const char* unit;  // what a call is: "ack" (acknowledged submission) or "call"
  std::vector<RunResult> runs;

  double MedianOf(double RunResult::*field) const {
    std::vector<double> v;
    for (const RunResult& r : runs) v.push_back(r.*field);
    return Median(std::move(v));
  }

  void Run(int run, int clients, double seconds, const v1::JobSpec& spec) {
    RunResult r = RunOnce(group_commit, call, clients, seconds, spec);
    std::printf("  run %d %-28s %9.0f %ss/s  p50 %7.2f ms  p99 %7.2f ms  server CPU %6.1f us/%s  "
                "client CPU %6.1f us/%s  errors %lld\n",
                run + 1, absl::StrCat(name, ":").c_str(), r.acks_per_second, unit, r.p50_ms, r.p99_ms,
                r.server_cpu_us_per_ack, unit, r.client_cpu_us_per_ack, unit,
                static_cast<long long>(r.errors));
    if (call == Call::kSubmit) std::printf("        coordinator %s\n", r.writer_line.c_str());
    std::fflush(stdout);
    runs.push_back(std::move(r));
  }

  // "median <name> <rate> <unit>s/s ...": cli_vs_sbatch.sh reads the rate by field.
  void PrintMedian(const std::string& suffix = "") const {
    std::printf("median %-31s %9.0f %ss/s  p50 %7.2f ms  p99 %7.2f ms  server CPU %6.1f us/%s  "
                "client CPU %6.1f us/%s%s\n",
                name, MedianOf(&RunResult::acks_per_second), unit, MedianOf(&RunResult::p50_ms),
                MedianOf(&RunResult::p99_ms), MedianOf(&RunResult::server_cpu_us_per_ack), unit,
                MedianOf(&RunResult::client_cpu_us_per_ack), unit, suffix.c_str());
  }
};

}  // namespace
}  // namespace llamafleet

int main(int argc, char** argv) {
  int clients = 64;
  double seconds = 5;
  int runs = 3;
  CLI::App app{"llamafleet submission benchmark"};
  app.add_option("--clients", clients, "concurrent clients");
  app.add_option("--seconds", seconds, "measured seconds per run");
  app.add_option("--runs", runs, "runs per mode (medians are reported)");
  bool group_only = false;
  app.add_flag("--group-only", group_only, "skip the one-transaction-per-submit baseline");
  bool floor = false;
  app.add_flag("--floor", floor,
               "also time WhoAmI and the gRPC health check with the same clients: the floor under "
               "the submission figures on this machine");
  CLI11_PARSE(app, argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);  // as the coordinator

  auto parsed = llamafleet::ParseJobDocuments(
      "name: bench\nqueue: bench\nlabels: {suite: bench}\n"
      "model: {preset: llama2-7b, tokenizer: /fsx/tokenizer.model}\n"
      "data: {train_path: /fsx/data/train.jsonl, format: prompt_completion}\n"
      "training: {max_steps: 1000, micro_batch_size: 1, seq_len: 4096}\n"
      "resources: {nodes: 4, gpus_per_node: 8}\n");
  const llamafleet::v1::JobSpec spec = (*parsed)[0].spec;

  std::printf("submit_bench: %d clients, %.0f s per run, %d runs per mode, synchronous=FULL\n",
              clients, seconds, runs);
  using llamafleet::Call;
  using llamafleet::Mode;
  std::vector<Mode> modes = {{true, Call::kSubmit, "group commit", "ack", {}}};
  if (!group_only) modes.push_back({false, Call::kSubmit, "one txn per submit (baseline)", "ack", {}});
  // The floor: the same clients and harness, calls that do less.
  if (floor) {
    modes.push_back({true, Call::kWhoAmI, "WhoAmI (credential only)", "call", {}});
    modes.push_back({true, Call::kHealth, "health check (gRPC only)", "call", {}});
  }
  // Interleaved by run, so that a drift of the machine's speed shows in every mode.
  for (int run = 0; run < runs; ++run) {
    for (Mode& m : modes) m.Run(run, clients, seconds, spec);
  }
  const Mode& group = modes[0];
  const double group_rate = group.MedianOf(&llamafleet::RunResult::acks_per_second);
  for (const Mode& m : modes) {
    m.PrintMedian(m.call == Call::kSubmit
                      ? ""
                      : absl::StrCat("; submissions reach ",
                                     static_cast<int>(std::lround(
                                         100 * group_rate /
                                         m.MedianOf(&llamafleet::RunResult::acks_per_second))),
                                     "% of it"));
  }
  // What the cores allow: with every core busy on nothing but submissions (server and
  // clients), at most cores / (server + client CPU per ack).
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const double server = group.MedianOf(&llamafleet::RunResult::server_cpu_us_per_ack);
  const double client = group.MedianOf(&llamafleet::RunResult::client_cpu_us_per_ack);
  std::printf("CPU per ack (group commit): server %.1f us + clients %.1f us; %ld cores allow at most "
              "%.0f acks/s; the server alone on %ld cores: %.0f acks/s\n",
              server, client, cores, server + client > 0 ? cores * 1e6 / (server + client) : 0.0, cores,
              server > 0 ? cores * 1e6 / server : 0.0);
  if (!group_only) {
    std::printf("group commit / baseline throughput ratio: %.2fx\n",
                group_rate / modes[1].MedianOf(&llamafleet::RunResult::acks_per_second));
  }
  std::printf("target: >= 5000 acks/s with p99 <= 25 ms at 64 clients\n");
  return 0;
}
