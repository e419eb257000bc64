// The fixture of the HTTP gateway suites (http_api_test's files): a Coordinator in-process
// with its HTTP listener, and a small synchronous Beast client (Client for requests, RawConnection
// for what a misbehaving peer sends).
#ifndef LLAMAFLEET_TESTS_SERVER_HTTP_FIXTURE_H_
#define LLAMAFLEET_TESTS_SERVER_HTTP_FIXTURE_H_

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "nlohmann/json.hpp"
#include "server/auth.h"
#include "server/coordinator.h"
#include "tests/testing/in_process.h"
#include "tests/testing/process.h"

namespace llamafleet::testing_http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using json = nlohmann::json;
using tcp = net::ip::tcp;
using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::TempDir;

constexpr int64_t kMaxBody = 256 << 10;

inline std::string SpecYaml(const std::string& name) {
  return absl::StrCat("name: ", name,
                      "\nmodel: {preset: tiny, tokenizer: /t/tokenizer.model}\n"
                      "data: {train_path: /d.jsonl}\nresources: {nodes: 2, gpus_per_node: 1}\n");
}

// The spec as protobuf JSON, for SubmitJobRequest bodies.
inline std::string SpecJson(const std::string& name) {
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(SpecYaml(name));
  return MessageToJson((*parsed)[0].spec);
}

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  json Json() const { return json::parse(body, nullptr, /*allow_exceptions=*/false); }
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// One keep-alive connection, plain or TLS.
template <typename Stream>
Reply RoundTrip(Stream& stream, beast::flat_buffer& buffer, bhttp::verb method,
                const std::string& target, const std::string& body,
                const std::string& content_type,
                const std::map<std::string, std::string>& headers) {
  bhttp::request<bhttp::string_body> req(method, target, 11);
  req.set(bhttp::field::host, "localhost");
  if (!content_type.empty()) req.set(bhttp::field::content_type, content_type);
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  bhttp::write(stream, req);
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 << 20);
  bhttp::read(stream, buffer, parser);
  Reply reply;
  reply.status = parser.get().result_int();
  for (const auto& field : parser.get()) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(c));
    reply.headers[name] = std::string(field.value());
  }
  reply.body = parser.get().body();
  return reply;
}

class Client {
 public:
  explicit Client(const std::string& address) : address_(address), stream_(ioc_) { Connect(); }
  // A server that answers "Connection: close" (as it does when it refuses a request
  // before reading its body) is reconnected to for the next request.
  Reply Do(bhttp::verb method, const std::string& target, const std::string& body = "",
           const std::string& content_type = "", const std::map<std::string, std::string>& headers = {}) {
    Reply reply = RoundTrip(stream_, buffer_, method, target, body, content_type, headers);
    if (absl::EqualsIgnoreCase(reply.Header("connection"), "close")) {
      beast::error_code ignored;
      stream_.socket().close(ignored);
      buffer_.clear();
      Connect();
    }
    return reply;
  }
  Reply Get(const std::string& target, const std::map<std::string, std::string>& headers = {}) {
    return Do(bhttp::verb::get, target, "", "", headers);
  }
  Reply PostJson(const std::string& target, const std::string& body) {
    return Do(bhttp::verb::post, target, body, "application/json");
  }

 private:
  void Connect() {
    const size_t colon = address_.rfind(':');
    tcp::resolver resolver(ioc_);
    stream_.connect(resolver.resolve(address_.substr(0, colon), address_.substr(colon + 1)));
  }

  const std::string address_;
  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

// A raw connection for event streams: sends one request, reads bytes as they come.
class RawConnection {
 public:
  // `from`: the local address to connect from ("127.0.0.2": another peer on loopback).
  explicit RawConnection(const std::string& address, int receive_buffer = 0, const std::string& from = "")
      : socket_(ioc_) {
    const size_t colon = address.rfind(':');
    tcp::resolver resolver(ioc_);
    auto endpoints = resolver.resolve(address.substr(0, colon), address.substr(colon + 1));
    socket_.open(tcp::v4());
    if (!from.empty()) socket_.bind(tcp::endpoint(net::ip::make_address(from), 0));
    if (receive_buffer > 0) socket_.set_option(net::socket_base::receive_buffer_size(receive_buffer));
    socket_.connect(*endpoints.begin());
  }
  void Send(const std::string& raw) { net::write(socket_, net::buffer(raw)); }
  void SendGet(const std::string& target) {
    Send(absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  }
  // Reads until `needle` appears in everything read so far, EOF, or the timeout.
  bool ReadUntil(const std::string& needle, absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!absl::StrContains(data_, needle)) {
      if (eof_ || absl::Now() > deadline) return false;
      ReadSome(deadline);
    }
    return true;
  }
  // Reads to EOF; false on timeout.
  bool ReadToEnd(absl::Duration timeout = absl::Seconds(20)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!eof_) {
      if (absl::Now() > deadline) return false;
      ReadSome(deadline);
    }
    return true;
  }
  const std::string& data() const { return data_; }
  bool eof() const { return eof_; }
  void Close() {
    beast::error_code ignored;
    socket_.close(ignored);
  }

 private:
  void ReadSome(absl::Time deadline) {
    pollfd p{socket_.native_handle(), POLLIN, 0};
    int ms = static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
    if (poll(&p, 1, std::min(ms, 100)) <= 0) return;
    char buf[65536];
    beast::error_code ec;
    size_t n = socket_.read_some(net::buffer(buf), ec);
    if (ec) {
      eof_ = true;
      return;
    }
    data_.append(buf, n);
  }

  net::io_context ioc_;
  tcp::socket socket_;
  std::string data_;
  bool eof_ = false;
};

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options = testing::InProcessOptions(dir_.path());
    options.max_http_body_bytes = kMaxBody;
    options.synchronous_full = false;
    coordinator_ = testing::StartInProcess(options);
    ASSERT_NE(coordinator_, nullptr);
    ASSERT_FALSE(coordinator_->http_address().empty());
    client_ = std::make_unique<Client>(coordinator_->http_address());
  }
  void TearDown() override {
    client_.reset();
    coordinator_.reset();
  }

  // Submits through HTTP (JSON) and returns the job id.
  std::string Submit(const std::string& name, const std::string& key = "") {
    Reply r = client_->PostJson("/api/v1/jobs",
                                absl::StrCat("{\"spec\":", SpecJson(name), ",\"idempotency_key\":\"",
                                             key, "\"}"));
    EXPECT_EQ(r.status, 201) << r.body;
    return r.Json()["job"]["id"].get<std::string>();
  }

  TempDir dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Client> client_;
};

}  // namespace llamafleet::testing_http

#endif  // LLAMAFLEET_TESTS_SERVER_HTTP_FIXTURE_H_
