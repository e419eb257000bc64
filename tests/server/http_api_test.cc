// The HTTP/JSON gateway over real sockets: a Coordinator in-process, a small synchronous
// Beast client. Every route, JSON and YAML submission, SSE with backpressure, limits,
// the portal assets, and HTTPS with a certificate made at test time.
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
#include "tests/testing/process.h"

namespace llamafleet {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using json = nlohmann::json;
using tcp = net::ip::tcp;
using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::TempDir;

constexpr int64_t kMaxBody = 256 << 10;

std::string SpecYaml(const std::string& name) {
  return absl::StrCat("name: ", name,
                      "\nmodel: {preset: tiny, tokenizer: /t/tokenizer.model}\n"
                      "data: {train_path: /d.jsonl}\nresources: {nodes: 2, gpus_per_node: 1}\n");
}

// The spec as protobuf JSON, for SubmitJobRequest bodies.
std::string SpecJson(const std::string& name) {
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
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.http_listen = "127.0.0.1:0";
    options.data_dir = dir_.path();
    options.auth_enabled = false;
    options.max_http_body_bytes = kMaxBody;
    options.path_roots = {"/"};
    options.synchronous_full = false;
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Start(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
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

TEST_F(HttpApiTest, HealthzRoutesAndMethods) {
  Reply r = client_->Get("/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");

  r = client_->Get("/api/v1/nothing");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.Json()["error"]["status"], "NOT_FOUND");
  EXPECT_EQ(client_->Get("/elsewhere").status, 404);

  r = client_->Do(bhttp::verb::delete_, "/api/v1/jobs");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.Header("allow"), "GET, POST");
  r = client_->Do(bhttp::verb::get, "/api/v1/jobs:batch");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.Header("allow"), "POST");
  EXPECT_EQ(client_->Do(bhttp::verb::put, "/api/v1/jobs/1").status, 405);
}

TEST_F(HttpApiTest, SubmitJsonWithIdempotencyAndDryRun) {
  const std::string body =
      absl::StrCat("{\"spec\":", SpecJson("first"), ",\"idempotency_key\":\"k1\"}");
  Reply r = client_->PostJson("/api/v1/jobs", body);
  ASSERT_EQ(r.status, 201) << r.body;
  json job = r.Json()["job"];
  EXPECT_EQ(job["id"], "1");
  EXPECT_EQ(job["state"], "QUEUED");
  EXPECT_EQ(job["owner"], "anonymous");
  EXPECT_EQ(job["spec"]["fsdp"]["sharding"], "FULL_SHARD");  // defaults filled in
  EXPECT_EQ(job["restarts"], 0);                             // primitives always printed
  EXPECT_EQ(r.Json()["created"], true);

  r = client_->PostJson("/api/v1/jobs", body);  // same key: the same job
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["job"]["id"], "1");
  EXPECT_EQ(r.Json()["created"], false);

  // lowerCamel is accepted too; the query parameters override the body.
  r = client_->PostJson("/api/v1/jobs?dry_run=true",
                        absl::StrCat("{\"spec\":", SpecJson("dry"), ",\"idempotencyKey\":\"k2\"}"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["created"], false);
  EXPECT_EQ(r.Json()["job"]["idempotency_key"], "k2");
  EXPECT_EQ(client_->Get("/api/v1/jobs").Json()["total_size"], "1");  // nothing stored

  r = client_->PostJson("/api/v1/jobs?idempotency_key=k1",
                        absl::StrCat("{\"spec\":", SpecJson("first"), "}"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["job"]["id"], "1");
}

TEST_F(HttpApiTest, SubmitYamlLikeTheCli) {
  const std::string yaml = SpecYaml("from-yaml");
  Reply r = client_->Do(bhttp::verb::post, "/api/v1/jobs", yaml, "application/yaml");
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = r.Json()["job"]["id"];
  // The key is derived from the document, as `llamafleet submit -f` derives it.
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(yaml);
  EXPECT_EQ(r.Json()["job"]["idempotency_key"], (*parsed)[0].idempotency_key);
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs", yaml, "text/yaml; charset=utf-8");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["job"]["id"], id);

  r = client_->Do(bhttp::verb::post, "/api/v1/jobs?idempotency_key=other", yaml, "application/x-yaml");
  EXPECT_EQ(r.status, 201);
  EXPECT_NE(r.Json()["job"]["id"], id);

  // Several documents belong to the batch route.
  const std::string multi = absl::StrCat(SpecYaml("a"), "---\n", SpecYaml("b"));
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs", multi, "application/yaml");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(r.Json()["error"]["message"].get<std::string>(), "jobs:batch"));

  // A misspelled field is named.
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs", SpecYaml("x") + "trainin: {}\n", "application/yaml");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(r.body, "trainin")) << r.body;
}

TEST_F(HttpApiTest, SubmitBatchJsonAndYaml) {
  Reply r = client_->Do(bhttp::verb::post, "/api/v1/jobs:batch?dry_run=true",
                        absl::StrCat(SpecYaml("a"), "---\n", SpecYaml("b")), "application/yaml");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["jobs"].size(), 2u);
  EXPECT_EQ(client_->Get("/api/v1/jobs").Json()["total_size"], "0");

  r = client_->Do(bhttp::verb::post, "/api/v1/jobs:batch",
                  absl::StrCat(SpecYaml("a"), "---\n", SpecYaml("b")), "application/yaml");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.Json()["jobs"][1]["job"]["spec"]["name"], "b");
  // Same file again: the derived keys map to the same jobs.
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs:batch",
                  absl::StrCat(SpecYaml("a"), "---\n", SpecYaml("b")), "application/yaml");
  EXPECT_EQ(r.status, 200);

  r = client_->PostJson("/api/v1/jobs:batch",
                        absl::StrCat("{\"jobs\":[{\"spec\":", SpecJson("c"), "},{\"spec\":",
                                     SpecJson("d"), "}]}"));
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.Json()["jobs"][0]["job"]["spec"]["name"], "c");
  EXPECT_EQ(client_->Get("/api/v1/jobs").Json()["total_size"], "4");

  // One bad job: nothing stored, the message names it.
  json bad = json::parse(SpecJson("e"));
  bad["resources"]["nodes"] = 0;
  r = client_->PostJson("/api/v1/jobs:batch", absl::StrCat("{\"jobs\":[{\"spec\":", SpecJson("f"),
                                                           "},{\"spec\":", bad.dump(), "}]}"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json()["error"]["status"], "INVALID_ARGUMENT");
  EXPECT_TRUE(absl::StrContains(r.body, "jobs[1].spec.resources.nodes")) << r.body;
  EXPECT_TRUE(r.Json()["error"]["field_violations"].is_array());
  EXPECT_EQ(client_->Get("/api/v1/jobs").Json()["total_size"], "4");
}

