// Bounded resources around trainer logs: chunks bounded in bytes, tail by block reads,
// open descriptors capped and closed with their attempt; and, with the real coordinator
// binary and fake workers over the real WorkerService protocol, 1,000 finished two-rank
// jobs leave the coordinator under 100 descriptors (printed with its RSS).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "server/log_store.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using testing::BinaryPath;
using testing::Subprocess;
using testing::TempDir;

TEST(LogStoreTest, ChunksAreBoundedInBytesAndTailReadsBlocks) {
  TempDir dir;
  LogStore logs(dir.path(), int64_t{64} << 20);
  // 1200 lines of 5 KB: the portal's log view once broke on these (one 6 MB chunk).
  std::vector<std::string> lines;
  for (int i = 0; i < 1200; ++i) lines.push_back(absl::StrCat(i, ":", std::string(5000, 'x')));
  for (size_t i = 0; i < lines.size(); i += 100) {
    logs.Append("7-1-0", 0, {lines.begin() + i, lines.begin() + i + 100}, 0);
  }
  logs.Flush();
  const std::vector<LogStore::Source> sources = logs.Sources(7, 0);
  ASSERT_EQ(sources.size(), 1u);
  LogStore::Cursor c;
  std::vector<std::string> read;
  int chunks = 0;
  while (true) {
    std::vector<std::string> chunk = LogStore::ReadLines(sources[0].path, &c);
    if (chunk.empty()) break;
    ++chunks;
    int64_t bytes = 0;
    for (const std::string& l : chunk) bytes += static_cast<int64_t>(l.size());
    EXPECT_LE(bytes, LogStore::kMaxChunkBytes);
    read.insert(read.end(), chunk.begin(), chunk.end());
  }
  EXPECT_EQ(read, lines);
  EXPECT_GE(chunks, 6);
  // The last 3 lines, found by reading backwards in blocks.
  LogStore::Cursor tail;
  tail.offset = LogStore::TailOffset(sources[0].path, 3);
  std::vector<std::string> last = LogStore::ReadLines(sources[0].path, &tail);
  EXPECT_EQ(last, std::vector<std::string>(lines.end() - 3, lines.end()));
  EXPECT_EQ(LogStore::TailOffset(sources[0].path, 5000), 0);

  // A line longer than the bound (written before lines were cut) comes back in pieces.
  const std::string big_path = dir.path() + "/big.log";
  std::ofstream(big_path) << "a\n" << std::string(3 << 20, 'y') << "\nz\n";
  LogStore::Cursor b;
  std::vector<std::string> first = LogStore::ReadLines(big_path, &b);
  EXPECT_EQ(first, std::vector<std::string>{"a"});
  int64_t total = 0;
  for (int i = 0; i < 10; ++i) {
    std::vector<std::string> piece = LogStore::ReadLines(big_path, &b);
    if (piece.empty()) break;
    for (const std::string& l : piece) {
      EXPECT_LE(static_cast<int64_t>(l.size()), LogStore::kMaxChunkBytes);
      if (l != "z") total += static_cast<int64_t>(l.size());
    }
  }
  EXPECT_EQ(total, 3 << 20);

  // Lines are cut at kMaxLineBytes when appended.
  logs.Append("8-1-0", 0, {std::string(LogStore::kMaxLineBytes + 10, 'q')}, 0);
  logs.Flush();
  LogStore::Cursor q;
  std::vector<std::string> cut = LogStore::ReadLines(logs.Sources(8, 1)[0].path, &q);
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_LT(cut[0].size(), static_cast<size_t>(LogStore::kMaxLineBytes + 100));
  EXPECT_NE(cut[0].find("line cut at"), std::string::npos);
}

TEST(LogStoreTest, OpenFilesAreCappedAndClosedWithTheirAttempt) {
  TempDir dir;
  LogStore logs(dir.path(), 1 << 20, /*max_open_files=*/4);
  for (int job = 1; job <= 10; ++job) {
    for (int rank = 0; rank < 2; ++rank) logs.Append(absl::StrCat(job, "-1-0"), rank, {"hello"}, 0);
  }
  logs.Flush();
  EXPECT_EQ(logs.OpenFiles(), 4);
  logs.CloseAttempt(10, 1);
  logs.CloseAttempt(9, 1);
  logs.Flush();
  EXPECT_EQ(logs.OpenFiles(), 0);
  // A file closed by the cap is reopened and appended to, not truncated.
  logs.Append("1-1-0", 0, {"again"}, 3);
  logs.Flush();
  std::ifstream in(logs.Sources(1, 1)[0].path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "hello\n[llamafleet: 3 lines dropped: the relay or the coordinator's log queue was full]\nagain\n");
}

// A worker over the real protocol with `slots` CPU ranks that runs every task it is
// given at once: RUNNING, a few log lines per rank, SUCCEEDED.
class InstantWorker {
 public:
  InstantWorker(const std::string& address, const std::string& name, int slots)
      : stub_(v1::WorkerService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
    stream_ = stub_->Session(&context_);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_name(name);
    hello.mutable_hello()->set_join_token("secret");
    hello.mutable_hello()->mutable_inventory()->set_address("127.0.0.1");
    hello.mutable_hello()->mutable_inventory()->set_cpu_ranks(slots);
    stream_->Write(hello);
    reader_ = std::thread([this] { Run(); });
  }
  ~InstantWorker() {
    context_.TryCancel();
    reader_.join();
  }
  int finished() const { return finished_.load(); }

