// Bounds on what one caller can hold or try, against a real coordinator
// (tests/security/security_api.h): a user's following streams over gRPC and HTTP share one
// cap, the next refused with RESOURCE_EXHAUSTED / 429 naming it, and a stream ends after
// its longest life; failed tokens are logged (rate-limited) and an address that keeps
// failing is refused for a while, over gRPC, HTTP (by the HTTP client's own address) and
// worker sessions alike.
#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/security/security_api.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

// An HTTP GET held open (an event stream holds its slot while the connection lives),
// optionally from another local address.
class HttpGet {
 public:
  HttpGet(const std::string& address, const std::string& target, const std::string& token,
          const std::string& from = "")
      : stream_(ioc_) {
    const size_t colon = address.rfind(':');
    net::ip::tcp::resolver resolver(ioc_);
    auto endpoints = resolver.resolve(address.substr(0, colon), address.substr(colon + 1));
    stream_.socket().open(net::ip::tcp::v4());
    // (Bound before a connect to one endpoint: connecting to a list reopens the socket.)
    if (!from.empty())
      stream_.socket().bind(net::ip::tcp::endpoint(net::ip::make_address(from), 0));
    stream_.socket().connect(*endpoints.begin());
    bhttp::request<bhttp::empty_body> req(bhttp::verb::get, target, 11);
    req.set(bhttp::field::host, "localhost");
    if (!token.empty()) req.set(bhttp::field::authorization, "Bearer " + token);
    bhttp::write(stream_, req);
    stream_.expires_after(std::chrono::seconds(20));
    beast::error_code ec;
    bhttp::read_header(stream_, buffer_, parser_, ec);
    if (ec) return;
    status_ = parser_.get().result_int();
    if (status_ != 200) {
      bhttp::read(stream_, buffer_, parser_, ec);
      body_ = parser_.get().body();
    }
  }
  int status() const { return status_; }
  const std::string& body() const { return body_; }

 private:
  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  bhttp::response_parser<bhttp::string_body> parser_;
  int status_ = 0;
  std::string body_;
};

class CallerLimitsTest : public SecurityApiTest {
 protected:
  // Restarted with `flags`, and a viewer's token.
  void Restart(std::vector<std::string> flags) {
    Stop();
    Start(std::move(flags));
    absl::StatusOr<testing::CommandResult> r =
        RunCommand({BinaryPath("llamafleet-coordinator"), "token", "create", "--data-dir",
                    data_dir_, "--user", "vic", "--role", "viewer"});
    ASSERT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.status().ToString());
    tokens_["vic"] = std::string(absl::StripAsciiWhitespace(r->out));
  }

  // A WatchJob of `who`, once its first message (the snapshot) arrived; null when refused
  // (`status` says why).
  struct Watch {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::WatchJobResponse>> reader;
  };
  Watch OpenWatch(const std::string& who, const std::string& job, grpc::Status* status) {
    Watch w;
    w.context = Context(who);
    w.context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::WatchJobRequest req;
    req.set_job_id(job);
    w.reader = stub_->WatchJob(w.context.get(), req);
    v1::WatchJobResponse first;
    if (!w.reader->Read(&first)) {
      *status = w.reader->Finish();
      w.reader.reset();
    } else {
      *status = grpc::Status::OK;
    }
    return w;
  }

  int CountLines(const std::string& text) {
    const std::string log = ReadFile(dir_.path() + "/coordinator.log");
    int n = 0;
    for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
    return n;
  }
};