TEST_F(HttpApiTest, GetAndBadIds) {
  const std::string id = Submit("one");
  Reply r = client_->Get("/api/v1/jobs/" + id);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-type"), "application/json");
  EXPECT_EQ(r.Json()["spec"]["name"], "one");
  EXPECT_EQ(r.Json()["last_event_seq"], "1");  // int64 as a string

  r = client_->Get("/api/v1/jobs/999");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.Json()["error"]["code"], 404);
  r = client_->Get("/api/v1/jobs/abc");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(r.Json()["error"]["message"].get<std::string>(), "job_id"));
  EXPECT_EQ(client_->Get("/api/v1/jobs/abc/events").status, 400);
  EXPECT_EQ(client_->Get("/api/v1/jobs/").status, 404);
  EXPECT_EQ(client_->Get("/api/v1/jobs/1/nothing").status, 404);
}

TEST_F(HttpApiTest, ListWithFiltersAndPaging) {
  for (int i = 0; i < 5; ++i) Submit(absl::StrCat(i % 2 ? "odd-" : "even-", i));
  Reply r = client_->Get("/api/v1/jobs");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Json()["jobs"].size(), 5u);
  EXPECT_EQ(r.Json()["jobs"][0]["id"], "5");  // newest first

  r = client_->Get("/api/v1/jobs?name=odd&order_by=create_time");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.Json()["jobs"].size(), 2u);
  EXPECT_EQ(r.Json()["jobs"][0]["spec"]["name"], "odd-1");

  r = client_->Get("/api/v1/jobs?state=QUEUED&state=RUNNING&owner=anonymous&queue=default");
  EXPECT_EQ(r.Json()["jobs"].size(), 5u) << r.body;
  r = client_->Get("/api/v1/jobs?state=running,succeeded");
  EXPECT_EQ(r.Json()["jobs"].size(), 0u) << r.body;
  r = client_->Get("/api/v1/jobs?owner=bob");
  EXPECT_EQ(r.Json()["total_size"], "0");

  // Pages of two, following next_page_token.
  std::vector<std::string> ids;
  std::string token;
  do {
    r = client_->Get(absl::StrCat("/api/v1/jobs?page_size=2&page_token=", token));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["total_size"], "5");
    const json page = r.Json();
    for (const json& j : page["jobs"]) ids.push_back(j["id"]);
    token = page["next_page_token"];
  } while (!token.empty());
  EXPECT_EQ(ids, (std::vector<std::string>{"5", "4", "3", "2", "1"}));

  r = client_->Get("/api/v1/jobs?stat=QUEUED");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(r.body, "stat")) << r.body;
  EXPECT_EQ(client_->Get("/api/v1/jobs?state=DONE").status, 400);
  EXPECT_EQ(client_->Get("/api/v1/jobs?page_size=many").status, 400);
  EXPECT_EQ(client_->Get("/api/v1/jobs?page_token=garbage").status, 400);
  EXPECT_EQ(client_->Get("/api/v1/jobs?name=%zz").status, 400);
}

