// Prometheus metrics: the text format (escaping, histograms, unique series), and a real
// coordinator in-process scraped after gRPC submissions and a fake worker's session with
// GPU samples, checked by Prometheus's own `promtool check metrics`. The Grafana
// dashboard's queries are checked against the same scrape.
#include "server/metrics.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.grpc.pb.h"
#include "llamafleet/v1/worker.grpc.pb.h"
#include "server/coordinator.h"
#include "tests/testing/process.h"
#include "tests/testing/wait.h"
#include "tests/testing/spec_builder.h"
#include "tests/testing/in_process.h"

namespace llamafleet {
namespace {

using ::llamafleet::testing::RunCommand;
using ::llamafleet::testing::TempDir;
using metrics::Counter;
using metrics::CounterFamily;
using metrics::Exposition;
using metrics::Histogram;
using metrics::HistogramFamily;
using metrics::MetricType;

// Path of `name` on $PATH, or "".
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/", name);
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs `promtool check metrics` on `text`. A missing promtool is a failure, not a skip:
// the exposition format is only as valid as the checker that reads it.
void ExpectPromtoolAccepts(const std::string& text) {
  const std::string promtool = FindOnPath("promtool");
  ASSERT_FALSE(promtool.empty())
      << "promtool not found on PATH: install the Debian package `prometheus` "
         "(deploy/local/install-deps.sh does)";
  absl::StatusOr<testing::CommandResult> r = RunCommand({promtool, "check", "metrics"}, text);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << "promtool check metrics:\n"
                             << r->out << r->err << "\n--- input ---\n"
                             << text;
}

// Series ("name{labels}" exactly as rendered) → value.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    const std::string value(line.substr(space + 1));
    if (value == "+Inf") {
      v = std::numeric_limits<double>::infinity();
    } else {
      EXPECT_TRUE(absl::SimpleAtod(value, &v)) << line;
    }
    EXPECT_TRUE(out.emplace(std::string(line.substr(0, space)), v).second)
        << "duplicate series: " << line;
  }
  return out;
}

// Sample names (without labels) in a scrape.
std::set<std::string> SampleNames(const std::string& text) {
  std::set<std::string> names;
  for (const auto& [series, v] : ParseSamples(text)) {
    names.insert(series.substr(0, series.find('{')));
  }
  return names;
}

// ---------------------------------------------------------------------------
// The format.
// ---------------------------------------------------------------------------

