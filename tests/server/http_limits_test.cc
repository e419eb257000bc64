// The HTTP gateway (http_fixture.h) under pressure: body and header limits, a slow event
// reader, one address holding connections, and a shutdown with streams open.
#include "tests/server/http_fixture.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

using namespace testing_http;  // NOLINT: the fixture's names

TEST_F(HttpApiTest, LimitsOnBodyAndHeaders) {
  // 413 from Content-Length, before the body is sent.
  RawConnection big(coordinator_->http_address());
  big.Send(absl::StrCat("POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Content-Length: ", kMaxBody + 1, "\r\n\r\n"));
  ASSERT_TRUE(big.ReadToEnd()) << big.data();
  EXPECT_TRUE(absl::StartsWith(big.data(), "HTTP/1.1 413")) << big.data();

  // Chunked, no length up front: 413 once the limit is crossed.
  RawConnection chunked(coordinator_->http_address());
  chunked.Send("POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n");
  const std::string chunk(64 << 10, 'a');
  beast::error_code ignored;
  for (int i = 0; i < 5; ++i) {
    try {
      chunked.Send(absl::StrCat("10000\r\n", chunk, "\r\n"));
    } catch (const std::exception&) {
      break;  // the server closed after answering
    }
  }
  ASSERT_TRUE(chunked.ReadUntil("\r\n\r\n")) << chunked.data();
  EXPECT_TRUE(absl::StartsWith(chunked.data(), "HTTP/1.1 413")) << chunked.data();

  Reply r = client_->Get("/healthz", {{"X-Padding", std::string(20 << 10, 'p')}});
  EXPECT_EQ(r.status, 431);
}

TEST_F(HttpApiTest, SlowEventReaderBlocksNobody) {
  const std::string id = Submit("chatty");
  const std::string log_dir = absl::StrCat(dir_.path(), "/logs/", id, "/attempt-1");
  std::filesystem::create_directories(log_dir);
  const int kLines = 200000;  // ~10 MB of events: far more than the socket buffers hold
  {
    std::ofstream out(log_dir + "/rank-0.log");
    for (int i = 0; i < kLines; ++i) out << "line " << i << " padding padding padding\n";
  }
  // Clients that ask for the stream and never read.
  std::vector<std::unique_ptr<RawConnection>> stalled;
  for (int i = 0; i < 4; ++i) {
    stalled.push_back(std::make_unique<RawConnection>(coordinator_->http_address(), 4096));
    stalled.back()->SendGet(absl::StrCat("/api/v1/jobs/", id, "/logs?follow=true"));
  }
  // Time for the streams to fill their sockets and stall (nothing to poll for: stalling is
  // the point).
  absl::SleepFor(absl::Milliseconds(500));
  // Everyone else is served promptly.
  for (int i = 0; i < 20; ++i) {
    const absl::Time start = absl::Now();
    Reply r = client_->Get("/api/v1/jobs/" + id);
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  }
  // A stalled reader that resumes gets every line, in order.
  ASSERT_TRUE(stalled[0]->ReadUntil(absl::StrCat("line ", kLines - 1, " "), absl::Seconds(60)));
  const std::string& data = stalled[0]->data();
  EXPECT_LT(data.find("\"line 0 "), data.find(absl::StrCat("\"line ", kLines / 2, " ")));
  // The others disconnect: their gRPC streams are cancelled and the slots come back.
  for (size_t i = 1; i < stalled.size(); ++i) stalled[i]->Close();
  EXPECT_EQ(client_->Get("/healthz").status, 200);
}

// Half-sent requests from one address (a slowloris) hold at most the per-peer cap of
// connections; another address is still served, and a slot comes back when one closes.
TEST_F(HttpApiTest, OneAddressCannotHoldEveryConnection) {
  const std::string address = coordinator_->http_address();
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 64; ++i) {
    held.push_back(std::make_unique<RawConnection>(address));
    held.back()->Send("GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n");
  }
  RawConnection refused(address);
  ASSERT_TRUE(refused.ReadToEnd()) << refused.data();
  EXPECT_TRUE(absl::StartsWith(refused.data(), "HTTP/1.1 503")) << refused.data();
  EXPECT_TRUE(absl::StrContains(refused.data(), "too many connections from this address")) << refused.data();

  RawConnection other(address, 0, "127.0.0.2");
  other.SendGet("/healthz");
  ASSERT_TRUE(other.ReadUntil("\r\n\r\n")) << other.data();
  EXPECT_TRUE(absl::StartsWith(other.data(), "HTTP/1.1 200")) << other.data();

  held.back()->Close();
  held.pop_back();
  // A closed half-sent request keeps its slot until the header's deadline (5 s without a
  // token), when the server's read ends; then the address has a slot again.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        RawConnection again(address);
        again.SendGet("/healthz");
        return again.ReadUntil("\r\n\r\n", absl::Seconds(2)) && absl::StartsWith(again.data(), "HTTP/1.1 200");
      },
      absl::Seconds(30), absl::Milliseconds(50)));
}

TEST_F(HttpApiTest, ShutdownEndsOpenStreams) {
  const std::string id = Submit("open");
  RawConnection stream(coordinator_->http_address());
  stream.SendGet(absl::StrCat("/api/v1/jobs/", id, "/events?follow=true"));
  ASSERT_TRUE(stream.ReadUntil("\"submitted\""));
  const absl::Time start = absl::Now();
  client_.reset();
  coordinator_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(stream.ReadToEnd(absl::Seconds(5)));
}

// Auth is enforced by the gRPC services; the gateway only forwards the token. Every role
// against every route, over HTTP.

}  // namespace
}  // namespace llamafleet