TEST_F(HttpApiTest, ListShowsSummariesAndViewFullWholeJobs) {
  for (int i = 0; i < 3; ++i) Submit(absl::StrCat("v-", i), absl::StrCat("key-", i));
  const json one = client_->Get("/api/v1/jobs/2").Json();

  Reply r = client_->Get("/api/v1/jobs?page_size=2");
  ASSERT_EQ(r.status, 200) << r.body;
  const json basic = r.Json();
  ASSERT_EQ(basic["jobs"].size(), 2u);
  const json& b = basic["jobs"][1];
  EXPECT_EQ(b["id"], "2");
  // What the portal's list and `llamafleet get jobs` show.
  for (const char* key : {"id", "owner", "state", "status_reason", "create_time", "update_time",
                          "attempts", "restarts", "last_event_seq"}) {
    EXPECT_EQ(b[key], one[key]) << key;
  }
  EXPECT_EQ(b["spec"]["name"], "v-1");
  EXPECT_EQ(b["spec"]["queue"], one["spec"]["queue"]);
  EXPECT_EQ(b["spec"]["priority"], one["spec"]["priority"]);
  EXPECT_EQ(b["spec"]["resources"], one["spec"]["resources"]);
  // Left to view=full.
  EXPECT_FALSE(b["spec"].contains("model")) << b.dump();
  EXPECT_FALSE(b["spec"].contains("training")) << b.dump();
  EXPECT_EQ(b["idempotency_key"], "");
  EXPECT_EQ(b["workers"], json::array());

  // view=full: the job as GET /jobs/{id} has it, less what is derived per call; the
  // same page token either way.
  for (const char* view : {"full", "FULL", "JOB_VIEW_FULL"}) {
    r = client_->Get(absl::StrCat("/api/v1/jobs?page_size=2&view=", view));
    ASSERT_EQ(r.status, 200) << r.body;
    json full = r.Json();
    EXPECT_EQ(full["next_page_token"], basic["next_page_token"]);
    EXPECT_EQ(full["total_size"], "3");
    json expected = one;
    // The scheduler's pending info may move between the calls.
    for (const char* derived : {"memory_estimate", "pending"}) {
      expected.erase(derived);
      full["jobs"][1].erase(derived);
    }
    EXPECT_EQ(full["jobs"][1], expected) << view;
    EXPECT_EQ(full["jobs"][1]["idempotency_key"], "key-1");
  }
  {
    // The same page again, less the scheduler's pending info (a pass may have run since).
    json again = client_->Get("/api/v1/jobs?page_size=2&view=basic").Json();
    json before = basic;
    for (json* page : {&again, &before}) {
      for (json& job : (*page)["jobs"]) job.erase("pending");
    }
    EXPECT_EQ(again, before);
  }
  r = client_->Get(absl::StrCat("/api/v1/jobs?view=full&page_size=2&page_token=",
                                basic["next_page_token"].get<std::string>()));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.Json()["jobs"].size(), 1u);
  EXPECT_EQ(r.Json()["jobs"][0]["id"], "1");
  EXPECT_TRUE(r.Json()["jobs"][0]["spec"].contains("model"));

  r = client_->Get("/api/v1/jobs?view=everything");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(r.body, "view must be basic or full")) << r.body;
  // A summary is a fraction of the bytes.
  EXPECT_LT(client_->Get("/api/v1/jobs").body.size() * 2,
            client_->Get("/api/v1/jobs?view=full").body.size());
}

