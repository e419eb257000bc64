#ifndef LLAMAFLEET_TESTS_SECURITY_SECURITY_API_H_
#define LLAMAFLEET_TESTS_SECURITY_SECURITY_API_H_

// Tenant isolation, API side: the attacks a user (or someone without a token) can make through the
// coordinator's API, each against a real llamafleet-coordinator process over real gRPC and
// HTTP sockets, asserting the refusal, that its message names the field, and that nothing
// changed in the database or on disk.
//
// The coordinator runs with tokens on, one path root (ROOT) and a config file that
// configures a queue, a per-user active-job limit, a per-role priority maximum and the Unix
// identities of alice and bob (uids kAliceUid, kBobUid). No workers join: submitted jobs
// stay QUEUED, which is all these checks need; a test that needs what a worker would have
// done makes it itself (MakeOwnedBy: a job directory made as its identity; RecordCheckpoint:
// a checkpoint reported).
//
// The fixture shared by security_api_test.cc and job_deletion_test.cc. Test code only:
// each test file includes it once.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "storage/sqlite.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/spec_builder.h"

namespace llamafleet {
namespace {


namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using ::llamafleet::testing::BinaryPath;
using ::llamafleet::testing::ReadFile;
using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::Subprocess;
using ::llamafleet::testing::TempDir;

constexpr int kMaxActive = 3;
// The job identities the config gives alice and bob.
constexpr uid_t kAliceUid = 2001;
constexpr uid_t kBobUid = 2002;

// Peak resident set of a process, from /proc/PID/status (VmHWM), in bytes.
inline int64_t PeakRss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmHWM:")) {
      int64_t kb = 0;
      std::string digits;
      for (char c : line) {
        if (absl::ascii_isdigit(static_cast<unsigned char>(c))) digits.push_back(c);
      }
      if (absl::SimpleAtoi(digits, &kb)) return kb * 1024;
    }
  }
  return -1;
}

struct HttpReply {
  int status = 0;
  std::string body;
  absl::Duration took;
};

inline HttpReply HttpPost(const std::string& address, const std::string& target, const std::string& body,
                   const std::string& content_type, const std::string& token) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  const size_t colon = address.rfind(':');
  net::ip::tcp::resolver resolver(ioc);
  stream.connect(resolver.resolve(address.substr(0, colon), address.substr(colon + 1)));
  bhttp::request<bhttp::string_body> req(bhttp::verb::post, target, 11);
  req.set(bhttp::field::host, "localhost");
  req.set(bhttp::field::content_type, content_type);
  if (!token.empty()) req.set(bhttp::field::authorization, "Bearer " + token);
  req.body() = body;
  req.prepare_payload();
  const absl::Time start = absl::Now();
  HttpReply reply;
  beast::error_code ec;
  bhttp::write(stream, req, ec);  // the server may answer (and stop reading) first
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  bhttp::read(stream, buffer, parser, ec);
  reply.took = absl::Now() - start;
  if (ec) return reply;
  reply.status = parser.get().result_int();
  reply.body = parser.get().body();
  return reply;
}

// The "billion laughs" in YAML: ten levels of anchors, each ten aliases of the one below:
// 10^10 strings once expanded, about 1 KB as text, repeated to ~155 KB of anchors.
inline std::string AliasBomb() {
  std::string doc = "a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  for (int i = 1; i < 10; ++i) {
    doc += absl::StrCat("a", i, ": &a", i, " [");
    for (int j = 0; j < 10; ++j) absl::StrAppend(&doc, j ? "," : "", "*a", i - 1);
    doc += "]\n";
  }
  std::string out;
  for (int copy = 0; out.size() < 155 * 1024; ++copy) {
    out += absl::StrReplaceAll(doc, {{"a", absl::StrCat("c", copy, "a")}});
  }
  return out;
}

class SecurityApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/root";
    std::filesystem::create_directories(root_);
    data_dir_ = dir_.path() + "/coord";
    config_ = dir_.path() + "/coordinator.yaml";
    std::ofstream(config_) << "paths: {roots: [" << root_ << "]}\n"
                           << "queues: {research: {gpu_quota: 4}}\n"
                           << "limits:\n  max_active_jobs_per_user: " << kMaxActive
                           << "\n  max_priority: {user: 100}\n"
                           << "users:\n  alice: {uid: " << kAliceUid << ", gid: " << kAliceUid
                           << "}\n"
                           << "  bob: {uid: " << kBobUid << ", gid: " << kBobUid << "}\n";
    for (const auto& [user, role] : std::vector<std::pair<std::string, std::string>>{
             {"alice", "user"}, {"bob", "user"}, {"root", "admin"}}) {
      absl::StatusOr<testing::CommandResult> r =
          RunCommand({BinaryPath("llamafleet-coordinator"), "token", "create", "--data-dir",
                      data_dir_, "--user", user, "--role", role});
      ASSERT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.status().ToString());
      tokens_[user] = std::string(absl::StripAsciiWhitespace(r->out));
    }
    Start();
  }

  void Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {"--http-listen", "127.0.0.1:0", "--config", config_,
                                      "--log-level", "warn"};
    // Specs here name inputs nobody made: the storage checks of ownership and claims are
    // what these tests exercise.
    flags.push_back("--no-check-paths");
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto c = ::llamafleet::testing::StartCoordinator({.data_dir = data_dir_,
                                                      .auth = true,
                                                      .join_token = "secret",
                                                      .flags = flags,
                                                      .log_path = dir_.path() + "/coordinator.log"});
    ASSERT_TRUE(c.ok()) << c.status() << ReadFile(dir_.path() + "/coordinator.log");
    coordinator_ = std::move(c->process);
    address_ = c->address;
    absl::StatusOr<std::string> http = coordinator_->ReadLineWithPrefix("http listening on ", absl::Seconds(10));
    ASSERT_TRUE(http.ok()) << http.status();
    http_address_ = *http;
    stub_ = v1::JobService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  void Stop() {
    coordinator_->Signal(SIGTERM);
    ASSERT_TRUE(coordinator_->Wait(absl::Seconds(20)).ok());
    coordinator_.reset();
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& who) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!tokens_[who].empty()) ctx->AddMetadata("authorization", "Bearer " + tokens_[who]);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return ctx;
  }

  // A job spec whose paths are all inside the root; `extra` YAML lines override.
  v1::JobSpec Spec(const std::string& extra = "") {
    return testing::SpecBuilder("j")
        .Tokenizer("")
        .TrainPath(root_ + "/data/train.jsonl")
        .Format(v1::TOKENS)
        .Yaml("resources: {nodes: 64}\n")
        .Yaml(extra)
        .Build();
  }

  grpc::Status Submit(const std::string& who, const v1::JobSpec& spec, std::string* id = nullptr) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    grpc::Status s = stub_->SubmitJob(Context(who).get(), req, &resp);
    if (id != nullptr) *id = resp.job().id();
    return s;
  }

  std::vector<v1::Job> Jobs() {
    v1::ListJobsRequest req;
    req.set_page_size(1000);
    req.set_view(v1::JOB_VIEW_FULL);  // the stored specs, paths included
    v1::ListJobsResponse resp;
    grpc::Status s = stub_->ListJobs(Context("root").get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.jobs().begin(), resp.jobs().end()};
  }

  // Makes `dir` (missing parents as this process's user) and gives it to `user`'s job
  // identity, as that user's worker makes a job's directory. False where this process may
  // not (not root): the caller skips.
  bool MakeOwnedBy(const std::string& dir, const std::string& user) {
    std::filesystem::create_directories(dir);
    const uid_t uid = user == "alice" ? kAliceUid : kBobUid;
    return ::chown(dir.c_str(), uid, uid) == 0;
  }

  // Records a checkpoint of job `id` at `path` in the coordinator's database, as the
  // coordinator does when a worker reports one. Only while the coordinator is stopped.
  void RecordCheckpoint(const std::string& id, const std::string& path) {
    ASSERT_EQ(coordinator_, nullptr) << "stop the coordinator first";
    absl::StatusOr<std::unique_ptr<sqlite::Connection>> db = sqlite::Connection::Open(
        data_dir_ + "/coordinator.db", /*create=*/false, /*read_only=*/false);
    ASSERT_TRUE(db.ok()) << db.status();
    absl::StatusOr<sqlite::Statement> insert = (*db)->Prepare(
        "INSERT INTO checkpoints (job_id, step, attempt, path, bytes, manifest_sha256, loss, "
        "time_us) "
        "VALUES (?1, 4, 1, ?2, 1, '', 0, 0)");
    ASSERT_TRUE(insert.ok()) << insert.status();
    insert->Bind(1, static_cast<int64_t>(std::stoll(id))).Bind(2, path);
    ASSERT_TRUE(insert->Run().ok());
  }

  // The field violations carried in a status's details.
  static std::vector<std::string> Fields(const grpc::Status& s) {
    v1::ErrorDetails details;
    std::vector<std::string> out;
    if (details.ParseFromString(s.error_details())) {
      for (const v1::FieldViolation& v : details.field_violations()) out.push_back(v.field());
    }
    return out;
  }

  TempDir dir_;
  std::string root_, data_dir_, config_;
  std::map<std::string, std::string> tokens_;
  std::unique_ptr<Subprocess> coordinator_;
  std::string address_, http_address_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace
}  // namespace llamafleet

#endif  // LLAMAFLEET_TESTS_SECURITY_SECURITY_API_H_