TEST(MetricsFormatTest, FormatsValuesAsPrometheusParsesThem) {
  EXPECT_EQ(metrics::FormatValue(0), "0");
  EXPECT_EQ(metrics::FormatValue(42), "42");
  EXPECT_EQ(metrics::FormatValue(0.25), "0.25");
  EXPECT_EQ(metrics::FormatValue(0.1), "0.1");  // shortest round trip, not 0.1000000000000000055
  EXPECT_EQ(metrics::FormatValue(0.0005), "0.0005");
  EXPECT_EQ(metrics::FormatValue(1796010146.2474327), "1796010146.2474327");
  EXPECT_EQ(metrics::FormatValue(123456789012), "123456789012");
  EXPECT_EQ(metrics::FormatValue(2.5e-7), "2.5e-07");
  EXPECT_EQ(metrics::FormatValue(1e21), "1e+21");
  EXPECT_EQ(metrics::FormatValue(-3.5), "-3.5");
  EXPECT_EQ(metrics::FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(metrics::FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(metrics::FormatValue(std::nan("")), "NaN");
}

TEST(MetricsFormatTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(metrics::EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(metrics::EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(metrics::EscapeLabelValue("Grüße 温度"), "Grüße 温度");  // UTF-8 kept
  // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an overlong '/')
  // becomes U+FFFD: Prometheus refuses a scrape with invalid UTF-8 in a label value.
  EXPECT_EQ(metrics::EscapeLabelValue("a\x80z"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(metrics::EscapeLabelValue("\xE6\xB8"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(metrics::EscapeLabelValue("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(metrics::EscapeHelp("a\\b\nc \"q\""), "a\\\\b\\nc \"q\"");  // quotes stay in HELP
}

TEST(MetricsFormatTest, ValidatesNames) {
  EXPECT_TRUE(metrics::IsValidMetricName("llamafleet_jobs"));
  EXPECT_TRUE(metrics::IsValidMetricName("DCGM_FI_DEV_GPU_UTIL"));
  EXPECT_TRUE(metrics::IsValidMetricName("a:b_c9"));
  EXPECT_FALSE(metrics::IsValidMetricName(""));
  EXPECT_FALSE(metrics::IsValidMetricName("9lives"));
  EXPECT_FALSE(metrics::IsValidMetricName("has-dash"));
  EXPECT_FALSE(metrics::IsValidMetricName("has space"));
  EXPECT_TRUE(metrics::IsValidLabelName("queue"));
  EXPECT_TRUE(metrics::IsValidLabelName("UUID"));
  EXPECT_FALSE(metrics::IsValidLabelName("__name__"));
  EXPECT_FALSE(metrics::IsValidLabelName("a:b"));
  EXPECT_FALSE(metrics::IsValidLabelName("1st"));
}

TEST(MetricsFormatTest, CounterOnlyGoesUp) {
  Counter c;
  c.Increment();
  c.Increment(2.5);
  c.Increment(-1);
  c.Increment(std::nan(""));
  EXPECT_EQ(c.Value(), 3.5);
}

TEST(MetricsFormatTest, CountersAndHistogramsAreExactUnderConcurrency) {
  Counter c;
  Histogram h({1, 2, 3});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        c.Increment();
        h.Observe((i + t) % 5);  // 0, 1, 2, 3, 4 equally often
      }
    });
  }
  // Snapshots taken while others observe are consistent in themselves.
  for (int i = 0; i < 200; ++i) {
    Histogram::Snapshot s = h.Snap();
    EXPECT_EQ(s.cumulative.back(), s.count);
    for (size_t b = 1; b < s.cumulative.size(); ++b)
      EXPECT_LE(s.cumulative[b - 1], s.cumulative[b]);
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), 80000);
  Histogram::Snapshot s = h.Snap();
  EXPECT_EQ(s.count, 80000u);
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{32000, 48000, 64000, 80000}));
  EXPECT_EQ(s.sum, 16000.0 * (0 + 1 + 2 + 3 + 4));
}

TEST(MetricsFormatTest, HistogramBucketsAreCumulativeWithInfEqualToCount) {
  Histogram h({0.25, 1, 10});
  for (double v : {0.125, 0.25, 0.5, 1.0, 5.0, 50.0, 500.0}) h.Observe(v);  // exact in binary
  h.Observe(std::nan(""));                                                  // ignored
  Exposition e;
  e.Declare("x_seconds", "Some durations.", MetricType::kHistogram);
  e.AddHistogram("x_seconds", {{"op", "read"}}, h.Snap());
  EXPECT_EQ(e.Text(),
            "# HELP x_seconds Some durations.\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{op=\"read\",le=\"0.25\"} 2\n"  // a value equal to a bound is in it
            "x_seconds_bucket{op=\"read\",le=\"1\"} 4\n"
            "x_seconds_bucket{op=\"read\",le=\"10\"} 5\n"
            "x_seconds_bucket{op=\"read\",le=\"+Inf\"} 7\n"
            "x_seconds_sum{op=\"read\"} 556.875\n"
            "x_seconds_count{op=\"read\"} 7\n");
  EXPECT_EQ(e.dropped(), 0);
  ExpectPromtoolAccepts(e.Text());
}

TEST(MetricsFormatTest, WritesHelpAndTypeOnceAndEachSeriesOnce) {
  Exposition e;
  e.Declare("llamafleet_things", "Things, by colour.\nSecond line \\ backslash.",
            MetricType::kGauge);
  e.Declare("llamafleet_other_total", "Other.", MetricType::kCounter);
  e.Add("llamafleet_things", {{"colour", "red"}, {"size", "big"}}, 1);
  e.Add("llamafleet_other_total", {}, 7);
  e.Declare("llamafleet_things", "Declared again: ignored.", MetricType::kGauge);
  e.Add("llamafleet_things", {{"colour", "quote\"back\\slash\nnewline"}, {"size", "s"}}, 2);
  e.Add("llamafleet_things", {{"size", "big"}, {"colour", "red"}}, 3);  // same series, reordered
  EXPECT_EQ(e.dropped(), 1);
  e.Add("llamafleet_undeclared", {}, 1);
  e.Add("llamafleet_things", {{"bad-label", "x"}}, 1);
  e.Add("llamafleet_things", {{"__reserved", "x"}}, 1);
  e.Add("llamafleet_things", {{"a", "x"}, {"a", "y"}}, 1);
  e.Declare("not valid", "Refused.", MetricType::kGauge);
  e.Add("not valid", {}, 1);
  e.Declare("llamafleet_other_total", "Conflicting type.", MetricType::kGauge);
  e.Declare("llamafleet_empty", "No samples: not written at all.", MetricType::kGauge);
  EXPECT_EQ(e.dropped(), 7);
  EXPECT_EQ(e.Text(),
            "# HELP llamafleet_things Things, by colour.\\nSecond line \\\\ backslash.\n"
            "# TYPE llamafleet_things gauge\n"
            "llamafleet_things{colour=\"red\",size=\"big\"} 1\n"
            "llamafleet_things{colour=\"quote\\\"back\\\\slash\\nnewline\",size=\"s\"} 2\n"
            "# HELP llamafleet_other_total Other.\n"
            "# TYPE llamafleet_other_total counter\n"
            "llamafleet_other_total 7\n");
  ExpectPromtoolAccepts(e.Text());
}

TEST(MetricsFormatTest, FamiliesKeepOneChildPerLabelValues) {
  CounterFamily requests("llamafleet_requests_total", "Requests.", {"method", "code"});
  Counter& ok = requests.WithLabels({"GET", "200"});
  ok.Increment();
  requests.WithLabels({"GET", "200"}).Increment();  // the same child
  requests.WithLabels({"POST", "500"}).Increment(3);
  EXPECT_EQ(&ok, &requests.WithLabels({"GET", "200"}));
  HistogramFamily latency("llamafleet_request_seconds", "Latency.", {"method"}, {0.5, 1});
  latency.WithLabels({"GET"}).Observe(0.2);
  latency.WithLabels({"PUT"}).Observe(2);
  Exposition e;
  requests.Collect(&e);
  latency.Collect(&e);
  const std::map<std::string, double> s = ParseSamples(e.Text());
  EXPECT_EQ(s.at("llamafleet_requests_total{method=\"GET\",code=\"200\"}"), 2);
  EXPECT_EQ(s.at("llamafleet_requests_total{method=\"POST\",code=\"500\"}"), 3);
  EXPECT_EQ(s.at("llamafleet_request_seconds_bucket{method=\"GET\",le=\"0.5\"}"), 1);
  EXPECT_EQ(s.at("llamafleet_request_seconds_bucket{method=\"PUT\",le=\"1\"}"), 0);
  EXPECT_EQ(s.at("llamafleet_request_seconds_bucket{method=\"PUT\",le=\"+Inf\"}"), 1);
  EXPECT_EQ(s.at("llamafleet_request_seconds_count{method=\"PUT\"}"), 1);
  EXPECT_EQ(e.dropped(), 0);
  ExpectPromtoolAccepts(e.Text());
}

// ---------------------------------------------------------------------------
// A real coordinator.
// ---------------------------------------------------------------------------

constexpr char kJoinToken[] = "metrics-test-token";

v1::JobSpec Spec(const std::string& name, const std::string& queue, int nodes) {
  return testing::SpecBuilder(name).Queue(queue).Nodes(nodes).Build();
}

// A worker session over the real WorkerService: hello with two GPUs, heartbeats with
// their DCGM samples; the first task it is assigned fails (so an attempt ends with a
// failure class), later ones are left alone.
class FakeGpuWorker {
 public:
  FakeGpuWorker(const std::string& address, const std::string& name)
      : stub_(v1::WorkerService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
    stream_ = stub_->Session(&context_);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_worker_name(name);
    hello.mutable_hello()->set_join_token(kJoinToken);
    v1::Inventory* inv = hello.mutable_hello()->mutable_inventory();
    inv->set_host("gpu-host-1");
    inv->set_address("127.0.0.1");
    inv->set_instance_type("p5.48xlarge");
    for (int i = 0; i < 2; ++i) {
      v1::Gpu* g = inv->add_gpus();
      g->set_index(i);
      g->set_model("NVIDIA H100 80GB HBM3");
      g->set_uuid(absl::StrCat("GPU-0000000", i));
      g->set_memory_bytes(int64_t{80} << 30);
    }
    Write(hello);
    // As a real worker: nothing more is sent before the coordinator's welcome.
    v1::CoordinatorMessage welcome;
    EXPECT_TRUE(stream_->Read(&welcome) && welcome.has_welcome()) << welcome.DebugString();
    reader_ = std::thread([this] { Read(); });
  }
  ~FakeGpuWorker() {
    context_.TryCancel();
    reader_.join();
  }

  void Heartbeat() {
    v1::WorkerMessage m;
    for (int i = 0; i < 2; ++i) {
      v1::GpuSample* g = m.mutable_heartbeat()->add_gpus();
      g->set_index(i);
      g->set_gpu_util(87.5 + i);
      g->set_mem_copy_util(40 + i);
      g->set_memory_used_bytes((int64_t{1000} + i) << 20);  // MiB
      g->set_temperature_c(61 + i);
      g->set_power_w(512.25);
      g->set_sm_clock_mhz(1980);
      g->set_xid_errors(i == 1 ? 79 : 0);
      g->set_ecc_uncorrected_volatile(i);
      g->set_clock_throttle_reasons(i == 0 ? 0x40 : 0x4);  // GPU 0 hot: shown, not drained
    }
    Write(m);
  }

 private:
  void Write(const v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> lock(write_mu_);
    stream_->Write(m);
  }
  void Read() {
    v1::CoordinatorMessage m;
    bool failed_one = false;
    while (stream_->Read(&m)) {
      if (!m.has_assign() || failed_one) continue;
      failed_one = true;
      v1::WorkerMessage status;
      v1::TaskStatus* ts = status.mutable_task_status();
      ts->set_task_id(m.assign().task().task_id());
      ts->set_state(v1::TASK_FAILED);
      ts->set_message("rank 0 exited 1");
      v1::RankExit* e = ts->add_exits();
      e->set_rank(0);
      e->set_exit_code(1);
      e->set_last_error("RuntimeError: CUDA error: an illegal memory access");
      Write(status);
    }
  }

  std::unique_ptr<v1::WorkerService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream_;
  std::mutex write_mu_;
  std::thread reader_;
};

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options = testing::InProcessOptions(dir_.path());
    options.join_token = kJoinToken;
    options.queue_gpu_quotas = {{"research", 8}};
    options.heartbeat_timeout = heartbeat_timeout_;
    options.pricing = {{"p5.48xlarge", 98.32}};  // the fake worker's 2 GPUs: 49.16 per GPU-hour
    coordinator_ = testing::StartInProcess(options);
    ASSERT_NE(coordinator_, nullptr);
    stub_ = v1::JobService::NewStub(
        grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { coordinator_.reset(); }

  grpc::Status Submit(const v1::JobSpec& spec, const std::string& key = "", bool dry_run = false,
                      v1::SubmitJobResponse* response = nullptr) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-llamafleet-user", "alice");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_idempotency_key(key);
    req.set_dry_run(dry_run);
    v1::SubmitJobResponse resp;
    return stub_->SubmitJob(&ctx, req, response ? response : &resp);
  }

  // Scrapes until `ready` holds for the parsed samples (the cluster snapshot is
  // published by the scheduling passes, at least every 2 s).
  std::string ScrapeUntil(const std::function<bool(const std::map<std::string, double>&)>& ready) {
    std::string text;
    if (!testing::WaitFor([&] { return ready(ParseSamples(text = coordinator_->MetricsText())); },
                          absl::Seconds(20), absl::Milliseconds(50))) {
      ADD_FAILURE() << "scrape never got ready:\n" << text;
    }
    return text;
  }

  absl::Duration heartbeat_timeout_ = absl::Seconds(10);
  TempDir dir_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

// Workers are lost after 1 s without a heartbeat.
class CoordinatorMetricsFastLossTest : public CoordinatorMetricsTest {
 protected:
  void SetUp() override {
    heartbeat_timeout_ = absl::Seconds(1);
    CoordinatorMetricsTest::SetUp();
  }
};

const std::string kGpu0 =
    "gpu=\"0\",UUID=\"GPU-00000000\",device=\"nvidia0\",model_name=\"NVIDIA H100 80GB HBM3\","
    "Hostname=\"gpu-host-1\",worker=\"gpu-worker-a\"";
const std::string kGpu1 =
    "gpu=\"1\",UUID=\"GPU-00000001\",device=\"nvidia1\",model_name=\"NVIDIA H100 80GB HBM3\","
    "Hostname=\"gpu-host-1\",worker=\"gpu-worker-a\"";

TEST_F(CoordinatorMetricsTest, ScrapeShowsJobsSubmissionsClusterAndDatabase) {
  // Queue "default": three jobs too wide for the cluster (two nodes), one cancelled; a
  // duplicate; a dry run; an invalid one. Queue "research": one job that fits and whose
  // first attempt the fake worker fails.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Submit(Spec(absl::StrCat("wide-", i), "default", 2), absl::StrCat("k", i)).ok());
  }
  ASSERT_TRUE(Submit(Spec("wide-0", "default", 2), "k0").ok());  // duplicate
  ASSERT_TRUE(Submit(Spec("dry", "default", 2), "", /*dry_run=*/true).ok());
  v1::JobSpec invalid = Spec("bad", "default", 2);
  invalid.mutable_training()->set_lr(-1);
  ASSERT_EQ(Submit(invalid).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::SubmitJobResponse to_cancel;
  ASSERT_TRUE(Submit(Spec("cancel-me", "default", 2), "", false, &to_cancel).ok());
  {
    grpc::ClientContext ctx;
    v1::CancelJobRequest req;
    req.set_job_id(to_cancel.job().id());
    v1::CancelJobResponse resp;
    ASSERT_TRUE(stub_->CancelJob(&ctx, req, &resp).ok());
  }
  ASSERT_TRUE(Submit(Spec("fits", "research", 1)).ok());

  FakeGpuWorker worker(coordinator_->address(), "gpu-worker-a");
  worker.Heartbeat();

  const std::string text = ScrapeUntil([](const std::map<std::string, double>& s) {
    auto restarts = s.find("llamafleet_job_restarts_total{failure_class=\"retryable\"}");
    // (The heartbeat's GPU health event is counted apart from its samples: waited for too.)
    return s.count(absl::StrCat("DCGM_FI_DEV_GPU_UTIL{", kGpu1, "}")) && restarts != s.end() &&
           restarts->second == 1 &&
           s.count("llamafleet_gpu_health_events_total{event=\"throttle\",fatal=\"false\"}");
  });
  const std::map<std::string, double> s = ParseSamples(text);
  auto at = [&](const std::string& series) {
    auto it = s.find(series);
    EXPECT_NE(it, s.end()) << "missing " << series << " in\n" << text;
    return it == s.end() ? -1 : it->second;
  };

  // Jobs by state and queue (SQLite), queue depth and quota.
  EXPECT_EQ(at("llamafleet_jobs{state=\"QUEUED\",queue=\"default\"}"), 3);
  EXPECT_EQ(at("llamafleet_jobs{state=\"CANCELLED\",queue=\"default\"}"), 1);
  EXPECT_EQ(at("llamafleet_jobs{state=\"RUNNING\",queue=\"default\"}"), 0);
  EXPECT_EQ(at("llamafleet_jobs{state=\"QUEUED\",queue=\"research\"}"), 1);  // in restart backoff
  EXPECT_EQ(at("llamafleet_queue_depth{queue=\"default\"}"), 3);
  EXPECT_EQ(at("llamafleet_queue_depth{queue=\"research\"}"), 1);
  EXPECT_EQ(at("llamafleet_queue_gpu_quota{queue=\"research\"}"), 8);
  EXPECT_EQ(s.count("llamafleet_queue_gpu_quota{queue=\"default\"}"), 0u);  // unlimited

  // Submissions: per job, by how each was answered; latency of the stored requests.
  EXPECT_EQ(at("llamafleet_job_submissions_total{result=\"created\"}"), 5);
  EXPECT_EQ(at("llamafleet_job_submissions_total{result=\"duplicate\"}"), 1);
  EXPECT_EQ(at("llamafleet_job_submissions_total{result=\"dry_run\"}"), 1);
  EXPECT_EQ(at("llamafleet_job_submissions_total{result=\"invalid\"}"), 1);
  EXPECT_EQ(at("llamafleet_job_submissions_total{result=\"error\"}"), 0);
  EXPECT_EQ(at("llamafleet_submit_latency_seconds_count"), 6);
  EXPECT_EQ(at("llamafleet_submit_latency_seconds_bucket{le=\"+Inf\"}"), 6);
  EXPECT_GT(at("llamafleet_submit_latency_seconds_sum"), 0);

  // Scheduling passes.
  const double passes = at("llamafleet_scheduling_passes_total");
  EXPECT_GE(passes, 1);
  EXPECT_EQ(at("llamafleet_scheduling_pass_duration_seconds_count"), passes);
  EXPECT_EQ(at("llamafleet_scheduling_pass_duration_seconds_bucket{le=\"+Inf\"}"), passes);

  // Workers and GPUs (the failed attempt's task never exits on the fake worker, so its
  // GPU stays held until the attempt is released).
  EXPECT_EQ(at("llamafleet_workers{state=\"ready\"}"), 1);
  EXPECT_EQ(at("llamafleet_workers{state=\"lost\"}"), 0);
  EXPECT_EQ(at("llamafleet_workers{state=\"draining\"}"), 0);
  EXPECT_EQ(at("llamafleet_gpus"), 2);
  EXPECT_GE(at("llamafleet_gpus_allocated"), 0);
  EXPECT_EQ(at("llamafleet_queue_running_jobs{queue=\"default\"}"), 0);

  // Per GPU, as dcgm-exporter names them.
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_GPU_UTIL{", kGpu0, "}")), 87.5);
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_GPU_UTIL{", kGpu1, "}")), 88.5);
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_MEM_COPY_UTIL{", kGpu1, "}")), 41);
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_FB_USED{", kGpu1, "}")), 1001);  // MiB
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_GPU_TEMP{", kGpu0, "}")), 61);
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_POWER_USAGE{", kGpu0, "}")), 512.25);
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_SM_CLOCK{", kGpu0, "}")), 1980);
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_XID_ERRORS{", kGpu1, "}")), 79);
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{", kGpu1, "}")), 1);
  EXPECT_EQ(at(absl::StrCat("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{", kGpu0, "}")), 64);
  // GPU 0's thermal slowdown is one (non-fatal) health event; the XID with no new XID
  // events counted is none.
  EXPECT_EQ(at("llamafleet_gpu_health_events_total{event=\"throttle\",fatal=\"false\"}"), 1);
  EXPECT_EQ(s.count("llamafleet_gpu_health_events_total{event=\"xid\",fatal=\"true\"}"), 0u);

  // Database, restarts (from the attempts table), process.
  EXPECT_GT(at("llamafleet_database_size_bytes{file=\"db\"}"), 0);
  EXPECT_GE(at("llamafleet_database_size_bytes{file=\"wal\"}"), 0);
  EXPECT_GT(at("llamafleet_database_transactions_total"), 0);
  EXPECT_EQ(at("llamafleet_job_restarts_total{failure_class=\"retryable\"}"), 1);
  EXPECT_EQ(at("llamafleet_job_restarts_total{failure_class=\"node_fault\"}"), 0);
  EXPECT_GT(at("llamafleet_coordinator_start_time_seconds"), 1.6e9);

  // GPU time per queue and user: the failed attempt's (1 GPU from placement to its end), priced.
  const double gpu_seconds = at("llamafleet_gpu_seconds_total{queue=\"research\",user=\"alice\"}");
  EXPECT_GT(gpu_seconds, 0);
  EXPECT_EQ(at("llamafleet_failed_gpu_seconds_total{queue=\"research\",user=\"alice\"}"), gpu_seconds);
  EXPECT_NEAR(at("llamafleet_cost_total{queue=\"research\",user=\"alice\"}"), gpu_seconds * 49.16 / 3600,
              1e-9 * gpu_seconds);
  EXPECT_EQ(s.count("llamafleet_gpu_seconds_total{queue=\"default\",user=\"alice\"}"), 0u)
      << "no series for a queue whose jobs never ran";
  EXPECT_EQ(s.count("llamafleet_build_info{version=\"0.1.0\",compiler=\"" __VERSION__ "\"}"), 1u);

  // Each family's HELP and TYPE exactly once, before its samples.
  std::map<std::string, int> types;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "# TYPE ")) continue;
    ++types[std::string(line.substr(0, line.find(' ')))];
  }
  for (const auto& [name, n] : types) EXPECT_EQ(n, 1) << name;
  EXPECT_EQ(types.count("llamafleet_jobs"), 1u);

  ExpectPromtoolAccepts(text);
}