// A viewer holds the cap's worth of streams (one over HTTP, the others over gRPC): the next
// is refused over gRPC (watch and log follow) and HTTP (events and logs, plain 429s, no
// event stream), naming the cap; another user is not affected; a closed stream gives its
// slot back; and every stream ends after --stream-max-lifetime with UNAVAILABLE saying so.
TEST_F(CallerLimitsTest, AUsersStreamsAreCappedOverGrpcAndHttpTogetherAndEndAfterTheirLifetime) {
  ASSERT_NO_FATAL_FAILURE(Restart({"--max-streams-per-user", "3", "--stream-max-lifetime", "4"}));
  std::string job;
  ASSERT_TRUE(Submit("alice", Spec(), &job).ok());
  const std::string events = absl::StrCat("/api/v1/jobs/", job, "/events?follow=true");
  const std::string logs = absl::StrCat("/api/v1/jobs/", job, "/logs?follow=true");
  HttpGet held_http(http_address_, events, tokens_["vic"]);
  ASSERT_EQ(held_http.status(), 200);
  const absl::Time opened = absl::Now();
  grpc::Status s;
  std::vector<Watch> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(OpenWatch("vic", job, &s));
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  Watch refused = OpenWatch("vic", job, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(s.error_message(), "user vic already holds 3 open streams"))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "--max-streams-per-user 3"))
      << s.error_message();
  {
    v1::StreamJobLogsRequest req;
    req.set_job_id(job);
    req.set_follow(true);
    auto ctx = Context("vic");
    auto reader = stub_->StreamJobLogs(ctx.get(), req);
    v1::LogChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  for (const std::string& target : {events, logs}) {
    HttpGet http(http_address_, target, tokens_["vic"]);
    EXPECT_EQ(http.status(), 429) << target << ": " << http.body();
    EXPECT_TRUE(absl::StrContains(http.body(), "RESOURCE_EXHAUSTED")) << http.body();
    EXPECT_TRUE(absl::StrContains(http.body(), "--max-streams-per-user 3")) << http.body();
  }
  // Another user has slots of their own.
  Watch alices = OpenWatch("alice", job, &s);
  EXPECT_TRUE(s.ok()) << s.error_message();
  HttpGet alices_logs(http_address_, logs, tokens_["alice"]);
  EXPECT_EQ(alices_logs.status(), 200);
  // A closed stream's slot comes back.
  held[0].context->TryCancel();
  (void)held[0].reader->Finish();
  const bool reopened = testing::WaitFor(
      [&] {
        held[0] = OpenWatch("vic", job, &s);
        return s.ok();
      },
      absl::Seconds(2), absl::Milliseconds(50));
  EXPECT_TRUE(reopened) << s.error_message();

  // Past the lifetime (4 s, checked every second) a stream ends, UNAVAILABLE, saying so.
  v1::WatchJobResponse more;
  while (held[1].reader->Read(&more)) {
  }
  const grpc::Status ended = held[1].reader->Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
  EXPECT_TRUE(absl::StrContains(ended.error_message(), "--stream-max-lifetime"))
      << ended.error_message();
  EXPECT_GE(absl::Now() - opened, absl::Seconds(3));
  EXPECT_LT(absl::Now() - opened, absl::Seconds(15));
}

// Five bad tokens from one address within the window (--auth-failure-limit 5): each a 401,
// two log lines in all (the first and the block), then even a good token from that address
// is refused until the block passes; other addresses are not. Over HTTP the count is the
// HTTP client's address, not the gateway's. Calls without a token do not count; bad join
// tokens of worker sessions do.
TEST_F(CallerLimitsTest, AnAddressThatKeepsPresentingBadTokensIsLoggedAndRefusedForAWhile) {
  ASSERT_NO_FATAL_FAILURE(Restart(
      {"--auth-failure-limit", "5", "--auth-failure-window", "60", "--auth-failure-block", "3"}));
  auto get_job = [&](const std::string& token) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    return stub_->ListJobs(&ctx, req, &resp);
  };
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(get_job("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(get_job(tokens_["alice"]).ok()) << "calls without a token do not count";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(get_job(absl::StrCat("lft_guess", i)).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  const absl::Time blocked = absl::Now();
  grpc::Status s = get_job(tokens_["alice"]);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(
      absl::StrContains(s.error_message(), "too many failed credential attempts from 127.0.0.1"))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "--auth-failure-block")) << s.error_message();
  EXPECT_EQ(CountLines("failed credentials from 127.0.0.1"), 2)
      << ReadFile(dir_.path() + "/coordinator.log");
  EXPECT_EQ(CountLines("refused for 3s"), 1);

  // Over HTTP, from 127.0.0.2: not blocked by 127.0.0.1's failures, and counted as itself.
  const std::string jobs = "/api/v1/jobs";
  EXPECT_EQ(HttpGet(http_address_, jobs, tokens_["alice"], "127.0.0.2").status(), 200);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(HttpGet(http_address_, jobs, "lft_nope", "127.0.0.2").status(), 401);
  HttpGet refused(http_address_, jobs, tokens_["alice"], "127.0.0.2");
  EXPECT_EQ(refused.status(), 429) << refused.body();
  EXPECT_TRUE(
      absl::StrContains(refused.body(), "too many failed credential attempts from 127.0.0.2"))
      << refused.body();
  EXPECT_EQ(CountLines("failed credentials from 127.0.0.2"), 2);
  EXPECT_EQ(CountLines("failed credentials from inproc"), 0);

  // Once the block has passed, the good token works again.
  const absl::Duration left = blocked + absl::Seconds(3.5) - absl::Now();
  if (left > absl::ZeroDuration()) absl::SleepFor(left);  // the block's time passing is the point
  EXPECT_TRUE(get_job(tokens_["alice"]).ok());

  // Worker sessions with a bad join token count the same way (the failures from before the
  // block are still in the minute's window: one more blocks again).
  auto workers =
      v1::WorkerService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  auto session = workers->Session(&ctx);
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_name("intruder");
  hello.mutable_hello()->set_join_token("wrong");
  session->Write(hello);
  v1::CoordinatorMessage answer;
  EXPECT_FALSE(session->Read(&answer));
  EXPECT_EQ(session->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(get_job(tokens_["alice"]).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(ReadFile(dir_.path() + "/coordinator.log"),
                                "worker session: bad join token"));
}

}  // namespace
}  // namespace llamafleet
