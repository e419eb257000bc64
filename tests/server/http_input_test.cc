// The HTTP gateway (http_fixture.h): the portal's assets, and input it refuses or keeps:
// bad ids and bodies, unknown fields and YAML errors named by field and line, explicit zeros.
#include "tests/server/http_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_http;  // NOLINT: the fixture's names

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

// What the portal's Resubmit edits: the spec as it was written (not the effective one
// with every default), submitted again as a job derived from the first.
TEST_F(HttpApiTest, SpecYamlAsSubmittedIsWhatWasWrittenAndResubmitsAsDerived) {
  Reply r = client_->Do(bhttp::verb::post, "/api/v1/jobs", SpecYaml("written"), "application/yaml");
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = r.Json()["job"]["id"];
  r = client_->Get("/api/v1/jobs/" + id + "/spec.yaml?submitted=true");
  ASSERT_EQ(r.status, 200) << r.body;
  absl::StatusOr<std::vector<ParsedJob>> written = ParseJobDocuments(SpecYaml("written"));
  absl::StatusOr<std::vector<ParsedJob>> served = ParseJobDocuments(r.body);
  ASSERT_TRUE(served.ok()) << served.status() << "\n" << r.body;
  EXPECT_EQ(MessageToJson((*served)[0].spec), MessageToJson((*written)[0].spec)) << r.body;
  EXPECT_FALSE((*served)[0].spec.has_fsdp()) << r.body;  // no defaults

  r = client_->Do(bhttp::verb::post, "/api/v1/jobs?idempotency_key=again&derived_from=" + id, r.body,
                  "application/yaml");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(r.Json()["job"]["derived_from"], id) << r.body;
  r = client_->Do(bhttp::verb::post, "/api/v1/jobs?idempotency_key=other&derived_from=999", SpecYaml("x"),
                  "application/yaml");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(client_->Get("/api/v1/jobs/" + id + "/spec.yaml?submitted=maybe").status, 400);
}

// The coordinator's path roots, for the portal's example spec.
TEST_F(HttpApiTest, ConfigNamesThePathRoots) {
  Reply r = client_->Get("/api/v1/config");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["path_roots"], json::array({"/"})) << r.body;
}

}  // namespace
}  // namespace llamafleet