TEST_F(CoordinatorMetricsFastLossTest, LostWorkersGpusAreNotReported) {
  FakeGpuWorker worker(coordinator_->address(), "gpu-worker-a");
  // Heartbeats until a scheduling pass has published the samples (passes run at least
  // every 2 s; the worker would be lost after 1 s of silence).
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        if (absl::StrContains(coordinator_->MetricsText(), "DCGM_FI_DEV_GPU_TEMP{")) return true;
        worker.Heartbeat();
        return false;
      },
      absl::Seconds(20), absl::Milliseconds(100)))
      << coordinator_->MetricsText();
  // No more heartbeats: lost after the timeout; its GPUs leave the scrape.
  const std::string text = ScrapeUntil([](const std::map<std::string, double>& s) {
    auto lost = s.find("llamafleet_workers{state=\"lost\"}");
    return lost != s.end() && lost->second == 1;
  });
  EXPECT_FALSE(absl::StrContains(text, "DCGM_FI_DEV")) << text;
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_gpus 0\n")) << text;
  ExpectPromtoolAccepts(text);
}

TEST_F(CoordinatorMetricsTest, ScrapesAfterShutdownShowOnlyTheProcessCounters) {
  ASSERT_TRUE(Submit(Spec("a", "default", 1)).ok());
  coordinator_->Shutdown();
  const std::string after = coordinator_->MetricsText();
  EXPECT_TRUE(absl::StrContains(after, "llamafleet_job_submissions_total{result=\"created\"} 1"))
      << after;
  EXPECT_FALSE(absl::StrContains(after, "llamafleet_jobs{")) << after;
  ExpectPromtoolAccepts(after);
}