TEST_F(HttpApiTest, CancelAndEvents) {
  const std::string id = Submit("victim");
  Reply r = client_->Do(bhttp::verb::post, absl::StrCat("/api/v1/jobs/", id, ":cancel"), "x",
                        "text/plain");
  EXPECT_EQ(r.status, 415);
  r = client_->PostJson(absl::StrCat("/api/v1/jobs/", id, ":cancel"), "{\"reason\":\"enough\"}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["job"]["state"], "CANCELLED");
  EXPECT_EQ(client_->Get("/api/v1/jobs/" + id).Json()["state"], "CANCELLED");
  // Idempotent, and an empty body is fine.
  r = client_->Do(bhttp::verb::post, absl::StrCat("/api/v1/jobs/", id, ":cancel"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(client_->PostJson("/api/v1/jobs/77:cancel", "").status, 404);

  r = client_->Get(absl::StrCat("/api/v1/jobs/", id, "/events"));
  ASSERT_EQ(r.status, 200);
  json events = r.Json()["events"];
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["to_state"], "CANCELLED");
  r = client_->Get(absl::StrCat("/api/v1/jobs/", id, "/events?after_seq=1&limit=5"));
  EXPECT_EQ(r.Json()["events"].size(), 1u);
}

TEST_F(HttpApiTest, FollowEventsEndsWithTheTerminalEvent) {
  const std::string id = Submit("watched");
  RawConnection stream(coordinator_->http_address());
  stream.SendGet(absl::StrCat("/api/v1/jobs/", id, "/events?follow=true"));
  ASSERT_TRUE(stream.ReadUntil("event: job")) << stream.data();
  EXPECT_TRUE(absl::StrContains(stream.data(), "text/event-stream"));
  ASSERT_TRUE(stream.ReadUntil("\"submitted\"")) << stream.data();
  EXPECT_TRUE(absl::StrContains(stream.data(), "id: 1\nevent: event\ndata: {")) << stream.data();

  Reply r = client_->PostJson(absl::StrCat("/api/v1/jobs/", id, ":cancel"), "{}");
  ASSERT_EQ(r.status, 200);
  ASSERT_TRUE(stream.ReadToEnd()) << stream.data();
  EXPECT_TRUE(absl::StrContains(stream.data(), "\"to_state\":\"CANCELLED\"")) << stream.data();
  EXPECT_TRUE(absl::EndsWith(stream.data(), "0\r\n\r\n")) << stream.data();  // last chunk

  // Resuming after the last event of a finished job: the job, then the end.
  RawConnection again(coordinator_->http_address());
  again.SendGet(absl::StrCat("/api/v1/jobs/", id, "/events?follow=true&after_seq=2"));
  ASSERT_TRUE(again.ReadToEnd()) << again.data();
  EXPECT_TRUE(absl::StrContains(again.data(), "event: job")) << again.data();
  EXPECT_FALSE(absl::StrContains(again.data(), "event: event")) << again.data();

  // Errors before the stream opens are plain HTTP errors.
  EXPECT_EQ(client_->Get("/api/v1/jobs/42/events?follow=true").status, 404);
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/events?follow=true&limit=3")).status, 400);
}

TEST_F(HttpApiTest, LogsCheckpointsAttemptsMetricsWorkersQueues) {
  const std::string id = Submit("logged");
  // What a worker relayed for attempt 1, rank 0 (LogStore's layout).
  const std::string log_dir = absl::StrCat(dir_.path(), "/logs/", id, "/attempt-1");
  std::filesystem::create_directories(log_dir);
  std::ofstream(log_dir + "/rank-0.log") << "step 1 loss 2.5\nstep 2 loss 2.4\n";

  Reply r = client_->Get(absl::StrCat("/api/v1/jobs/", id, "/logs"));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.Json()["chunks"].size(), 1u) << r.body;
  EXPECT_EQ(r.Json()["chunks"][0]["lines"][1], "step 2 loss 2.4");
  r = client_->Get(absl::StrCat("/api/v1/jobs/", id, "/logs?tail_lines=1&rank=0&attempt=1"));
  ASSERT_EQ(r.Json()["chunks"].size(), 1u) << r.body;
  EXPECT_EQ(r.Json()["chunks"][0]["lines"].size(), 1u);
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/logs?rank=7")).Json()["chunks"].size(), 0u);
  EXPECT_EQ(client_->Get("/api/v1/jobs/99/logs").status, 404);
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/logs?follow=true&rank=x")).status, 400);

  // Following: lines as they are written, the end when the job is over.
  RawConnection follow(coordinator_->http_address());
  follow.SendGet(absl::StrCat("/api/v1/jobs/", id, "/logs?follow=true"));
  ASSERT_TRUE(follow.ReadUntil("step 2 loss 2.4")) << follow.data();
  EXPECT_TRUE(absl::StrContains(follow.data(), "event: log\ndata: {")) << follow.data();
  std::ofstream(log_dir + "/rank-0.log", std::ios::app) << "step 3 loss 2.3\n";
  ASSERT_TRUE(follow.ReadUntil("step 3 loss 2.3")) << follow.data();
  ASSERT_EQ(client_->PostJson(absl::StrCat("/api/v1/jobs/", id, ":cancel"), "{}").status, 200);
  EXPECT_TRUE(follow.ReadToEnd()) << follow.data();
  EXPECT_EQ(client_->Get("/api/v1/jobs/99/logs?follow=true").status, 404);

  r = client_->Get(absl::StrCat("/api/v1/jobs/", id, "/checkpoints"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.Json()["checkpoints"].is_array());
  // No worker ever ran it: an empty history, not an error.
  r = client_->Get(absl::StrCat("/api/v1/jobs/", id, "/attempts"));
  EXPECT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(r.Json()["attempts"].is_array()) << r.body;
  EXPECT_EQ(r.Json()["attempts"].size(), 0u) << r.body;
  EXPECT_EQ(client_->Get("/api/v1/jobs/99/attempts").status, 404);
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/attempts?limit=1")).status, 400);
  r = client_->PostJson(absl::StrCat("/api/v1/jobs/", id, "/attempts"), "{}");
  EXPECT_EQ(r.status, 405) << r.body;
  EXPECT_EQ(r.Header("allow"), "GET");
  r = client_->Get(absl::StrCat("/api/v1/jobs/", id, "/metrics?max_points=10"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.Json()["points"].is_array());
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/metrics?max_points=-")).status, 400);

  r = client_->Get("/api/v1/workers");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.Json()["workers"].is_array());

  r = client_->Get("/api/v1/queues");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.Json()["queues"].is_array()) << r.body;
  r = client_->Get("/api/v1/whoami", {{"X-Llamafleet-User", "carol"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["user"], "carol");
  EXPECT_EQ(r.Json()["role"], "ADMIN");
  EXPECT_EQ(r.Json()["auth_enabled"], false);
}

TEST_F(HttpApiTest, ForwardsTheCallerAndMetricsEndpoint) {
  Reply r = client_->Do(bhttp::verb::post, "/api/v1/jobs", SpecYaml("mine"), "application/yaml",
                        {{"X-Llamafleet-User", "dave"}});
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.Json()["job"]["owner"], "dave");
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs", SpecYaml("bad"), "application/yaml",
                  {{"X-Llamafleet-User", "no spaces allowed"}});
  EXPECT_EQ(r.status, 400);

  r = client_->Get("/metrics");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(absl::StartsWith(r.Header("content-type"), "text/plain; version=0.0.4")) << r.Header("content-type");
}

TEST_F(HttpApiTest, PortalAssets) {
  Reply r = client_->Get("/");
  EXPECT_EQ(r.status, 302);
  EXPECT_EQ(r.Header("location"), "/ui/");

  r = client_->Get("/ui/static/index.html");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("content-type"), "text/html; charset=utf-8");
  const std::string etag = r.Header("etag");
  ASSERT_EQ(etag.size(), 34u) << etag;  // quoted 32 hex digits
  EXPECT_FALSE(r.Header("cache-control").empty());
  EXPECT_TRUE(absl::StrContains(r.body, "<html"));
  // Scripts only from this origin, never framed: the page holds an API token.
  EXPECT_TRUE(absl::StrContains(r.Header("content-security-policy"), "script-src 'self'"))
      << r.Header("content-security-policy");
  EXPECT_EQ(r.Header("x-frame-options"), "DENY");
  EXPECT_EQ(r.Header("x-content-type-options"), "nosniff");

  r = client_->Get("/ui/static/index.html", {{"If-None-Match", etag}});
  EXPECT_EQ(r.status, 304);
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(client_->Get("/ui/static/index.html", {{"If-None-Match", "\"other\""}}).status, 200);

  // Any other page of the app is index.html.
  r = client_->Get("/ui/jobs/12?tab=logs");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.Header("etag"), etag);
  EXPECT_EQ(client_->Get("/ui/static/missing.js").status, 404);
  EXPECT_EQ(client_->Do(bhttp::verb::post, "/ui/").status, 405);
}

