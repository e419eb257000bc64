// What a caller without credentials can hold, against a real coordinator
// (tests/security/security_api.h), from many loopback source addresses (127.0.0.2 and up
// reach a server on 127.0.0.1 on Linux, bound before connect):
//   - worker session streams that send no hello: beyond a few per address, and beyond the
//     pool's size in all, they cost the coordinator nothing (refused at once or taking an
//     older one's place), its memory stays flat, a real worker's hello still registers, and
//     a stream still silent at the hello deadline is ended;
//   - idle HTTP connections without a token from a few addresses: /healthz and an
//     authenticated call are still answered, and the idle connections are closed after a
//     short deadline while an authenticated one keeps its longer keep-alive.
#include <arpa/inet.h>
#include <grpcpp/create_channel_posix.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/strip.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "tests/security/security_api.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using SessionStream = grpc::ClientAsyncReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

// A TCP socket from `from` (an address of this host) connected to `to` (HOST:PORT); -1 on
// failure.
int ConnectFrom(const std::string& from, const std::string& to) {
  const size_t colon = to.rfind(':');
  sockaddr_in local{}, remote{};
  local.sin_family = remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(std::stoi(to.substr(colon + 1))));
  if (inet_pton(AF_INET, from.c_str(), &local.sin_addr) != 1 ||
      inet_pton(AF_INET, to.substr(0, colon).c_str(), &remote.sin_addr) != 1) {
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Many WorkerService.Session streams that never send a message, one HTTP/2 connection per
// source address, driven on one completion queue: each is opened, then waits for its
// status (the coordinator refusing or ending it).
class SessionFlood {
 public:
  explicit SessionFlood(std::string coordinator) : coordinator_(std::move(coordinator)) {}
  ~SessionFlood() {
    for (auto& c : calls_) c->context.TryCancel();
    Poll(absl::Seconds(10), [&] { return outstanding_ == 0; });
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // Opens `n` streams from `from`.
  void Open(const std::string& from, int n) {
    const int fd = ConnectFrom(from, coordinator_);
    ASSERT_GE(fd, 0) << "connect from " << from << ": " << strerror(errno);
    stubs_.push_back(
        v1::WorkerService::NewStub(grpc::CreateInsecureChannelFromFd(coordinator_, fd)));
    for (int i = 0; i < n; ++i) {
      auto call = std::make_unique<Call>();
      call->stream = stubs_.back()->AsyncSession(&call->context, &cq_, Tag(call.get(), false));
      ++outstanding_;
      calls_.push_back(std::move(call));
    }
  }

  // Handles completions until `done()` or `limit` passes.
  void Poll(absl::Duration limit, const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + limit;
    while (!done() && absl::Now() < deadline) {
      void* tag;
      bool ok;
      const auto next = cq_.AsyncNext(
          &tag, &ok, std::chrono::system_clock::now() + std::chrono::milliseconds(50));
      if (next != grpc::CompletionQueue::GOT_EVENT) continue;
      Call* call = reinterpret_cast<Call*>(reinterpret_cast<uintptr_t>(tag) & ~uintptr_t{1});
      if ((reinterpret_cast<uintptr_t>(tag) & 1) == 0) {  // opened (or failed to): wait for its end
        call->stream->Finish(&call->status, Tag(call, true));
      } else {
        call->ended = absl::Now();
        --outstanding_;
      }
    }
  }

  // Streams ended with `code` so far.
  int Ended(grpc::StatusCode code) const {
    int n = 0;
    for (const auto& c : calls_)
      n += c->ended != absl::InfinitePast() && c->status.error_code() == code;
    return n;
  }
  int Open() const { return outstanding_; }
  // A message of a stream ended with `code` ("" when none).
  std::string Message(grpc::StatusCode code) const {
    for (const auto& c : calls_) {
      if (c->ended != absl::InfinitePast() && c->status.error_code() == code)
        return c->status.error_message();
    }
    return "";
  }

 private:
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<SessionStream> stream;
    grpc::Status status;
    absl::Time ended = absl::InfinitePast();
  };
  static void* Tag(Call* call, bool finish) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(call) | (finish ? 1 : 0));
  }

  const std::string coordinator_;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<v1::WorkerService::Stub>> stubs_;
  std::vector<std::unique_ptr<Call>> calls_;
  int outstanding_ = 0;
};