TEST(StartupPhaseMetricsTest, EachPhaseIsAHistogramAndUnknownPhasesAreDropped) {
  CoordinatorMetrics m(CoordinatorMetricsOptions{});
  m.RecordStartupPhase("first_step", 0.3);
  m.RecordStartupPhase("first_step", 42);
  m.RecordStartupPhase("weights_loaded", 700);
  m.RecordStartupPhase("made-up", 1);  // a worker's string never becomes a label value
  m.RecordStartupPhase("placed", 12);  // the coordinator's own: time queued, ranks started
  m.RecordStartupPhase("trainers_started", 0.2);
  const std::string text = m.Render();
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_startup_phase_seconds_count{phase=\"first_step\"} 2")) << text;
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_startup_phase_seconds_bucket{phase=\"first_step\",le=\"0.5\"} 1"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_startup_phase_seconds_count{phase=\"weights_loaded\"} 1"));
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_startup_phase_seconds_count{phase=\"data_ready\"} 0"));
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_startup_phase_seconds_count{phase=\"placed\"} 1"));
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_startup_phase_seconds_count{phase=\"trainers_started\"} 1"));
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_startup_phase_seconds_count{phase=\"rendezvous\"} 0"));
  EXPECT_FALSE(absl::StrContains(text, "made-up"));
  ExpectPromtoolAccepts(text);
}