 private:
  void Run() {
    v1::CoordinatorMessage m;
    while (stream_->Read(&m)) {
      if (!m.has_assign()) continue;
      const v1::TaskSpec& t = m.assign().task();
      v1::WorkerMessage out;
      out.mutable_task_status()->set_task_id(t.task_id());
      out.mutable_task_status()->set_state(v1::TASK_RUNNING);
      stream_->Write(out);
      out.Clear();
      v1::LogLines* logs = out.mutable_logs();
      logs->set_task_id(t.task_id());
      logs->set_rank(t.node_rank());
      logs->set_stream("stderr");
      for (int i = 0; i < 5; ++i) logs->add_lines(absl::StrCat("step ", i, " loss 1.0"));
      stream_->Write(out);
      if (t.task_id() == "1-1-0") {
        // 1200 lines of 5 KB (what once broke the portal's log view), in messages that
        // fit the 4 MiB limit.
        for (int batch = 0; batch < 12; ++batch) {
          logs->clear_lines();
          for (int i = 0; i < 100; ++i) logs->add_lines(std::string(5000, 'a' + batch));
          stream_->Write(out);
        }
      }
      out.Clear();
      v1::TaskStatus* done = out.mutable_task_status();
      done->set_task_id(t.task_id());
      done->set_state(v1::TASK_SUCCEEDED);
      done->add_exits()->set_rank(t.node_rank());
      stream_->Write(out);
      ++finished_;
    }
  }

  std::unique_ptr<v1::WorkerService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream_;
  std::thread reader_;
  std::atomic<int> finished_{0};
};

int CountDescriptors(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

int64_t ResidentKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    int64_t kib = 0;
    if (line.rfind("VmRSS:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kib)) {
      return kib;
    }
  }
  return -1;
}

TEST(CoordinatorLogBoundsTest, ThousandFinishedTwoRankJobsLeaveFewDescriptors) {
  TempDir dir;
  auto c = testing::StartCoordinator({.data_dir = dir.path() + "/coord",
                                      .join_token = "secret",
                                      .path_roots = {dir.path()},
                                      .flags = {"--synchronous", "normal", "--log-level", "warn"},
                                      .log_path = dir.path() + "/coordinator.log"});
  ASSERT_TRUE(c.ok()) << c.status();
  std::unique_ptr<Subprocess> coordinator = std::move(c->process);
  const std::string address = c->address;
  auto jobs = v1::JobService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  const int baseline = CountDescriptors(coordinator->pid());

  InstantWorker w0(address, "w0", 16), w1(address, "w1", 16);
  const v1::JobSpec spec = testing::SpecBuilder("fd")
                               .Tokenizer(dir.path() + "/t/tokenizer.model")
                               .TrainPath(dir.path() + "/d.jsonl")
                               .Nodes(2)
                               .Build();
  constexpr int kJobs = 1000;
  const absl::Time start = absl::Now();
  for (int batch = 0; batch < kJobs / 100; ++batch) {
    v1::SubmitJobsRequest req;
    for (int i = 0; i < 100; ++i) *req.add_jobs()->mutable_spec() = spec;
    v1::SubmitJobsResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = jobs->SubmitJobs(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  int succeeded = 0;
  testing::WaitFor(
      [&] {
        v1::ListJobsRequest req;
        req.add_states(v1::SUCCEEDED);
        req.set_page_size(1);
        v1::ListJobsResponse resp;
        grpc::ClientContext ctx;
        if (jobs->ListJobs(&ctx, req, &resp).ok()) succeeded = static_cast<int>(resp.total_size());
        return succeeded >= kJobs;
      },
      absl::Minutes(4), absl::Milliseconds(200));
  ASSERT_EQ(succeeded, kJobs) << "finished " << w0.finished() + w1.finished() << " tasks";
  const absl::Duration took = absl::Now() - start;
  // Attempts are released (and their files closed) right after the last status; give
  // the loop a moment.
  int fds = 0;
  testing::WaitFor([&] { return (fds = CountDescriptors(coordinator->pid())) < 100; }, absl::Seconds(5),
                   absl::Milliseconds(100));
  const int64_t rss = ResidentKiB(coordinator->pid());
  std::cout << "coordinator after " << kJobs << " finished two-rank jobs (" << 2 * kJobs
            << " rank log files) in " << absl::FormatDuration(took) << ": " << fds
            << " descriptors (baseline " << baseline << "), RSS " << rss / 1024 << " MiB\n";
  EXPECT_LT(fds, 100);
  // Every chunk of StreamJobLogs (which HTTP and SSE relay) stays within 1 MiB.
  {
    v1::StreamJobLogsRequest req;
    req.set_job_id("1");
    req.set_rank(0);
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::LogChunk>> reader = jobs->StreamJobLogs(&ctx, req);
    v1::LogChunk chunk;
    int lines = 0, chunks = 0;
    size_t largest = 0;
    while (reader->Read(&chunk)) {
      ++chunks;
      lines += chunk.lines_size();
      largest = std::max(largest, chunk.ByteSizeLong());
    }
    grpc::Status s = reader->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(lines, 1205);
    EXPECT_LE(largest, static_cast<size_t>(1 << 20));
    std::cout << "StreamJobLogs: 1205 lines (1200 of 5 KB) in " << chunks
              << " chunks, largest " << largest << " bytes\n";
  }
  int log_files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() + "/coord/logs")) {
    if (e.path().extension() == ".log") ++log_files;
  }
  EXPECT_EQ(log_files, 2 * kJobs);
}

}  // namespace
}  // namespace llamafleet
