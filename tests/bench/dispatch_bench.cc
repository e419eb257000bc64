// Submit-to-assignment latency through the real coordinator, with free capacity.
//
// Starts `llamafleet-coordinator` (synchronous=FULL), connects W simulated workers over
// the real WorkerService protocol (each reports G GPUs; on an assignment it records the
// time, reports RUNNING then SUCCEEDED at once, so capacity stays free), then submits N
// one-GPU jobs one at a time and measures, per job, the time from sending SubmitJob to
// the worker receiving its AssignTask. Prints p50/p90/p99 and the max.
//
//   build/bin/dispatch_bench [--workers 8] [--gpus 8] [--jobs 500]
//
// Deep-queue mode, with --queued N: the same coordinator holds N queued jobs
// no worker can take (an instance type none reports), so every scheduling pass reads,
// orders and explains all of them, while W workers (--workers; the contract is stated for
// 1,000) are connected:
//   1. idle: C clients submit backlog jobs to the coordinator before any worker or
//      backlog exists; their submit latency is the baseline;
//   2. the backlog is filled to N (batches), and the workers connect;
//   3. admissions: C clients submit --gangs jobs of --nodes nodes x all GPUs at a higher
//      priority; a gang is admitted when all its nodes received their AssignTask. Prints
//      admissions/s (first submit to last admission) and the submit latency against (1);
//   4. passes: one job at a time, the time from the durable acknowledgement to the
//      assignment arriving (≈ one scheduling pass over the deep queue), against the
//      coordinator's own llamafleet_scheduling_pass_duration_seconds histogram (scraped
//      from /metrics before and after);
//   5. paced: --paced-submits jobs at --paced-rate per second (open loop, as scripts and
//      services submit) into the deep queue with the workers connected, where every
//      submission asks for a pass over all of it, against the same load into an idle
//      queue: a second coordinator, started fresh for each block, with nothing queued and
//      no worker. --paced-blocks blocks of each, alternated (idle, deep, idle, ...), so a
//      drift of the machine's speed lands on both sides; the p99s are over all blocks.
//      (3)'s closed loop saturates both cores with its own clients and 1,000 simulated
//      workers, so its ratio says how much CPU was left, not what a pass does.
//   build/bin/dispatch_bench --queued 10000 --workers 1000 [--clients 16] [--gangs 2000]
#include <grpcpp/grpcpp.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

using testing::Percentile;
using testing::ProcessCpuMicros;

struct Arrivals {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, absl::Time> by_job;  // job id → when its assignment arrived
  // Gangs: job id → nodes that received their task so far, and when the last one did.
  std::map<std::string, int> nodes_by_job;
  std::map<std::string, absl::Time> gang_by_job;  // job id → all nodes assigned
};

// One simulated worker: a session stream, a reader thread.
class FakeWorker {
 public:
  FakeWorker(const std::string& address, const std::string& name, int gpus, Arrivals* arrivals)
      : FakeWorker(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), name, gpus,
                   arrivals) {}
  // Workers may share a channel (one HTTP/2 connection, a stream each).
  FakeWorker(std::shared_ptr<grpc::Channel> channel, const std::string& name, int gpus,
             Arrivals* arrivals)
      : stub_(v1::WorkerService::NewStub(std::move(channel))), arrivals_(arrivals) {
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
        if (++arrivals_->nodes_by_job[t.job_id()] == t.nnodes()) {
          arrivals_->gang_by_job[t.job_id()] = now;
        }
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

// The first three fields of /proc/loadavg: this machine is shared, figures are noisy.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

// GET http://host:port/metrics over a plain socket (HTTP/1.1, Connection: close).
std::string ScrapeMetrics(const std::string& http_address) {
  const size_t colon = http_address.rfind(':');
  const std::string host = http_address.substr(0, colon);
  const int port = std::stoi(http_address.substr(colon + 1));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request =
        absl::StrCat("GET /metrics HTTP/1.1\r\nHost: ", http_address, "\r\nConnection: close\r\n\r\n");
    (void)!write(fd, request.data(), request.size());
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, n);
  }
  close(fd);
  return response;
}

