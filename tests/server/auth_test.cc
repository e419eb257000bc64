// Authentication and authorization over real gRPC: every role against every JobService
// and client WorkerService call, refusals that change nothing, revocation taking effect
// at once, the token commands of the real binary, and field violations as status details.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <functional>
#include <set>
#include <map>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "server/auth.h"
#include "server/coordinator.h"
#include "storage/job_store.h"
#include "storage/sqlite.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/in_process.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::TempDir;

// Tokens need no tokenizer; 64 nodes are never schedulable, so the job stays QUEUED.
v1::JobSpec Spec(const std::string& name) {
  v1::JobSpec spec = testing::SpecBuilder(name).Tokenizer("").Format(v1::TOKENS).Build();
  spec.mutable_resources()->set_nodes(64);
  return spec;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options = testing::InProcessOptions(dir_.path());
    options.auth_enabled = true;
    coordinator_ = testing::StartInProcess(options);
    ASSERT_NE(coordinator_, nullptr);
    auto channel = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
    jobs_ = v1::JobService::NewStub(channel);
    workers_ = v1::WorkerService::NewStub(channel);
    for (auto [user, role] : std::vector<std::pair<std::string, v1::Role>>{
             {"vera", v1::VIEWER}, {"alice", v1::USER}, {"bob", v1::USER}, {"root", v1::ADMIN}}) {
      absl::StatusOr<std::string> token = CreateApiToken(coordinator_->store(), user, role);
      ASSERT_TRUE(token.ok()) << token.status();
      tokens_[user] = *token;
    }
    tokens_["nobody"] = "";
    tokens_["forger"] = "lft_0000000000000000000000000000000000000000000000000000000000000000";
  }

  int64_t TokenId(const std::string& user) {
    absl::StatusOr<std::vector<ApiTokenRecord>> list = ListApiTokens(coordinator_->store());
    EXPECT_TRUE(list.ok()) << list.status();
    for (const auto& t : list.ok() ? *list : std::vector<ApiTokenRecord>{}) {
      if (t.user == user) return t.id;
    }
    ADD_FAILURE() << "no token for " << user;
    return 0;
  }

  std::unique_ptr<grpc::ClientContext> Context(const std::string& who) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!tokens_[who].empty()) ctx->AddMetadata("authorization", "Bearer " + tokens_[who]);
    // Ignored when authentication is on: it must not let anyone pose as someone else.
    ctx->AddMetadata("x-llamafleet-user", "root");
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return ctx;
  }

  std::string SubmitAs(const std::string& who, const std::string& name) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(name);
    v1::SubmitJobResponse resp;
    grpc::Status s = jobs_->SubmitJob(Context(who).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << who << ": " << s.error_message();
    return resp.job().id();
  }

  v1::Job Get(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(jobs_->GetJob(Context("root").get(), req, &job).ok());
    return job;
  }

  TempDir dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::map<std::string, std::string> tokens_;
};