TEST_F(HttpApiTest, BadInput) {
  Reply r = client_->PostJson("/api/v1/jobs", "{\"spec\": ");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(r.Json()["error"]["message"].get<std::string>(), "invalid JSON"))
      << r.body;
  r = client_->PostJson("/api/v1/jobs", "{\"spek\": {}}");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(r.body, "spek")) << r.body;
  r = client_->PostJson("/api/v1/jobs", absl::StrCat("{\"spec\":", SpecJson("x"), ",\"dry\":1}"));
  EXPECT_TRUE(absl::StrContains(r.body, "dry")) << r.body;
  EXPECT_EQ(client_->PostJson("/api/v1/jobs", "").status, 400);
  EXPECT_EQ(client_->Do(bhttp::verb::post, "/api/v1/jobs", "<job/>", "application/xml").status, 415);
  EXPECT_EQ(client_->Do(bhttp::verb::post, "/api/v1/jobs", "name: x").status, 415);  // no type

  // An invalid spec names the field.
  json spec = json::parse(SpecJson("x"));
  spec["training"]["lr"] = -1;
  r = client_->PostJson("/api/v1/jobs", json({{"spec", spec}}).dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(absl::StrContains(r.body, "spec.training.lr")) << r.body;
  ASSERT_EQ(r.Json()["error"]["field_violations"].size(), 1u) << r.body;
  EXPECT_EQ(r.Json()["error"]["field_violations"][0]["field"], "spec.training.lr");
  EXPECT_FALSE(r.Json()["error"]["field_violations"][0]["description"].get<std::string>().empty());

  // The connection is still good after all that.
  EXPECT_EQ(client_->Get("/healthz").status, 200);
}