// The scheduling-pass histogram: cumulative counts by upper bound, and the sum.
struct PassHistogram {
  std::map<double, double> cumulative;  // le → count
  double count = 0;
  double sum = 0;
};

PassHistogram ParsePassHistogram(const std::string& text,
                                 const std::string& name = "llamafleet_scheduling_pass_duration_seconds") {
  PassHistogram h;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    const size_t space = line.rfind(' ');
    const double value = std::stod(line.substr(space + 1));
    if (line.rfind(name + "_bucket{le=\"", 0) == 0) {
      const std::string le = line.substr(name.size() + 12, line.find('"', name.size() + 12) - name.size() - 12);
      h.cumulative[le == "+Inf" ? 1e300 : std::stod(le)] = value;
    } else if (line.rfind(name + "_count", 0) == 0) {
      h.count = value;
    } else if (line.rfind(name + "_sum", 0) == 0) {
      h.sum = value;
    }
  }
  return h;
}

// The p-quantile of the passes between two scrapes, interpolated within its bucket as
// Prometheus' histogram_quantile does.
double HistogramQuantile(const PassHistogram& before, const PassHistogram& after, double p) {
  const double total = after.count - before.count;
  if (total <= 0) return 0;
  double lower = 0, below = 0;
  for (const auto& [le, cum] : after.cumulative) {
    auto it = before.cumulative.find(le);
    const double n = cum - (it == before.cumulative.end() ? 0 : it->second);
    if (n >= p * total) {
      if (le >= 1e300) return lower;
      return lower + (le - lower) * (p * total - below) / std::max(1.0, n - below);
    }
    lower = le;
    below = n;
  }
  return lower;
}

// Adds the observations between two scrapes (before, after) to `into`.
void AddWindow(PassHistogram* into, const PassHistogram& before, const PassHistogram& after) {
  for (const auto& [le, cum] : after.cumulative) {
    auto it = before.cumulative.find(le);
    into->cumulative[le] += cum - (it == before.cumulative.end() ? 0 : it->second);
  }
  into->count += after.count - before.count;
  into->sum += after.sum - before.sum;
}