TEST_F(AuthTest, EveryRoleAgainstEveryOperation) {
  const std::string alices = SubmitAs("alice", "alices-job");
  using Op = std::function<grpc::StatusCode(const std::string& who)>;
  auto code = [](const grpc::Status& s) { return s.error_code(); };
  std::vector<std::pair<std::string, Op>> ops = {
      {"SubmitJob",
       [&](const std::string& who) {
         v1::SubmitJobRequest req;
         *req.mutable_spec() = Spec("m");
         v1::SubmitJobResponse resp;
         return code(jobs_->SubmitJob(Context(who).get(), req, &resp));
       }},
      {"SubmitJobs",
       [&](const std::string& who) {
         v1::SubmitJobsRequest req;
         *req.add_jobs()->mutable_spec() = Spec("m1");
         *req.add_jobs()->mutable_spec() = Spec("m2");
         v1::SubmitJobsResponse resp;
         return code(jobs_->SubmitJobs(Context(who).get(), req, &resp));
       }},
      {"SubmitJob dry run",
       [&](const std::string& who) {
         v1::SubmitJobRequest req;
         *req.mutable_spec() = Spec("m");
         req.set_dry_run(true);
         v1::SubmitJobResponse resp;
         return code(jobs_->SubmitJob(Context(who).get(), req, &resp));
       }},
      {"GetJob",
       [&](const std::string& who) {
         v1::GetJobRequest req;
         req.set_job_id(alices);
         v1::Job resp;
         return code(jobs_->GetJob(Context(who).get(), req, &resp));
       }},
      {"ListJobs",
       [&](const std::string& who) {
         v1::ListJobsResponse resp;
         return code(jobs_->ListJobs(Context(who).get(), v1::ListJobsRequest(), &resp));
       }},
      {"GetJobEvents",
       [&](const std::string& who) {
         v1::GetJobEventsRequest req;
         req.set_job_id(alices);
         v1::GetJobEventsResponse resp;
         return code(jobs_->GetJobEvents(Context(who).get(), req, &resp));
       }},
      {"WatchJob",
       [&](const std::string& who) {
         v1::WatchJobRequest req;
         req.set_job_id(alices);
         auto ctx = Context(who);
         ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
         auto reader = jobs_->WatchJob(ctx.get(), req);
         v1::WatchJobResponse r;
         while (reader->Read(&r)) {
         }
         grpc::Status s = reader->Finish();
         // An allowed watch of a QUEUED job runs until its deadline.
         return s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? grpc::StatusCode::OK
                                                                       : s.error_code();
       }},
      {"StreamJobLogs",
       [&](const std::string& who) {
         v1::StreamJobLogsRequest req;
         req.set_job_id(alices);
         req.set_rank(-1);
         auto ctx = Context(who);
         auto reader = jobs_->StreamJobLogs(ctx.get(), req);
         v1::LogChunk r;
         while (reader->Read(&r)) {
         }
         return code(reader->Finish());
       }},
      {"ListCheckpoints",
       [&](const std::string& who) {
         v1::ListCheckpointsRequest req;
         req.set_job_id(alices);
         v1::ListCheckpointsResponse resp;
         return code(jobs_->ListCheckpoints(Context(who).get(), req, &resp));
       }},
      {"ListAttempts",
       [&](const std::string& who) {
         v1::ListAttemptsRequest req;
         req.set_job_id(alices);
         v1::ListAttemptsResponse resp;
         return code(jobs_->ListAttempts(Context(who).get(), req, &resp));
       }},
      {"GetJobMetrics",
       [&](const std::string& who) {
         v1::GetJobMetricsRequest req;
         req.set_job_id(alices);
         v1::GetJobMetricsResponse resp;
         return code(jobs_->GetJobMetrics(Context(who).get(), req, &resp));
       }},
      {"ListQueues",
       [&](const std::string& who) {
         v1::ListQueuesResponse resp;
         return code(jobs_->ListQueues(Context(who).get(), v1::ListQueuesRequest(), &resp));
       }},
      {"GetUsage",
       [&](const std::string& who) {
         v1::GetUsageResponse resp;
         return code(jobs_->GetUsage(Context(who).get(), v1::GetUsageRequest(), &resp));
       }},
      {"WhoAmI",
       [&](const std::string& who) {
         v1::WhoAmIResponse resp;
         return code(jobs_->WhoAmI(Context(who).get(), v1::WhoAmIRequest(), &resp));
       }},
      {"ListWorkers",
       [&](const std::string& who) {
         v1::ListWorkersResponse resp;
         return code(workers_->ListWorkers(Context(who).get(), v1::ListWorkersRequest(), &resp));
       }},
  };
  const grpc::StatusCode kOk = grpc::StatusCode::OK, kDenied = grpc::StatusCode::PERMISSION_DENIED,
                         kUnauth = grpc::StatusCode::UNAUTHENTICATED;
  // Expected outcome per caller: nobody/forger are refused everything; the viewer reads;
  // users and the admin also submit.
  const std::map<std::string, std::map<std::string, grpc::StatusCode>> writes = {
      {"vera", {{"SubmitJob", kDenied}, {"SubmitJobs", kDenied}, {"SubmitJob dry run", kDenied}}},
      {"alice", {}},
      {"bob", {}},
      {"root", {}}};
  for (const std::string who : {"nobody", "forger", "vera", "alice", "bob", "root"}) {
    for (const auto& [name, op] : ops) {
      grpc::StatusCode want = kOk;
      if (who == "nobody" || who == "forger") {
        want = kUnauth;
      } else if (auto w = writes.at(who).find(name); w != writes.at(who).end()) {
        want = w->second;
      }
      EXPECT_EQ(op(who), want) << who << " " << name;
    }
  }

  // Cancel: own job yes, someone else's job no (unless admin); a viewer never.
  const std::map<std::string, grpc::StatusCode> cancel_alices = {
      {"nobody", kUnauth}, {"forger", kUnauth}, {"vera", kDenied}, {"bob", kDenied}};
  for (const auto& [who, want] : cancel_alices) {
    const v1::Job before = Get(alices);
    v1::CancelJobRequest req;
    req.set_job_id(alices);
    v1::CancelJobResponse resp;
    grpc::Status s = jobs_->CancelJob(Context(who).get(), req, &resp);
    EXPECT_EQ(s.error_code(), want) << who << ": " << s.error_message();
    // The refusal changed nothing: same state, no new event.
    const v1::Job after = Get(alices);
    EXPECT_EQ(after.state(), v1::QUEUED);
    EXPECT_EQ(after.last_event_seq(), before.last_event_seq());
    if (who == "bob") {
      EXPECT_NE(s.error_message().find("owned by alice"), std::string::npos) << s.error_message();
    }
  }
  for (const std::string who : {"alice", "root"}) {
    const std::string id = SubmitAs("alice", "to-cancel-by-" + who);
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::CancelJobResponse resp;
    grpc::Status s = jobs_->CancelJob(Context(who).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << who << ": " << s.error_message();
    EXPECT_EQ(resp.job().state(), v1::CANCELLED);
    EXPECT_NE(resp.job().status_reason().find(who), std::string::npos) << resp.job().status_reason();
  }
  // A user cannot cancel a job that does not exist either way; it reads NOT_FOUND.
  v1::CancelJobRequest missing;
  missing.set_job_id("999999");
  v1::CancelJobResponse resp;
  EXPECT_EQ(jobs_->CancelJob(Context("bob").get(), missing, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(AuthTest, RefusedSubmissionsStoreNothingAndOwnerIsTheTokensUser) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec("x");
  v1::SubmitJobResponse resp;
  EXPECT_EQ(jobs_->SubmitJob(Context("vera").get(), req, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(jobs_->SubmitJob(Context("nobody").get(), req, &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(Context("root").get(), v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.total_size(), 0);
  // x-llamafleet-user says "root"; the token says alice, and the token wins.
  const std::string id = SubmitAs("alice", "mine");
  EXPECT_EQ(Get(id).owner(), "alice");
}

TEST_F(AuthTest, WhoAmINamesTheTokensUserAndRole) {
  v1::WhoAmIResponse resp;
  ASSERT_TRUE(jobs_->WhoAmI(Context("vera").get(), v1::WhoAmIRequest(), &resp).ok());
  EXPECT_EQ(resp.user(), "vera");
  EXPECT_EQ(resp.role(), v1::VIEWER);
  EXPECT_TRUE(resp.auth_enabled());
  grpc::Status s = jobs_->WhoAmI(Context("nobody").get(), v1::WhoAmIRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("token create"), std::string::npos) << s.error_message();
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata("authorization", "Basic dXNlcjpwYXNz");
  s = jobs_->WhoAmI(ctx.get(), v1::WhoAmIRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("Bearer"), std::string::npos) << s.error_message();
}

TEST_F(AuthTest, RevokedTokenIsRefusedAtOnce) {
  const int64_t bob = TokenId("bob");
  ASSERT_GT(bob, 0);
  v1::WhoAmIResponse resp;
  ASSERT_TRUE(jobs_->WhoAmI(Context("bob").get(), v1::WhoAmIRequest(), &resp).ok());
  ASSERT_TRUE(RevokeApiToken(coordinator_->store(), bob).ok());
  EXPECT_EQ(jobs_->WhoAmI(Context("bob").get(), v1::WhoAmIRequest(), &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RevokeApiToken(coordinator_->store(), 12345).code(), absl::StatusCode::kNotFound);
}

// Revoked offline, by the real command in another process while the coordinator runs:
// refused on the very next call (nothing remembers a token between calls).
TEST_F(AuthTest, RevokedOfflineByTheTokenCommandIsRefusedOnTheNextCall) {
  v1::WhoAmIResponse resp;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(jobs_->WhoAmI(Context("alice").get(), v1::WhoAmIRequest(), &resp).ok());
  }
  absl::StatusOr<testing::CommandResult> r = testing::RunCommand(
      {testing::BinaryPath("llamafleet-coordinator"), "token", "revoke", "--data-dir", dir_.path(),
       "--id", std::to_string(TokenId("alice"))});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  grpc::Status s = jobs_->WhoAmI(Context("alice").get(), v1::WhoAmIRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  // Another user's token is untouched.
  EXPECT_TRUE(jobs_->WhoAmI(Context("bob").get(), v1::WhoAmIRequest(), &resp).ok());
  // No side file beside the database carries token changes.
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/coordinator.db-tokens"));
}

// Revoked by SQL typed into the database: refused on the next call too.
TEST_F(AuthTest, RevokedBySqlIsRefusedOnTheNextCall) {
  v1::WhoAmIResponse resp;
  ASSERT_TRUE(jobs_->WhoAmI(Context("bob").get(), v1::WhoAmIRequest(), &resp).ok());
  {
    auto conn = sqlite::Connection::Open(dir_.path() + "/coordinator.db", false, false);
    ASSERT_TRUE(conn.ok()) << conn.status();
    ASSERT_TRUE((*conn)->Exec("PRAGMA busy_timeout=5000").ok());
    ASSERT_TRUE((*conn)->Exec(absl::StrCat("UPDATE api_tokens SET revoked = 1 WHERE id = ",
                                           TokenId("bob")))
                    .ok());
  }
  grpc::Status s = jobs_->WhoAmI(Context("bob").get(), v1::WhoAmIRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
}

// The per-call token check is one lookup in token_sha256's index, and cheap: it prints
// the mean time of one check on the coordinator's store (the bound is loose, for slow CI).
TEST_F(AuthTest, TokenLookupIsOneIndexedQueryAndCheap) {
  {
    auto conn = sqlite::Connection::Open(dir_.path() + "/coordinator.db", false, false);
    ASSERT_TRUE(conn.ok()) << conn.status();
    absl::StatusOr<sqlite::Statement> plan = (*conn)->Prepare(
        "EXPLAIN QUERY PLAN SELECT user, role FROM api_tokens WHERE token_sha256 = ?1 AND "
        "revoked = 0");
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::string detail;
    while (true) {
      absl::StatusOr<bool> row = plan->Step();
      ASSERT_TRUE(row.ok()) << row.status();
      if (!*row) break;
      detail += plan->ColumnText(3) + "\n";
    }
    EXPECT_NE(detail.find("USING INDEX"), std::string::npos) << detail;
  }
  Authenticator auth(coordinator_->store(), /*enabled=*/true);
  const std::string header = "Bearer " + tokens_["alice"];
  ASSERT_TRUE(auth.AuthenticateBearer(header).ok());
  constexpr int kLookups = 20000;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kLookups; ++i) {
    absl::StatusOr<Principal> p = auth.AuthenticateBearer(header);
    ASSERT_TRUE(p.ok()) << p.status();
  }
  const absl::Duration each = (absl::Now() - start) / kLookups;
  std::printf("token lookup: %.2f us per call (%d calls)\n", absl::ToDoubleMicroseconds(each),
              kLookups);
  EXPECT_LT(each, absl::Milliseconds(1));
  EXPECT_EQ(auth.AuthenticateBearer("Bearer " + tokens_["forger"]).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(AuthTest, InvalidSpecCarriesFieldViolations) {
  v1::SubmitJobsRequest req;
  *req.add_jobs()->mutable_spec() = Spec("good");
  v1::JobSpec bad = Spec("bad name!");
  bad.mutable_training()->set_lr(0);
  *req.add_jobs()->mutable_spec() = bad;
  v1::SubmitJobsResponse resp;
  grpc::Status s = jobs_->SubmitJobs(Context("alice").get(), req, &resp);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ErrorDetails details;
  ASSERT_TRUE(details.ParseFromString(s.error_details()));
  std::set<std::string> fields;
  for (const auto& v : details.field_violations()) fields.insert(v.field());
  EXPECT_TRUE(fields.count("jobs[1].spec.training.lr")) << details.DebugString();
  EXPECT_TRUE(fields.count("jobs[1].spec.name")) << details.DebugString();
  EXPECT_EQ(fields.size(), 2u) << details.DebugString();
}

TEST(TokenCommandTest, CreateListRevokeWithTheRealBinary) {
  TempDir dir;
  const std::string bin = testing::BinaryPath("llamafleet-coordinator");
  absl::StatusOr<testing::CommandResult> r = testing::RunCommand(
      {bin, "token", "create", "--data-dir", dir.path(), "--user", "ann", "--role", "Admin"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const std::string token(absl::StripAsciiWhitespace(r->out));
  EXPECT_EQ(token.rfind("lft_", 0), 0u) << r->out;
  EXPECT_EQ(token.find('\n'), std::string::npos);
  EXPECT_EQ(token.size(), 4u + 64u);
  // The secret is not in the database, only its hash.
  r = testing::RunCommand({"/bin/sh", "-c", "grep -c " + token + " " + dir.path() + "/coordinator.db*"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out.find("coordinator.db:1"), std::string::npos) << r->out;

  // Bad input: one line naming the flag, exit 1, nothing created.
  TempDir other;
  r = testing::RunCommand({bin, "token", "create", "--data-dir", other.path() + "/new", "--user",
                           "ann", "--role", "root"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("--role"), std::string::npos) << r->err;
  EXPECT_FALSE(std::filesystem::exists(other.path() + "/new"));
  r = testing::RunCommand({bin, "token", "create", "--data-dir", dir.path(), "--user", "a b",
                           "--role", "user"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("--user"), std::string::npos) << r->err;

  r = testing::RunCommand({bin, "token", "list", "--data-dir", dir.path()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_NE(r->out.find("ann"), std::string::npos);
  EXPECT_NE(r->out.find("admin"), std::string::npos);
  EXPECT_EQ(r->out.find(token), std::string::npos);
  r = testing::RunCommand({bin, "token", "revoke", "--data-dir", dir.path(), "--id", "1"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  r = testing::RunCommand({bin, "token", "list", "--data-dir", dir.path()});
  EXPECT_NE(r->out.find("revoked"), std::string::npos) << r->out;
}

// TLS with the real binaries: a self-signed certificate made at test time; the CLI and a
// worker trust it with --tls-ca; a plaintext client cannot talk to a TLS coordinator.
TEST(TlsTest, CoordinatorCliAndWorkerOverTls) {
  TempDir dir;
  const std::string cert = dir.path() + "/cert.pem", key = dir.path() + "/key.pem";
  absl::StatusOr<testing::CommandResult> r = testing::RunCommand(
      {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
       "-subj", "/CN=localhost", "-days", "1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const std::string bin_dir = testing::BinaryPath("");
  r = testing::RunCommand({bin_dir + "llamafleet-coordinator", "token", "create", "--data-dir",
                           dir.path() + "/coord", "--user", "ann", "--role", "user"});
  ASSERT_TRUE(r.ok() && r->exit_code == 0);
  const std::string token(absl::StripAsciiWhitespace(r->out));
  absl::StatusOr<testing::Coordinator> coordinator = testing::StartCoordinator(
      {.data_dir = dir.path() + "/coord", .auth = true, .join_token = "secret", .log_level = "warn",
       .tls_cert = cert, .tls_key = key});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto worker = testing::Subprocess::Start(
      {bin_dir + "llamafleet-worker", "--coordinator", coordinator->address, "--tls-ca", cert, "--join-token",
       "secret", "--data-dir", dir.path() + "/w", "--cpu-ranks", "1", "--name", "tls-worker",
       "--run-as", std::to_string(geteuid())});
  ASSERT_TRUE(worker.ok());
  const std::vector<std::string> cli = {bin_dir + "llamafleet", "--coordinator", coordinator->address,
                                        "--token", token, "--timeout", "5s"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = cli;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return testing::RunCommand(argv);
  };
  // The worker registers over TLS.
  const bool ready = testing::WaitFor(
      [&] {
        r = with({"--tls-ca", cert, "workers"});
        return r.ok() && r->exit_code == 0 && r->out.find("tls-worker") != std::string::npos &&
               r->out.find("READY") != std::string::npos;
      },
      absl::Seconds(10), absl::Milliseconds(100));
  EXPECT_TRUE(ready) << (r.ok() ? r->out + r->err : r.status().ToString());
  r = with({"--tls-ca", cert, "get", "jobs"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->err;
  r = with({"get", "jobs"});  // plaintext to a TLS port
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->err.find("cannot reach coordinator"), std::string::npos) << r->err;
  r = with({"--tls-ca", dir.path() + "/missing.pem", "get", "jobs"});
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_NE(r->err.find("--tls-ca"), std::string::npos) << r->err;
  // A key that does not exist: one clear start-up error naming the flag.
  r = testing::RunCommand(testing::CoordinatorArgv(
      {.data_dir = dir.path() + "/c2", .auth = true, .tls_cert = cert, .tls_key = cert}));
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->exit_code, 0);
}

}  // namespace
}  // namespace llamafleet