// An unknown field is named in field_violations by its path, from JSON and from YAML.
TEST_F(HttpApiTest, UnknownFieldsAreNamedInFieldViolations) {
  auto fields = [](const Reply& r) {
    std::vector<std::string> out;
    const json body = r.Json();
    for (const json& v : body["error"]["field_violations"]) {
      out.push_back(v["field"].get<std::string>());
      EXPECT_FALSE(v["description"].get<std::string>().empty()) << r.body;
    }
    return out;
  };
  using Fields = std::vector<std::string>;
  Reply r = client_->PostJson("/api/v1/jobs", "{\"spek\": {}}");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(fields(r), Fields{"spek"}) << r.body;
  json spec = json::parse(SpecJson("x"));
  spec["trainin"] = json::object();
  r = client_->PostJson("/api/v1/jobs", json({{"spec", spec}}).dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(fields(r), Fields{"spec.trainin"}) << r.body;
  r = client_->PostJson("/api/v1/jobs:batch",
                        json({{"jobs", {{{"spec", json::parse(SpecJson("a"))}}, {{"spec", spec}}}}})
                            .dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(fields(r), Fields{"jobs[1].spec.trainin"}) << r.body;

  r = client_->Do(bhttp::verb::post, "/api/v1/jobs", SpecYaml("x") + "trainin: {}\n",
                  "application/yaml");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(fields(r), Fields{"spec.trainin"}) << r.body;
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs:batch",
                  absl::StrCat(SpecYaml("a"), "---\n", SpecYaml("b"), "training: {lrr: 1}\n"),
                  "application/yaml");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(fields(r), Fields{"jobs[1].spec.training.lrr"}) << r.body;
  // A YAML syntax error is about no field.
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs", "name: [x\n", "application/yaml");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(fields(r).empty()) << r.body;
}

// Each field violation of a YAML body names the line of its field in the file, so the
// portal marks it without reading the YAML itself: unknown fields and broken rules, in
// one document and in the second document of a batch.
TEST_F(HttpApiTest, YamlViolationsCarryTheirLine) {
  auto first = [](const Reply& r) { return r.Json()["error"]["field_violations"][0]; };
  const std::string one = SpecYaml("x");
  const int lines = static_cast<int>(std::count(one.begin(), one.end(), '\n'));
  Reply r = client_->Do(bhttp::verb::post, "/api/v1/jobs?dry_run=true",
                        one + "trainin: {}\n", "application/yaml");
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(first(r)["field"], "spec.trainin") << r.body;
  EXPECT_EQ(first(r)["line"], lines + 1) << r.body;

  r = client_->Do(bhttp::verb::post, "/api/v1/jobs:batch?dry_run=true",
                  absl::StrCat(one, "---\n", "# a comment\n", SpecYaml("b"),
                               "run_policy:\n  max_restarts: -4\n"),
                  "application/yaml");
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(first(r)["field"], "jobs[1].spec.run_policy.max_restarts") << r.body;
  EXPECT_EQ(first(r)["line"], 2 * lines + 4) << r.body;
  EXPECT_EQ(first(r)["column"], 3) << r.body;

  // JSON bodies have no lines to give.
  json spec = json::parse(SpecJson("x"));
  spec["training"]["lr"] = -1;
  r = client_->PostJson("/api/v1/jobs", json({{"spec", spec}}).dump());
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(first(r)["line"], 0) << r.body;
}

// The stored spec rendered as YAML on the server: explicit zeros survive (the optional
// fields keep their presence), and the YAML submits again as the same spec.
TEST_F(HttpApiTest, SpecYamlKeepsExplicitZerosAndResubmits) {
  const std::string yaml = SpecYaml("zeros") +
                           "training: {seed: 0}\nrun_policy: {max_restarts: 0, "
                           "restart_backoff_seconds: 0}\n";
  Reply r = client_->Do(bhttp::verb::post, "/api/v1/jobs", yaml, "application/yaml");
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = r.Json()["job"]["id"];
  const json stored = r.Json()["job"]["spec"];

  r = client_->Get("/api/v1/jobs/" + id + "/spec.yaml");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(absl::StartsWith(r.Header("content-type"), "application/yaml")) << r.Header("content-type");
  absl::StatusOr<std::vector<ParsedJob>> parsed = ParseJobDocuments(r.body);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << r.body;
  ASSERT_EQ(parsed->size(), 1u);
  const v1::JobSpec& spec = (*parsed)[0].spec;
  EXPECT_TRUE(spec.training().has_seed()) << r.body;
  EXPECT_EQ(spec.training().seed(), 0u);
  EXPECT_TRUE(spec.run_policy().has_max_restarts()) << r.body;
  EXPECT_EQ(spec.run_policy().max_restarts(), 0);
  EXPECT_TRUE(spec.run_policy().has_restart_backoff_seconds()) << r.body;
  EXPECT_EQ(spec.run_policy().restart_backoff_seconds(), 0);

  // Submitted again (another key): the same spec is stored.
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs?idempotency_key=again", r.body,
                  "application/yaml");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_NE(r.Json()["job"]["id"], id);
  EXPECT_EQ(r.Json()["job"]["spec"], stored);

  EXPECT_EQ(client_->Get("/api/v1/jobs/999/spec.yaml").status, 404);
  EXPECT_EQ(client_->Get("/api/v1/jobs/" + id + "/spec.yaml?x=1").status, 400);
}

// The coordinator's path roots, for the portal's example spec.
TEST_F(HttpApiTest, ConfigNamesThePathRoots) {
  Reply r = client_->Get("/api/v1/config");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["path_roots"], json::array({"/"})) << r.body;
}

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
  // A closed half-sent request keeps its slot until the header's deadline (10 s), when the
  // server's read ends; then the address has a slot again.
  const absl::Time closed = absl::Now();
  const absl::Time deadline = closed + absl::Seconds(30);
  bool served = false;
  while (!served && absl::Now() < deadline) {
    RawConnection again(address);
    again.SendGet("/healthz");
    served = again.ReadUntil("\r\n\r\n", absl::Seconds(2)) && absl::StartsWith(again.data(), "HTTP/1.1 200");
    if (!served) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(served);
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
class HttpAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.http_listen = "127.0.0.1:0";
    options.data_dir = dir_.path();
    options.synchronous_full = false;
    options.path_roots = {"/"};
    absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Start(options);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    client_ = std::make_unique<Client>(coordinator_->http_address());
    for (const auto& [user, role] : std::vector<std::pair<std::string, v1::Role>>{
             {"root", v1::ADMIN}, {"alice", v1::USER}, {"bob", v1::USER}, {"vera", v1::VIEWER}}) {
      absl::StatusOr<std::string> token = CreateApiToken(coordinator_->store(), user, role);
      ASSERT_TRUE(token.ok()) << token.status();
      tokens_[user] = *token;
    }
  }
  void TearDown() override {
    client_.reset();
    coordinator_.reset();
  }

  Reply As(const std::string& user, bhttp::verb method, const std::string& target,
           const std::string& body = "", const std::string& type = "") {
    std::map<std::string, std::string> headers;
    if (user == "bogus") headers["Authorization"] = "Bearer not-a-token";
    if (tokens_.count(user)) headers["Authorization"] = "Bearer " + tokens_[user];
    return client_->Do(method, target, body, type, headers);
  }
  Reply Get(const std::string& user, const std::string& target) {
    return As(user, bhttp::verb::get, target);
  }

  TempDir dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Client> client_;
  std::map<std::string, std::string> tokens_;
};

