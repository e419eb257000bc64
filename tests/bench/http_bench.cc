// GET /api/v1/jobs (page_size 100) and GET /api/v1/jobs/{id} over the HTTP gateway, against
// the same calls over direct gRPC (loopback TCP), with N jobs in the store. Prints medians
// and the ratio; the two transports alternate so machine noise hits both alike.
//
// Then what the portal's job list does: page 1 and page 100 (page_size 100) of
// the N jobs through the gateway, in id order (page tokens) and sorted by name (offset),
// with p50 and p99 against the target p99 <= 20 ms; each in the default summary view and
// with view=full (whole specs, what lists returned before) as the baseline.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "server/coordinator.h"
#include "tests/testing/process.h"

namespace {

using llamafleet::testing::Percentile;

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The value of "next_page_token" in a ListJobs JSON body ("" if none).
std::string NextPageToken(const std::string& body) {
  std::string key = "\"next_page_token\":";
  size_t at = body.find(key);
  if (at == std::string::npos) at = body.find(key = "\"nextPageToken\":");
  if (at == std::string::npos) return "";
  at = body.find('"', at + key.size());
  if (at == std::string::npos) return "";
  return body.substr(at + 1, body.find('"', at + 1) - at - 1);
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 10000, iterations = 200;
  CLI::App app{"HTTP gateway vs direct gRPC latency"};
  app.add_option("--jobs", jobs, "jobs in the store");
  app.add_option("--iterations", iterations, "calls per measurement");
  CLI11_PARSE(app, argc, argv);

  llamafleet::testing::TempDir dir;
  llamafleet::CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.http_listen = "127.0.0.1:0";
  options.data_dir = dir.path();
  options.auth_enabled = false;
  options.synchronous_full = false;
  options.path_roots = {"/"};
  options.check_job_paths = false;  // the spec's paths are never read
  auto coordinator = llamafleet::Coordinator::Start(options);
  if (!coordinator.ok()) {
    std::fprintf(stderr, "%s\n", coordinator.status().ToString().c_str());
    return 1;
  }
  auto channel = grpc::CreateChannel((*coordinator)->address(), grpc::InsecureChannelCredentials());
  auto stub = llamafleet::v1::JobService::NewStub(channel);
  auto spec = (*llamafleet::ParseJobDocuments(
      "name: bench\nmodel: {preset: tiny, tokenizer: /t.model}\ndata: {train_path: /d.jsonl}\n"))[0].spec;
  for (int done = 0; done < jobs;) {
    llamafleet::v1::SubmitJobsRequest req;
    for (int i = 0; i < 1000 && done < jobs; ++i, ++done) {
      spec.set_name(absl::StrCat("bench-", done));
      *req.add_jobs()->mutable_spec() = spec;
    }
    llamafleet::v1::SubmitJobsResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub->SubmitJobs(&ctx, req, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      return 1;
    }
  }

  net::io_context ioc;
  beast::tcp_stream http(ioc);
  const std::string address = (*coordinator)->http_address();
  const size_t colon = address.rfind(':');
  net::ip::tcp::resolver resolver(ioc);
  http.connect(resolver.resolve(address.substr(0, colon), address.substr(colon + 1)));
  beast::flat_buffer buffer;
  std::string last_body;
  auto http_get = [&](const std::string& target) {
    bhttp::request<bhttp::empty_body> req(bhttp::verb::get, target, 11);
    req.set(bhttp::field::host, "localhost");
    bhttp::write(http, req);
    bhttp::response<bhttp::string_body> res;
    bhttp::read(http, buffer, res);
    if (res.result_int() != 200) std::fprintf(stderr, "HTTP %d %s\n", res.result_int(), res.body().c_str());
    last_body = res.body();
    return res.body().size();
  };
  auto grpc_list = [&] {
    llamafleet::v1::ListJobsRequest req;
    req.set_page_size(100);
    llamafleet::v1::ListJobsResponse resp;
    grpc::ClientContext ctx;
    stub->ListJobs(&ctx, req, &resp);
    return resp.ByteSizeLong();
  };
  auto grpc_get = [&] {
    llamafleet::v1::GetJobRequest req;
    req.set_job_id("5000");
    llamafleet::v1::Job resp;
    grpc::ClientContext ctx;
    stub->GetJob(&ctx, req, &resp);
    return resp.ByteSizeLong();
  };
  auto time_ms = [](auto&& f) {
    const auto start = Clock::now();
    f();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  // Warm up both paths.
  for (int i = 0; i < 20; ++i) {
    grpc_list();
    http_get("/api/v1/jobs?page_size=100");
  }
  std::vector<double> gl, hl, gg, hg;
  size_t list_json = 0, list_proto = 0;
  for (int i = 0; i < iterations; ++i) {
    gl.push_back(time_ms([&] { list_proto = grpc_list(); }));
    hl.push_back(time_ms([&] { list_json = http_get("/api/v1/jobs?page_size=100"); }));
    gg.push_back(time_ms(grpc_get));
    hg.push_back(time_ms([&] { http_get("/api/v1/jobs/5000"); }));
  }
  std::printf("%d jobs, %d iterations, medians:\n", jobs, iterations);
  std::printf("  list page_size=100: gRPC %.3f ms (%zu B proto), HTTP %.3f ms (%zu B JSON), ratio %.2f\n",
              Median(gl), list_proto, Median(hl), list_json, Median(hl) / Median(gl));
  std::printf("  get job:            gRPC %.3f ms, HTTP %.3f ms, ratio %.2f\n", Median(gg), Median(hg),
              Median(hg) / Median(gg));

  // Pages 1 and 100 as the portal asks for them. Page 100's token comes from following
  // the tokens once; the timed calls reuse it.
  // The default (summary) view, and view=full (whole specs: what every list returned
  // before the summary view) as the baseline in the same run.
  for (const auto& [order, view] : std::vector<std::pair<std::string, std::string>>{
           {"", ""}, {"", "full"}, {"name", ""}, {"name", "full"}}) {
    const std::string base = absl::StrCat("/api/v1/jobs?page_size=100",
                                          order.empty() ? "" : "&order_by=" + order,
                                          view.empty() ? "" : "&view=" + view);
    std::string token;
    for (int page = 1; page < 100; ++page) {
      http_get(token.empty() ? base : absl::StrCat(base, "&page_token=", token));
      token = NextPageToken(last_body);
      if (token.empty()) break;
    }
    if (token.empty()) {
      std::fprintf(stderr, "fewer than 100 pages of 100 jobs (--jobs %d)\n", jobs);
      break;
    }
    const std::string page100 = absl::StrCat(base, "&page_token=", token);
    std::vector<double> p1, p100;
    size_t bytes = 0;
    for (int i = 0; i < iterations; ++i) {
      p1.push_back(time_ms([&] { bytes = http_get(base); }));
      p100.push_back(time_ms([&] { http_get(page100); }));
    }
    const std::string what = absl::StrCat(
        order.empty() ? "newest first, page tokens" : "order_by=name, offset",
        view.empty() ? ", summaries" : ", view=full");
    std::printf("  HTTP list page 1   (%s, %zu B): p50 %.3f ms  p99 %.3f ms\n", what.c_str(), bytes,
                Percentile(p1, 0.5), Percentile(p1, 0.99));
    std::printf("  HTTP list page 100 (%s): p50 %.3f ms  p99 %.3f ms  (target p99 <= 20 ms)\n",
                what.c_str(), Percentile(p100, 0.5), Percentile(p100, 0.99));
  }
  (*coordinator)->Shutdown();
  return 0;
}
