// The HTTP/JSON gateway over real sockets (http_fixture.h): every job route, JSON and YAML
// submission, listing, events, logs, metrics and the caller forwarded. What it refuses is
// http_input_test.cc's, its limits http_limits_test.cc's, roles and TLS http_auth_test.cc's.
#include "tests/server/http_fixture.h"

namespace llamafleet {
namespace {

using namespace testing_http;  // NOLINT: the fixture's names

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
    // The scheduler's pending info may move between the calls; the spec as submitted
    // comes with GetJob only.
    for (const char* derived : {"memory_estimate", "pending", "submitted_spec"}) {
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
  // Samples (eval.samples): none yet; step and latest must be well formed.
  r = client_->Get(absl::StrCat("/api/v1/jobs/", id, "/samples?step=40"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.Json()["samples"].is_array()) << r.body;
  EXPECT_TRUE(r.Json()["steps"].is_array()) << r.body;
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/samples?latest=true")).status, 200);
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/samples?step=x")).status, 400);
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/samples?step=-1")).status, 400);
  EXPECT_EQ(client_->Get(absl::StrCat("/api/v1/jobs/", id, "/samples?latest=maybe")).status, 400);
  EXPECT_EQ(client_->Get("/api/v1/jobs/99/samples").status, 404);
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

}  // namespace
}  // namespace llamafleet