TEST_F(HttpAuthTest, EveryRoleAgainstEveryRoute) {
  Reply r = As("alice", bhttp::verb::post, "/api/v1/jobs", SpecYaml("alices"), "application/yaml");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.Json()["job"]["owner"], "alice");
  const std::string alices = r.Json()["job"]["id"];

  const std::vector<std::string> reads = {
      "/api/v1/jobs", "/api/v1/jobs/" + alices, "/api/v1/jobs/" + alices + "/events",
      "/api/v1/jobs/" + alices + "/logs", "/api/v1/jobs/" + alices + "/checkpoints",
      "/api/v1/jobs/" + alices + "/attempts",
      "/api/v1/jobs/" + alices + "/metrics", "/api/v1/workers", "/api/v1/queues",
      "/api/v1/whoami", "/metrics"};
  for (const std::string& target : reads) {
    for (const std::string user : {"root", "alice", "bob", "vera"}) {
      EXPECT_EQ(Get(user, target).status, 200) << user << " " << target;
    }
    r = Get("", target);
    EXPECT_EQ(r.status, 401) << target << " " << r.body;
    EXPECT_EQ(Get("bogus", target).status, 401) << target;
  }
  EXPECT_EQ(Get("", "/api/v1/jobs").Json()["error"]["status"], "UNAUTHENTICATED");
  EXPECT_EQ(Get("", "/api/v1/jobs/" + alices + "/events?follow=true").status, 401);
  EXPECT_EQ(Get("", "/api/v1/jobs/" + alices + "/logs?follow=true").status, 401);
  // The portal and the health check need no token.
  EXPECT_EQ(Get("", "/healthz").status, 200);
  EXPECT_EQ(Get("", "/ui/static/index.html").status, 200);
  EXPECT_EQ(Get("", "/ui/jobs").status, 200);

  r = Get("vera", "/api/v1/whoami");
  EXPECT_EQ(r.Json()["user"], "vera");
  EXPECT_EQ(r.Json()["role"], "VIEWER");
  EXPECT_EQ(r.Json()["auth_enabled"], true);

  // Submitting: users and admins; not viewers, not strangers.
  const std::string json_body = absl::StrCat("{\"spec\":", SpecJson("j"), "}");
  const std::string batch = absl::StrCat(SpecYaml("b1"), "---\n", SpecYaml("b2"));
  for (const std::string user : {"root", "bob"}) {
    EXPECT_EQ(As(user, bhttp::verb::post, "/api/v1/jobs", json_body, "application/json").status, 201) << user;
    EXPECT_EQ(As(user, bhttp::verb::post, "/api/v1/jobs?dry_run=true", json_body, "application/json").status, 200) << user;
    EXPECT_EQ(As(user, bhttp::verb::post, "/api/v1/jobs:batch", batch, "application/yaml").status, 201) << user;
  }
  const int64_t before = std::stoll(Get("root", "/api/v1/jobs").Json()["total_size"].get<std::string>());
  r = As("vera", bhttp::verb::post, "/api/v1/jobs", json_body, "application/json");
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(r.Json()["error"]["status"], "PERMISSION_DENIED");
  EXPECT_EQ(As("vera", bhttp::verb::post, "/api/v1/jobs?dry_run=true", json_body, "application/json").status, 403);
  EXPECT_EQ(As("vera", bhttp::verb::post, "/api/v1/jobs:batch", batch, "application/yaml").status, 403);
  EXPECT_EQ(As("", bhttp::verb::post, "/api/v1/jobs", json_body, "application/json").status, 401);
  EXPECT_EQ(std::stoll(Get("root", "/api/v1/jobs").Json()["total_size"].get<std::string>()), before);

  // Cancelling: the owner and admins only; a refusal changes nothing.
  const std::string cancel = "/api/v1/jobs/" + alices + ":cancel";
  for (const std::string user : {"bob", "vera", "", "bogus"}) {
    r = As(user, bhttp::verb::post, cancel, "{}", "application/json");
    EXPECT_EQ(r.status, user == "bob" || user == "vera" ? 403 : 401) << user << " " << r.body;
  }
  r = Get("root", "/api/v1/jobs/" + alices);
  EXPECT_EQ(r.Json()["state"], "QUEUED");
  EXPECT_EQ(r.Json()["last_event_seq"], "1");
  EXPECT_EQ(As("alice", bhttp::verb::post, cancel, "{}", "application/json").status, 200);
  EXPECT_EQ(Get("vera", "/api/v1/jobs/" + alices).Json()["state"], "CANCELLED");

  r = As("bob", bhttp::verb::post, "/api/v1/jobs", SpecYaml("bobs"), "application/yaml");
  const std::string bobs = r.Json()["job"]["id"];
  EXPECT_EQ(As("root", bhttp::verb::post, "/api/v1/jobs/" + bobs + ":cancel").status, 200);
  EXPECT_EQ(Get("alice", "/api/v1/jobs/" + bobs).Json()["state"], "CANCELLED");
}