// A worker's first session: a hello with the join token. Returns the first answer's status
// (OK with a welcome).
grpc::Status Register(const std::string& coordinator, const std::string& name, bool* welcomed) {
  auto stub = v1::WorkerService::NewStub(
      grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto session = stub->Session(&ctx);
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_name(name);
  hello.mutable_hello()->set_join_token("secret");
  hello.mutable_hello()->set_instance_id(name + "-instance");
  hello.mutable_hello()->mutable_inventory()->set_address("127.0.0.1");
  hello.mutable_hello()->mutable_inventory()->set_cpu_ranks(1);
  v1::CoordinatorMessage answer;
  *welcomed = session->Write(hello) && session->Read(&answer) && answer.has_welcome();
  ctx.TryCancel();
  grpc::Status s = session->Finish();
  return *welcomed ? grpc::Status::OK : s;
}

// Resident set of a process now, from /proc/PID/status (VmRSS), in bytes.
int64_t Rss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    int64_t kb = 0;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(6), "kB")),
                         &kb)) {
      return kb * 1024;
    }
  }
  return -1;
}

std::string Loopback(int i) { return absl::StrCat("127.0.0.", i); }

using UnauthenticatedLimitsTest = SecurityApiTest;

// 4,000 hello-less streams from 40 addresses, in 4 waves of 25 per address, with the
// default bounds (8 per address, 256 in all): all but the pool's 256 are refused at once
// (RESOURCE_EXHAUSTED naming the flags); the coordinator's memory does not grow with the
// streams opened (each held stream takes it about 20 KB: the last 3,000 would add some
// 60 MB); and a worker from an address of its own registers while the pool is full.
TEST_F(UnauthenticatedLimitsTest, HelloLessSessionStreamsAreBoundedAndAWorkerStillRegisters) {
  SessionFlood flood(address_);
  int64_t after_first_wave = 0;
  for (int wave = 0; wave < 4; ++wave) {
    for (int a = 2; a < 42; ++a) ASSERT_NO_FATAL_FAILURE(flood.Open(Loopback(a), 25));
    flood.Poll(absl::Seconds(5), [&] { return flood.Open() <= 256; });
    if (wave == 0) after_first_wave = Rss(coordinator_->pid());
  }
  flood.Poll(absl::Milliseconds(500), [] { return false; });  // none more may end
  EXPECT_EQ(flood.Open(), 256) << "streams still waiting for their hello";
  EXPECT_EQ(flood.Ended(grpc::StatusCode::RESOURCE_EXHAUSTED), 4000 - 256);
  EXPECT_TRUE(absl::StrContains(flood.Message(grpc::StatusCode::RESOURCE_EXHAUSTED),
                                "--max-unauthenticated-sessions"))
      << flood.Message(grpc::StatusCode::RESOURCE_EXHAUSTED);
  const int64_t grown = Rss(coordinator_->pid()) - after_first_wave;
  EXPECT_LT(grown, 16 << 20) << "the last 3,000 streams grew the coordinator by " << grown
                             << " bytes";

  bool welcomed = false;
  const grpc::Status s = Register(address_, "w1", &welcomed);
  EXPECT_TRUE(welcomed) << s.error_code() << ": " << s.error_message();
}