// C clients, each submitting its share of `total` requests one at a time; returns every
// latency (ms) and, through `ids`, the job ids in the order they were acknowledged.
// rate 0: closed loop, each client as fast as its answers come. rate > 0: open loop, the
// i-th submission starts on schedule (i / rate seconds in) whatever the answers take, as
// scripts and services submit; a saturating closed loop measures what the CPU left over,
// not what a pass does to a submission. Job names are the request's name plus "-i".
std::vector<double> SubmitConcurrently(const std::string& address, int clients, int total,
                                       const v1::SubmitJobRequest& request,
                                       std::vector<std::pair<std::string, absl::Time>>* ids,
                                       double rate = 0) {
  static std::atomic<int> calls{0};
  const int call = calls++;
  std::mutex mu;
  std::vector<double> latencies;
  std::vector<std::thread> threads;
  const absl::Time begin = absl::Now() + absl::Milliseconds(20);
  const absl::Duration interval = rate > 0 ? absl::Seconds(1) / rate : absl::ZeroDuration();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      grpc::ChannelArguments args;
      args.SetInt("llamafleet.bench.client", call * 1000 + c);  // a connection per client
      auto stub = v1::JobService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
      for (int i = c; i < total; i += clients) {
        if (rate > 0) {
          const absl::Time due = begin + interval * i;
          if (absl::Now() < due) absl::SleepFor(due - absl::Now());
        }
        v1::SubmitJobRequest req = request;
        req.mutable_spec()->set_name(absl::StrCat(request.spec().name(), "-", i));
        v1::SubmitJobResponse resp;
        grpc::ClientContext ctx;
        const absl::Time start = absl::Now();
        const grpc::Status status = stub->SubmitJob(&ctx, req, &resp);
        const absl::Time end = absl::Now();
        std::lock_guard<std::mutex> lock(mu);
        if (!status.ok()) {
          std::fprintf(stderr, "submit failed: %s\n", status.error_message().c_str());
          continue;
        }
        latencies.push_back(absl::ToDoubleMilliseconds(end - start));
        if (ids != nullptr) ids->emplace_back(resp.job().id(), start);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return latencies;
}

// `total` submissions at `rate` per second in all, by 4 clients, named NAME-i.
std::vector<double> SubmitPaced(const std::string& address, double rate, int total,
                                const v1::SubmitJobRequest& request, const std::string& name) {
  v1::SubmitJobRequest named = request;
  named.mutable_spec()->set_name(name);
  return SubmitConcurrently(address, 4, total, named, nullptr, rate);
}

// The coordinator's receipt-to-durable-acknowledgement histogram.
const char kSubmitLatency[] = "llamafleet_submit_latency_seconds";

// p50 and p99 of the coordinator's own submit histogram over two windows (before, after).
void PrintCoordinatorSubmits(const PassHistogram& idle0, const PassHistogram& idle1,
                             const PassHistogram& deep0, const PassHistogram& deep1) {
  std::printf("  the same in the coordinator (receipt to durable acknowledgement, its histogram): "
              "idle p50 %.2f ms p99 %.2f ms; deep p50 %.2f ms p99 %.2f ms\n",
              1000 * HistogramQuantile(idle0, idle1, 0.5), 1000 * HistogramQuantile(idle0, idle1, 0.99),
              1000 * HistogramQuantile(deep0, deep1, 0.5), 1000 * HistogramQuantile(deep0, deep1, 0.99));
}

// A coordinator of the deep-queue mode, in `dir`: its gRPC and HTTP addresses.
struct Coordinator {
  std::unique_ptr<testing::Subprocess> process;
  std::string address, http;
};

absl::StatusOr<Coordinator> StartCoordinator(const testing::TempDir& dir) {
  // The backlog and the gangs are one user's: more than the default per-user limit.
  std::ofstream(dir.path() + "/config.yaml") << "limits: {max_active_jobs_per_user: 0}\n";
  absl::StatusOr<std::unique_ptr<testing::Subprocess>> process = testing::Subprocess::Start(
      testing::CoordinatorArgv({.data_dir = dir.path(),
                                .join_token = "bench",
                                .path_roots = {dir.path(), "/"},
                                // The simulated workers do not heartbeat; the run is longer
                                // than the default. They all say hello at once from one
                                // address: more than the per-address cap.
                                .flags = {"--http-listen", "127.0.0.1:0", "--heartbeat-timeout", "3600",
                                          "--max-unauthenticated-sessions-per-address", "0",
                                          "--max-unauthenticated-sessions", "0"},
                                .config = dir.path() + "/config.yaml",
                                .log_level = "warn"}));
  if (!process.ok()) return process.status();
  Coordinator c;
  c.process = std::move(*process);
  absl::StatusOr<std::string> address = c.process->WaitForListening();
  if (!address.ok()) return address.status();
  absl::StatusOr<std::string> http = c.process->ReadLineWithPrefix("http listening on ", absl::Seconds(10));
  if (!http.ok()) return http.status();
  c.address = *address;
  c.http = *http;
  return c;
}

int RunDeepQueue(int queued, int workers, int gpus, int clients, int gangs, int nodes,
                 int idle_submits, int sequential, double paced_rate, int paced_submits,
                 int paced_blocks) {
  testing::TempDir dir;
  absl::StatusOr<Coordinator> deep = StartCoordinator(dir);
  if (!deep.ok()) {
    std::fprintf(stderr, "cannot start the coordinator: %s\n", deep.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<testing::Subprocess>& coordinator = deep->process;
  const std::string& address = deep->address;
  const std::string& http = deep->http;
  std::printf("dispatch_bench (deep queue): %d queued jobs no worker can take, %d simulated workers x %d GPUs, "
              "%d clients, gangs of %d nodes, synchronous=FULL; load average %s\n",
              queued, workers, gpus, clients, nodes, LoadAverage().c_str());

  auto backlog_spec = ParseJobDocuments(
      "name: backlog\nmodel: {preset: tiny, tokenizer: /t.model}\ndata: {train_path: /d}\n"
      "resources: {nodes: 1, gpus_per_node: 8, instance_type: p5.48xlarge}\n");
  v1::SubmitJobRequest backlog;
  *backlog.mutable_spec() = (*backlog_spec)[0].spec;

  // 1. Idle queue: no workers, nothing queued yet.
  const std::vector<double> idle = SubmitConcurrently(address, clients, idle_submits, backlog, nullptr);
  const PassHistogram s0 = ParsePassHistogram(ScrapeMetrics(http), kSubmitLatency);

  // 2. Fill the backlog in batches, then connect the workers.
  auto stub = v1::JobService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  for (int done = idle_submits; done < queued;) {
    v1::SubmitJobsRequest batch;
    for (int i = 0; i < 1000 && done < queued; ++i, ++done) {
      v1::SubmitJobRequest* r = batch.add_jobs();
      *r = backlog;
      r->mutable_spec()->set_name(absl::StrCat("backlog-", done));
    }
    v1::SubmitJobsResponse resp;
    grpc::ClientContext ctx;
    if (grpc::Status st = stub->SubmitJobs(&ctx, batch, &resp); !st.ok()) {
      std::fprintf(stderr, "backlog batch failed: %s\n", st.error_message().c_str());
      return 1;
    }
  }
  Arrivals arrivals;
  std::vector<std::unique_ptr<FakeWorker>> pool;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < workers; ++i) {
    if (i % 50 == 0) {
      grpc::ChannelArguments args;
      args.SetInt("llamafleet.bench.workers", i);
      channels.push_back(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
    }
    pool.push_back(std::make_unique<FakeWorker>(channels.back(), absl::StrCat("sim-", i), gpus, &arrivals));
  }
  absl::SleepFor(absl::Seconds(3));  // workers registered; a few passes over the backlog

  // 3. Admissions of gangs through the deep queue.
  auto gang_spec = ParseJobDocuments(absl::StrCat(
      "name: gang\npriority: 10\nmodel: {preset: tiny, tokenizer: /t.model}\ndata: {train_path: /d}\n"
      "resources: {nodes: ", nodes, ", gpus_per_node: ", gpus, "}\n"));
  v1::SubmitJobRequest gang;
  *gang.mutable_spec() = (*gang_spec)[0].spec;
  const std::string scrape0 = ScrapeMetrics(http);
  const PassHistogram h0 = ParsePassHistogram(scrape0);
  const PassHistogram b0 = ParsePassHistogram(scrape0, kSubmitLatency);
  std::vector<std::pair<std::string, absl::Time>> submitted;
  const absl::Time first = absl::Now();
  const std::vector<double> busy = SubmitConcurrently(address, clients, gangs, gang, &submitted);
  const PassHistogram b1 =
      ParsePassHistogram(ScrapeMetrics(http), kSubmitLatency);
  absl::Time last = first;
  int admitted = 0;
  {
    std::unique_lock<std::mutex> lock(arrivals.mu);
    arrivals.cv.wait_for(lock, std::chrono::seconds(60), [&] {
      for (const auto& [id, t] : submitted) {
        if (!arrivals.gang_by_job.count(id)) return false;
      }
      return true;
    });
    for (const auto& [id, t] : submitted) {
      auto it = arrivals.gang_by_job.find(id);
      if (it == arrivals.gang_by_job.end()) continue;
      ++admitted;
      last = std::max(last, it->second);
    }
  }
  const double seconds = absl::ToDoubleSeconds(last - first);

  // 4. One at a time: acknowledgement to assignment ≈ one pass over the deep queue.
  const PassHistogram h1 = ParsePassHistogram(ScrapeMetrics(http));
  const double cpu1 = ProcessCpuMicros(coordinator->pid()) / 1e3;
  std::vector<double> ack_to_assign;
  for (int i = 0; i < sequential; ++i) {
    v1::SubmitJobRequest req = gang;
    req.mutable_spec()->set_name(absl::StrCat("single-", i));
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    if (!stub->SubmitJob(&ctx, req, &resp).ok()) return 1;
    const absl::Time acked = absl::Now();
    std::unique_lock<std::mutex> lock(arrivals.mu);
    if (arrivals.cv.wait_for(lock, std::chrono::seconds(5),
                             [&] { return arrivals.gang_by_job.count(resp.job().id()) > 0; })) {
      ack_to_assign.push_back(absl::ToDoubleMilliseconds(arrivals.gang_by_job[resp.job().id()] - acked));
    }
  }
  const double cpu2 = ProcessCpuMicros(coordinator->pid()) / 1e3;
  const PassHistogram h2 = ParsePassHistogram(ScrapeMetrics(http));

  // 5. Paced submissions into the deep queue with the workers connected (each asks for a
  // pass over all of it, so passes run back to back, spaced by their own length) and,
  // alternately, into an idle queue: a fresh coordinator per block, nothing queued, no
  // worker. One block of each at a time, so both sides see the same minutes.
  std::vector<double> idle_paced, deep_paced;
  std::vector<double> idle_block_p99, deep_block_p99;
  PassHistogram idle_coordinator, deep_coordinator;  // receipt-to-ack histograms, pooled
  double passes = 0, pass_seconds = 0, paced_seconds = 0;
  for (int block = 0; block < paced_blocks; ++block) {
    {
      testing::TempDir idle_dir;
      absl::StatusOr<Coordinator> idle_queue = StartCoordinator(idle_dir);
      if (!idle_queue.ok()) {
        std::fprintf(stderr, "cannot start the idle-queue coordinator: %s\n",
                     idle_queue.status().ToString().c_str());
        return 1;
      }
      const std::vector<double> l =
          SubmitPaced(idle_queue->address, paced_rate, paced_submits, backlog, "paced-idle");
      idle_paced.insert(idle_paced.end(), l.begin(), l.end());
      idle_block_p99.push_back(Percentile(l, 0.99));
      AddWindow(&idle_coordinator, PassHistogram{},
                ParsePassHistogram(ScrapeMetrics(idle_queue->http), kSubmitLatency));
      idle_queue->process->Signal(SIGTERM);
      (void)idle_queue->process->Wait(absl::Seconds(30));
    }
    const std::string before = ScrapeMetrics(http);
    const absl::Time start = absl::Now();
    const std::vector<double> l =
        SubmitPaced(address, paced_rate, paced_submits, backlog, absl::StrCat("paced-deep-", block));
    paced_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    const std::string after = ScrapeMetrics(http);
    deep_paced.insert(deep_paced.end(), l.begin(), l.end());
    deep_block_p99.push_back(Percentile(l, 0.99));
    AddWindow(&deep_coordinator, ParsePassHistogram(before, kSubmitLatency),
              ParsePassHistogram(after, kSubmitLatency));
    const PassHistogram p0 = ParsePassHistogram(before), p1 = ParsePassHistogram(after);
    passes += p1.count - p0.count;
    pass_seconds += p1.sum - p0.sum;
  }

  const double idle_p99 = Percentile(idle, 0.99), busy_p99 = Percentile(busy, 0.99);
  std::printf("submit latency, idle queue (%zu submits):        p50 %6.2f ms  p99 %6.2f ms\n",
              idle.size(), Percentile(idle, 0.5), idle_p99);
  std::printf("submit latency, deep queue + passes (%zu submits): p50 %6.2f ms  p99 %6.2f ms  "
              "(p99 ratio %.2fx, target <= 1.5x)\n",
              busy.size(), Percentile(busy, 0.5), busy_p99, idle_p99 > 0 ? busy_p99 / idle_p99 : 0);
  // The coordinator's histogram starts empty, so s0 covers exactly the idle closed loop.
  PrintCoordinatorSubmits(PassHistogram{}, s0, b0, b1);
  std::printf("gang admissions: %d of %d in %.2f s = %.0f/s end to end (target >= 1000/s)\n",
              admitted, gangs, seconds, seconds > 0 ? admitted / seconds : 0);
  std::printf("passes during admissions (coordinator histogram): %.0f, p50 %.2f ms, mean %.2f ms\n",
              h1.count - h0.count, 1000 * HistogramQuantile(h0, h1, 0.5),
              h1.count > h0.count ? 1000 * (h1.sum - h0.sum) / (h1.count - h0.count) : 0);
  std::printf("one job at a time (%zu): acknowledgement to assignment p50 %.2f ms  p90 %.2f ms "
              "(bench's own view of one pass)\n",
              ack_to_assign.size(), Percentile(ack_to_assign, 0.5), Percentile(ack_to_assign, 0.9));
  std::printf("passes meanwhile (coordinator histogram): %.0f, p50 %.2f ms, p90 %.2f ms, mean %.2f ms "
              "(target p50 <= 25 ms)\n",
              h2.count - h1.count, 1000 * HistogramQuantile(h1, h2, 0.5),
              1000 * HistogramQuantile(h1, h2, 0.9),
              h2.count > h1.count ? 1000 * (h2.sum - h1.sum) / (h2.count - h1.count) : 0);
  std::printf("coordinator CPU meanwhile: %.1f ms per pass (everything it did, / passes; an upper "
              "bound of a pass's CPU, independent of how busy the machine is)\n",
              h2.count > h1.count ? (cpu2 - cpu1) / (h2.count - h1.count) : 0);
  const double paced_idle_p99 = Percentile(idle_paced, 0.99);
  const double paced_deep_p99 = Percentile(deep_paced, 0.99);
  auto list = [](const std::vector<double>& v) {
    std::string out;
    for (double x : v) absl::StrAppend(&out, out.empty() ? "" : " ", absl::StrFormat("%.2f", x));
    return out;
  };
  std::printf("paced submits (%.0f/s, %d blocks of %d, alternated):\n", paced_rate, paced_blocks,
              paced_submits);
  std::printf("  idle queue, no pass:   p50 %6.2f ms  p99 %6.2f ms  (p99 by block: %s)\n",
              Percentile(idle_paced, 0.5), paced_idle_p99, list(idle_block_p99).c_str());
  std::printf("  deep queue + passes:   p50 %6.2f ms  p99 %6.2f ms  (p99 by block: %s)\n",
              Percentile(deep_paced, 0.5), paced_deep_p99, list(deep_block_p99).c_str());
  std::printf("  p99 ratio %.2fx (target <= 1.5x); %.0f passes during the deep blocks, running "
              "%.0f%% of the time\n",
              paced_idle_p99 > 0 ? paced_deep_p99 / paced_idle_p99 : 0, passes,
              paced_seconds > 0 ? 100 * pass_seconds / paced_seconds : 0);
  PrintCoordinatorSubmits(PassHistogram{}, idle_coordinator, PassHistogram{}, deep_coordinator);
  std::fflush(stdout);
  pool.clear();
  coordinator->Signal(SIGTERM);
  (void)coordinator->Wait(absl::Seconds(30));
  return 0;
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
  int queued = 0, clients = 16, gangs = 2000, nodes = 2, idle_submits = 2000, sequential = 100;
  app.add_option("--queued", queued, "deep-queue mode: queued jobs no worker can take");
  app.add_option("--clients", clients, "deep-queue mode: concurrent submitters");
  app.add_option("--gangs", gangs, "deep-queue mode: gang jobs admitted through the deep queue");
  app.add_option("--nodes", nodes, "deep-queue mode: nodes per gang");
  app.add_option("--idle-submits", idle_submits, "deep-queue mode: submissions timed on the idle queue");
  app.add_option("--sequential", sequential, "deep-queue mode: jobs submitted one at a time at the end");
  double paced_rate = 200;
  int paced_submits = 1000, paced_blocks = 4;
  app.add_option("--paced-rate", paced_rate, "deep-queue mode: submissions/s of the paced (open-loop) phases");
  app.add_option("--paced-submits", paced_submits, "deep-queue mode: submissions in each paced block");
  app.add_option("--paced-blocks", paced_blocks,
                 "deep-queue mode: paced blocks into each queue (idle, deep), alternated");
  CLI11_PARSE(app, argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (queued > 0) {
    return RunDeepQueue(queued, workers, gpus, clients, gangs, nodes, idle_submits, sequential,
                        paced_rate, paced_submits, paced_blocks);
  }

  testing::TempDir dir;
  // The simulated workers all say hello at once from one address: no cap on those waiting.
  auto coordinator = testing::Subprocess::Start(testing::CoordinatorArgv(
      {.data_dir = dir.path(),
       .join_token = "bench",
       .path_roots = {dir.path(), "/"},
       .flags = {"--max-unauthenticated-sessions-per-address", "0", "--max-unauthenticated-sessions", "0"},
       .log_level = "warn"}));
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