// The route's permission is checked on the request's header: a viewer's submission is
// refused before its body is sent, so no body of theirs is ever read or parsed.
TEST_F(HttpAuthTest, PermissionIsCheckedBeforeTheBodyIsRead) {
  for (const char* target : {"/api/v1/jobs", "/api/v1/jobs:batch", "/api/v1/jobs/1:cancel"}) {
    RawConnection viewer(coordinator_->http_address());
    viewer.Send(absl::StrCat("POST ", target, " HTTP/1.1\r\nHost: x\r\n"
                             "Content-Type: application/yaml\r\nAuthorization: Bearer ",
                             tokens_["vera"], "\r\nContent-Length: 4000000\r\n\r\n"));
    ASSERT_TRUE(viewer.ReadUntil("\r\n\r\n")) << viewer.data();
    EXPECT_TRUE(absl::StartsWith(viewer.data(), "HTTP/1.1 403")) << target << ": " << viewer.data();
    ASSERT_TRUE(viewer.ReadToEnd()) << viewer.data();
    EXPECT_TRUE(absl::StrContains(viewer.data(), "PERMISSION_DENIED")) << viewer.data();
  }
  // A user's header passes, and the body is read.
  RawConnection user(coordinator_->http_address());
  const std::string body = SpecYaml("after-header");
  user.Send(absl::StrCat("POST /api/v1/jobs?dry_run=true HTTP/1.1\r\nHost: x\r\n"
                         "Content-Type: application/yaml\r\nAuthorization: Bearer ",
                         tokens_["alice"], "\r\nContent-Length: ", body.size(), "\r\n\r\n", body));
  ASSERT_TRUE(user.ReadUntil("\r\n\r\n")) << user.data();
  EXPECT_TRUE(absl::StartsWith(user.data(), "HTTP/1.1 200")) << user.data();
  EXPECT_EQ(Get("vera", "/api/v1/config").status, 200);
  EXPECT_EQ(Get("", "/api/v1/config").status, 401);
  EXPECT_EQ(Get("vera", "/api/v1/jobs/1/spec.yaml").status, 404);
}

TEST(HttpsTest, ServesTlsWithAGeneratedCertificate) {
  TempDir dir;
  const std::string cert = dir.path() + "/cert.pem", key = dir.path() + "/key.pem";
  absl::StatusOr<testing::CommandResult> made =
      RunCommand({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                  "-days", "1", "-keyout", key, "-out", cert});
  ASSERT_TRUE(made.ok() && made->exit_code == 0) << (made.ok() ? made->err : made.status().ToString());

  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.http_listen = "127.0.0.1:0";
  options.data_dir = dir.path() + "/data";
  options.auth_enabled = false;
  options.tls_cert_file = cert;
  options.tls_key_file = dir.path() + "/missing.pem";
  options.path_roots = {"/"};
  absl::StatusOr<std::unique_ptr<Coordinator>> bad = Coordinator::Start(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "missing.pem")) << bad.status();
  bad = absl::UnknownError("");

  options.tls_key_file = key;
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Start(options);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string address = (*c)->http_address();

  net::io_context ioc;
  net::ssl::context ctx(net::ssl::context::tls_client);
  ctx.load_verify_file(cert);
  ctx.set_verify_mode(net::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
  SSL_set_tlsext_host_name(stream.native_handle(), "localhost");
  stream.set_verify_callback(net::ssl::host_name_verification("localhost"));
  tcp::resolver resolver(ioc);
  const size_t colon = address.rfind(':');
  beast::get_lowest_layer(stream).connect(
      resolver.resolve(address.substr(0, colon), address.substr(colon + 1)));
  stream.handshake(net::ssl::stream_base::client);
  beast::flat_buffer buffer;
  Reply r = RoundTrip(stream, buffer, bhttp::verb::get, "/healthz", "", "", {});
  EXPECT_EQ(r.status, 200);
  r = RoundTrip(stream, buffer, bhttp::verb::post, "/api/v1/jobs", SpecYaml("secure"),
                "application/yaml", {});
  EXPECT_EQ(r.status, 201) << r.body;
  r = RoundTrip(stream, buffer, bhttp::verb::get, "/api/v1/jobs/1", "", "", {});
  EXPECT_EQ(r.Json()["spec"]["name"], "secure");

  // Plain HTTP to the HTTPS port gets no HTTP answer.
  RawConnection plain(address);
  plain.SendGet("/healthz");
  plain.ReadToEnd(absl::Seconds(5));
  EXPECT_FALSE(absl::StartsWith(plain.data(), "HTTP/1.1 200")) << plain.data();
}

}  // namespace
}  // namespace llamafleet