// With --worker-hello-timeout 2: a stream that sends nothing is ended with
// DEADLINE_EXCEEDED naming the flag, after 2 s and well before 5; a first message larger
// than a hello may be is refused before anything of it is used; a hello sent in time
// registers.
TEST_F(UnauthenticatedLimitsTest, ASessionSilentPastTheHelloDeadlineIsEnded) {
  Stop();
  ASSERT_NO_FATAL_FAILURE(Start({"--worker-hello-timeout", "2"}));
  const absl::Time opened = absl::Now();
  SessionFlood flood(address_);
  ASSERT_NO_FATAL_FAILURE(flood.Open("127.0.0.2", 3));
  flood.Poll(absl::Seconds(10), [&] { return flood.Open() == 0; });
  const absl::Duration took = absl::Now() - opened;
  EXPECT_EQ(flood.Ended(grpc::StatusCode::DEADLINE_EXCEEDED), 3);
  EXPECT_TRUE(absl::StrContains(flood.Message(grpc::StatusCode::DEADLINE_EXCEEDED),
                                "--worker-hello-timeout"))
      << flood.Message(grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_GE(took, absl::Seconds(1.9));
  EXPECT_LT(took, absl::Seconds(5));

  {
    auto stub = v1::WorkerService::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto session = stub->Session(&ctx);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_name(std::string(100 << 10, 'w'));
    hello.mutable_hello()->set_join_token("secret");
    session->Write(hello);
    v1::CoordinatorMessage answer;
    EXPECT_FALSE(session->Read(&answer));
    const grpc::Status refused = session->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.error_message();
    EXPECT_TRUE(absl::StrContains(refused.error_message(), "64 KiB")) << refused.error_message();
  }

  bool welcomed = false;
  const grpc::Status s = Register(address_, "w1", &welcomed);
  EXPECT_TRUE(welcomed) << s.error_code() << ": " << s.error_message();
}

// A plain HTTP/1.1 connection, optionally from another local address; its close is seen
// by AwaitClose.
class RawConnection {
 public:
  RawConnection(net::io_context& ioc, const std::string& to, const std::string& from)
      : socket_(ioc) {
    const int fd = ConnectFrom(from, to);
    if (fd >= 0) socket_.assign(net::ip::tcp::v4(), fd);
  }
  bool connected() const { return socket_.is_open(); }
  // Reads (and drops) until the server closes; then records when.
  void AwaitClose() {
    socket_.async_read_some(net::buffer(scratch_), [this](beast::error_code ec, size_t) {
      if (ec) {
        closed_ = absl::Now();
        return;
      }
      AwaitClose();
    });
  }
  absl::Time closed() const { return closed_; }

 private:
  net::ip::tcp::socket socket_;
  std::array<char, 1024> scratch_;
  absl::Time closed_ = absl::InfiniteFuture();
};

// One request on `stream` (kept alive); the status, 0 on failure.
int Get(beast::tcp_stream& stream, const std::string& target, const std::string& token) {
  bhttp::request<bhttp::empty_body> req(bhttp::verb::get, target, 11);
  req.set(bhttp::field::host, "localhost");
  if (!token.empty()) req.set(bhttp::field::authorization, "Bearer " + token);
  beast::error_code ec;
  stream.expires_after(std::chrono::seconds(10));
  bhttp::write(stream, req, ec);
  if (ec) return 0;
  beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> response;
  bhttp::read(stream, buffer, response, ec);
  return ec ? 0 : response.result_int();
}

// One request on a new connection from 127.0.0.1; the status, 0 on failure.
int GetOnce(const std::string& address, const std::string& target, const std::string& token) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  const size_t colon = address.rfind(':');
  net::ip::tcp::resolver resolver(ioc);
  beast::error_code ec;
  stream.connect(resolver.resolve(address.substr(0, colon), address.substr(colon + 1)), ec);
  return ec ? 0 : Get(stream, target, token);
}

// 8 addresses x 64 idle connections without a token (what once took every connection the
// server allows): /healthz and an authenticated call from another address still answer
// 200; every idle connection is closed within the unauthenticated deadline (5 s) and some
// slack, well before the keep-alive deadline (10 s) that an authenticated connection,
// idle as long, still has.
TEST_F(UnauthenticatedLimitsTest, IdleConnectionsWithoutATokenLeaveOthersServedAndAreClosedSoon) {
  const std::string jobs = "/api/v1/jobs";
  net::io_context ioc;
  const size_t colon = http_address_.rfind(':');
  net::ip::tcp::resolver resolver(ioc);
  const auto endpoints =
      resolver.resolve(http_address_.substr(0, colon), http_address_.substr(colon + 1));
  beast::tcp_stream authenticated(ioc);
  authenticated.connect(endpoints);
  ASSERT_EQ(Get(authenticated, jobs, tokens_["alice"]), 200);

  const absl::Time opened = absl::Now();
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int a = 2; a < 10; ++a) {
    for (int i = 0; i < 64; ++i) {
      idle.push_back(std::make_unique<RawConnection>(ioc, http_address_, Loopback(a)));
      ASSERT_TRUE(idle.back()->connected()) << Loopback(a) << ": " << strerror(errno);
      idle.back()->AwaitClose();
    }
  }
  ioc.run_for(std::chrono::milliseconds(500));  // the server has accepted them all

  EXPECT_EQ(GetOnce(http_address_, "/healthz", ""), 200);
  EXPECT_EQ(GetOnce(http_address_, jobs, tokens_["alice"]), 200);

  const bool all_closed = testing::WaitFor(
      [&] {
        ioc.run_for(std::chrono::milliseconds(100));
        return std::all_of(idle.begin(), idle.end(),
                           [](const auto& c) { return c->closed() != absl::InfiniteFuture(); });
      },
      absl::Seconds(12), absl::Milliseconds(1));
  absl::Time last = opened;
  for (const auto& c : idle) last = std::max(last, c->closed());
  EXPECT_TRUE(all_closed);
  EXPECT_LT(last - opened, absl::Seconds(8))
      << "the last idle connection was closed after " << absl::FormatDuration(last - opened);
  EXPECT_GE(absl::Now() - opened, absl::Seconds(4.5));
  // Idle as long, an authenticated connection is still open.
  EXPECT_EQ(Get(authenticated, jobs, tokens_["alice"]), 200);
}

}  // namespace
}  // namespace llamafleet
