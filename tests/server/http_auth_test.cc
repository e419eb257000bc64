// The HTTP gateway (http_fixture.h) with authentication: every role against every route,
// permission checked before the body is read, and HTTPS with a certificate made at test time.
#include "tests/server/http_fixture.h"
#include "tests/testing/in_process.h"

namespace llamafleet {
namespace {

using namespace testing_http;  // NOLINT: the fixture's names

class HttpAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options = testing::InProcessOptions(dir_.path());
    options.auth_enabled = true;
    options.synchronous_full = false;
    coordinator_ = testing::StartInProcess(options);
    ASSERT_NE(coordinator_, nullptr);
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
      "/api/v1/jobs/" + alices + "/attempts", "/api/v1/jobs/" + alices + "/samples?latest=true",
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

  CoordinatorOptions options = testing::InProcessOptions(dir.path() + "/data");
  options.tls_cert_file = cert;
  options.tls_key_file = dir.path() + "/missing.pem";
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