TEST(ClusterEventMetricsTest, StragglersAndGpuHealthEventsAreCounters) {
  CoordinatorMetrics m(CoordinatorMetricsOptions{});
  m.RecordStraggler("default", "flag");
  m.RecordStraggler("default", "flag");
  m.RecordStraggler("research", "restart-without");
  m.RecordGpuHealthEvent("xid", true);
  m.RecordGpuHealthEvent("throttle", false);
  const std::string text = m.Render();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE llamafleet_stragglers_total counter\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_stragglers_total{queue=\"default\",action=\"flag\"} 2\n")) << text;
  EXPECT_TRUE(
      absl::StrContains(text, "llamafleet_stragglers_total{queue=\"research\",action=\"restart-without\"} 1\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "# TYPE llamafleet_gpu_health_events_total counter\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_gpu_health_events_total{event=\"xid\",fatal=\"true\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "llamafleet_gpu_health_events_total{event=\"throttle\",fatal=\"false\"} 1\n"))
      << text;
  ExpectPromtoolAccepts(text);
}

// ---------------------------------------------------------------------------
// The Grafana dashboard reads only metrics the coordinator exports.
// ---------------------------------------------------------------------------

TEST_F(CoordinatorMetricsTest, DashboardQueriesUseExportedMetrics) {
  const std::string path =
      std::string(LLAMAFLEET_SOURCE_DIR) + "/deploy/grafana/llamafleet-dashboard.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string json = buffer.str();

  const std::string python = FindOnPath("python3");
  ASSERT_FALSE(python.empty());
  absl::StatusOr<testing::CommandResult> parsed = RunCommand({python, "-m", "json.tool", path});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->exit_code, 0) << parsed->err;
  EXPECT_TRUE(absl::StrContains(json, "\"schemaVersion\": 39"));
  EXPECT_TRUE(absl::StrContains(json, "\"uid\": \"${datasource}\""));

  // A scrape with every family present: a job, a worker with GPU samples.
  ASSERT_TRUE(Submit(Spec("fits", "research", 1)).ok());
  FakeGpuWorker worker(coordinator_->address(), "gpu-worker-a");
  worker.Heartbeat();
  const std::string text = ScrapeUntil([](const std::map<std::string, double>& s) {
    auto restarts = s.find("llamafleet_job_restarts_total{failure_class=\"retryable\"}");
    return s.count(absl::StrCat("DCGM_FI_DEV_SM_CLOCK{", kGpu0, "}")) && restarts != s.end() &&
           restarts->second == 1;
  });
  const std::set<std::string> exported = SampleNames(text);

  // Panel queries ("expr") and template variable queries ("definition").
  const std::regex expr_re("\"(?:expr|definition)\":\\s*\"((?:[^\"\\\\]|\\\\.)*)\"");
  const std::regex name_re("\\b(llamafleet_[a-zA-Z0-9_:]+|DCGM_FI_[A-Z0-9_]+)");
  int exprs = 0;
  std::set<std::string> used;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), expr_re);
       it != std::sregex_iterator(); ++it) {
    ++exprs;
    const std::string expr = (*it)[1];
    for (auto n = std::sregex_iterator(expr.begin(), expr.end(), name_re);
         n != std::sregex_iterator(); ++n) {
      used.insert((*n)[1]);
    }
  }
  EXPECT_GE(exprs, 15);
  for (const std::string& name : used) {
    EXPECT_TRUE(exported.count(name))
        << "the dashboard queries " << name << ", which the coordinator does not export";
  }
  // And the panels the dashboard promises are there.
  for (const char* name :
       {"llamafleet_jobs", "llamafleet_queue_depth", "llamafleet_job_submissions_total",
        "llamafleet_submit_latency_seconds_bucket",
        "llamafleet_scheduling_pass_duration_seconds_bucket", "llamafleet_workers",
        "llamafleet_gpus", "llamafleet_gpus_allocated", "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS", "llamafleet_database_size_bytes",
        "llamafleet_job_restarts_total"}) {
    EXPECT_TRUE(used.count(name)) << "no panel queries " << name;
  }
}

}  // namespace
}  // namespace llamafleet
