#include "server/metrics.h"

#include "server/usage_metrics.h"
#include "server/worker_health_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/startup_phases.h"
#include "llamafleet/v1/job.pb.h"
#include "llamafleet/v1/worker.pb.h"
#include "server/cluster/cluster_manager.h"
#include "spdlog/spdlog.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"

#ifndef LLAMAFLEET_VERSION
#define LLAMAFLEET_VERSION "dev"
#endif

namespace llamafleet {
namespace {

using metrics::Exposition;
using metrics::Labels;
using metrics::MetricType;

constexpr const char* kSubmitResults[] = {"created", "duplicate", "invalid", "dry_run", "error"};

// Failure classes written by EndAttemptTxn (storage/cluster_store.cc): always reported,
// so a class that never happened is a 0, not a missing series.
constexpr const char* kFailureClasses[] = {"retryable", "node_fault", "permanent", "deadline",
                                           "preempted"};

// Submit latency is dominated by the commit's fsync: 0.5 ms .. 10 s.
const std::vector<double> kSubmitLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,    0.25,  0.5,    1,     2.5,  5,     10};
// A start-up phase: under a second (a cache hit, a small model) to half an hour (a 70B
// checkpoint read from shared storage, a first tokenization of a large dataset).
const std::vector<double> kStartupBuckets = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
// A scheduling pass reads the queue and runs the scheduler: 100 µs .. 10 s.
const std::vector<double> kPassBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                          0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                          1,      2.5,     5,      10};

const char* WorkerStateLabel(v1::WorkerState state) {
  switch (state) {
    case v1::WORKER_READY:
      return "ready";
    case v1::WORKER_LOST:
      return "lost";
    case v1::WORKER_DRAINING:
      return "draining";
    case v1::WORKER_DISCONNECTED:
      return "disconnected";
    default:
      return nullptr;
  }
}

int64_t FileSize(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}

// The per-GPU series, named and labelled as NVIDIA's dcgm-exporter names them (its
// default counters), so dashboards written for it work on these.
struct DcgmField {
  const char* name;
  const char* help;
  double (*value)(const v1::GpuSample&);
};
const DcgmField kDcgmFields[] = {
    {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
     [](const v1::GpuSample& g) { return g.gpu_util(); }},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).",
     [](const v1::GpuSample& g) { return g.mem_copy_util(); }},
    {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
     [](const v1::GpuSample& g) {
       return static_cast<double>(g.memory_used_bytes() / (int64_t{1} << 20));
     }},
    {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).",
     [](const v1::GpuSample& g) { return g.temperature_c(); }},
    {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).",
     [](const v1::GpuSample& g) { return g.power_w(); }},
    {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).",
     [](const v1::GpuSample& g) { return g.sm_clock_mhz(); }},
    {"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.",
     [](const v1::GpuSample& g) { return static_cast<double>(g.xid_errors()); }},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
     [](const v1::GpuSample& g) { return static_cast<double>(g.ecc_uncorrected_volatile()); }},
    {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).",
     [](const v1::GpuSample& g) { return static_cast<double>(g.clock_throttle_reasons()); }},
};

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(CoordinatorMetricsOptions options)
    : options_(std::move(options)),
      submissions_("llamafleet_job_submissions_total",
                   "Jobs submitted, by how they were answered: created, duplicate (an "
                   "idempotency key matched an existing job), invalid (refused by validation), "
                   "dry_run, error (the store could not commit).",
                   {"result"}),
      submit_latency_("llamafleet_submit_latency_seconds",
                      "Submit requests that were stored, from receipt to the durable "
                      "acknowledgement (after the commit's fsync).",
                      {}, kSubmitLatencyBuckets),
      pass_duration_("llamafleet_scheduling_pass_duration_seconds",
                     "Duration of the coordinator's scheduling passes (reading the queue, "
                     "placing gangs, publishing the results).",
                     {}, kPassBuckets),
      passes_("llamafleet_scheduling_passes_total", "Scheduling passes run.", {}),
      startup_phase_("llamafleet_startup_phase_seconds",
                     "Start-up phases of each attempt: placed (time queued before the placement), "
                     "trainers_started (placement to every rank running), and the trainer's rank 0's "
                     "data_ready (token cache hit or built), rendezvous, weights_loaded, first_step.",
                     {"phase"}, kStartupBuckets),
      stragglers_("llamafleet_stragglers_total",
                  "Ranks flagged as stragglers (working more than the straggler factor x the other "
                  "ranks' median a step, rounds in a row), by queue and its straggler_policy.",
                  {"queue", "action"}),
      gpu_health_events_("llamafleet_gpu_health_events_total",
                         "GPU health events read from the workers' samples: xid, ecc (new uncorrectable "
                         "errors), gone, throttle (clocks held down for heat or power); fatal ones drain "
                         "their worker.",
                         {"event", "fatal"}),
      webhook_dropped_("llamafleet_webhook_deliveries_dropped_total",
                       "Webhook deliveries dropped unsent because a bound of the webhook queue was "
                       "reached: one job owner's waiting deliveries, or all owners' together (each "
                       "drop is logged with the owner).",
                       {}) {
  for (std::string_view phase : kStartupPhases) startup_phase_.WithLabels({std::string(phase)});
  for (int i = 0; i < 5; ++i)
    submissions_by_result_[i] = &submissions_.WithLabels({kSubmitResults[i]});
  submit_latency_all_ = &submit_latency_.WithLabels({});
  pass_duration_all_ = &pass_duration_.WithLabels({});
  passes_all_ = &passes_.WithLabels({});
  webhook_dropped_all_ = &webhook_dropped_.WithLabels({});
}

CoordinatorMetrics::~CoordinatorMetrics() = default;

void CoordinatorMetrics::Attach(JobStore* store, const ClusterManager* cluster) {
  std::lock_guard<std::mutex> lock(scrape_mu_);
  store_ = store;
  cluster_ = cluster;
}

void CoordinatorMetrics::Detach() { Attach(nullptr, nullptr); }

void CoordinatorMetrics::RecordSubmissions(SubmitResult result, int64_t jobs) {
  submissions_by_result_[static_cast<int>(result)]->Increment(static_cast<double>(jobs));
}

void CoordinatorMetrics::RecordSubmitted(const std::vector<SubmitJobResult>& results,
                                         absl::Duration latency) {
  int64_t created = 0;
  for (const SubmitJobResult& r : results) created += r.created ? 1 : 0;
  if (created > 0) RecordSubmissions(SubmitResult::kCreated, created);
  if (created < static_cast<int64_t>(results.size())) {
    RecordSubmissions(SubmitResult::kDuplicate, static_cast<int64_t>(results.size()) - created);
  }
  submit_latency_all_->Observe(absl::ToDoubleSeconds(latency));
}

void CoordinatorMetrics::RecordStartupPhase(const std::string& phase, double seconds) {
  if (!IsStartupPhase(phase)) return;
  startup_phase_.WithLabels({phase}).Observe(seconds);
}

void CoordinatorMetrics::RecordStraggler(const std::string& queue, const std::string& action) {
  stragglers_.WithLabels({queue, action}).Increment();
}

void CoordinatorMetrics::RecordGpuHealthEvent(const std::string& event, bool fatal) {
  gpu_health_events_.WithLabels({event, fatal ? "true" : "false"}).Increment();
}

void CoordinatorMetrics::RecordSchedulingPass(absl::Duration duration) {
  pass_duration_all_->Observe(absl::ToDoubleSeconds(duration));
  passes_all_->Increment();
}

std::string CoordinatorMetrics::Render() {
  std::lock_guard<std::mutex> lock(scrape_mu_);
  Exposition out;
  out.Declare("llamafleet_build_info",
              "A constant 1, labelled with the coordinator's version and compiler.",
              MetricType::kGauge);
  out.Add("llamafleet_build_info", {{"version", LLAMAFLEET_VERSION}, {"compiler", __VERSION__}}, 1);
  out.Declare("llamafleet_coordinator_start_time_seconds",
              "When the coordinator started, in seconds since the Unix epoch.", MetricType::kGauge);
  out.Add("llamafleet_coordinator_start_time_seconds", {},
          absl::ToDoubleSeconds(options_.start_time - absl::UnixEpoch()));
  submissions_.Collect(&out);
  submit_latency_.Collect(&out);
  pass_duration_.Collect(&out);
  passes_.Collect(&out);
  stragglers_.Collect(&out);
  gpu_health_events_.Collect(&out);
  webhook_dropped_.Collect(&out);
  startup_phase_.Collect(&out);
  if (store_ != nullptr && cluster_ != nullptr) CollectSources(&out);
  if (out.dropped() > 0) spdlog::error("metrics: {} samples dropped from a scrape", out.dropped());
  return out.Text();
}

void CoordinatorMetrics::CollectSources(Exposition* out) {
  // Jobs by queue and state (SQLite), and the queues' view.
  const ClusterUsage usage = cluster_->Usage();
  std::set<std::string> queues;
  for (const auto& [queue, quota] : options_.queue_gpu_quotas) queues.insert(queue);
  for (const auto& [queue, u] : usage.queues) queues.insert(queue);
  absl::StatusOr<std::map<std::string, JobCounts>> counts = store_->CountJobsByQueue();
  if (!counts.ok()) {
    spdlog::warn("metrics: cannot count jobs: {}", counts.status().ToString());
  } else {
    out->Declare("llamafleet_jobs", "Jobs in the database, by state and queue.",
                 MetricType::kGauge);
    for (const auto& [queue, c] : *counts) {
      queues.insert(queue);
      for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
        if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) continue;
        const auto state = static_cast<v1::JobState>(s);
        auto it = c.by_state.find(state);
        out->Add("llamafleet_jobs", {{"state", v1::JobState_Name(state)}, {"queue", queue}},
                 it == c.by_state.end() ? 0 : static_cast<double>(it->second));
      }
    }
    out->Declare("llamafleet_queue_depth", "Jobs waiting in the queue (QUEUED).",
                 MetricType::kGauge);
    for (const std::string& queue : queues) {
      int64_t queued = 0;
      if (auto q = counts->find(queue); q != counts->end()) {
        if (auto s = q->second.by_state.find(v1::QUEUED); s != q->second.by_state.end()) {
          queued = s->second;
        }
      }
      out->Add("llamafleet_queue_depth", {{"queue", queue}}, static_cast<double>(queued));
    }
  }
  out->Declare("llamafleet_queue_gpu_quota", "GPUs a queue may hold at once (configured quotas).",
               MetricType::kGauge);
  for (const auto& [queue, quota] : options_.queue_gpu_quotas) {
    out->Add("llamafleet_queue_gpu_quota", {{"queue", queue}}, static_cast<double>(quota));
  }
  out->Declare("llamafleet_queue_gpus_allocated",
               "GPUs (CPU ranks on CPU workers) held by a queue's attempts.", MetricType::kGauge);
  out->Declare("llamafleet_queue_running_jobs",
               "A queue's jobs with an active attempt (scheduled, running or preempting).",
               MetricType::kGauge);
  for (const std::string& queue : queues) {
    auto it = usage.queues.find(queue);
    const QueueUsage u = it == usage.queues.end() ? QueueUsage{} : it->second;
    out->Add("llamafleet_queue_gpus_allocated", {{"queue", queue}},
             static_cast<double>(u.gpus_allocated));
    out->Add("llamafleet_queue_running_jobs", {{"queue", queue}},
             static_cast<double>(u.running_jobs));
  }

  // Workers and GPUs (the cluster manager's last published snapshot).
  out->Declare("llamafleet_workers", "Registered workers, by state.", MetricType::kGauge);
  for (v1::WorkerState state :
       {v1::WORKER_READY, v1::WORKER_LOST, v1::WORKER_DRAINING, v1::WORKER_DISCONNECTED}) {
    auto it = usage.workers.find(state);
    out->Add("llamafleet_workers", {{"state", WorkerStateLabel(state)}},
             it == usage.workers.end() ? 0 : it->second);
  }
  out->Declare("llamafleet_gpus",
               "GPUs on workers that are not lost (CPU ranks on CPU-only workers: the "
               "scheduler's unit).",
               MetricType::kGauge);
  out->Add("llamafleet_gpus", {}, static_cast<double>(usage.gpus_total));
  out->Declare("llamafleet_gpus_allocated", "Of llamafleet_gpus, those held by attempts.",
               MetricType::kGauge);
  out->Add("llamafleet_gpus_allocated", {}, static_cast<double>(usage.gpus_allocated));

  CollectWorkerHealth(cluster_->Workers(), out);

  // Per GPU, from the workers' last heartbeats; a lost worker's GPUs are not reported.
  for (const DcgmField& field : kDcgmFields)
    out->Declare(field.name, field.help, MetricType::kGauge);
  for (const v1::WorkerInfo& w : cluster_->Workers()) {
    if (w.state() == v1::WORKER_LOST) continue;
    for (const v1::GpuSample& g : w.gpus()) {
      if (g.gone()) continue;  // nothing was read of it
      std::string uuid, model;
      for (const v1::Gpu& inv : w.inventory().gpus()) {
        if (inv.index() == g.index()) {
          uuid = inv.uuid();
          model = inv.model();
        }
      }
      // dcgm-exporter's labels, except modelName: promtool's linter refuses camelCase
      // label names, so it is model_name here.
      const Labels labels = {
          {"gpu", absl::StrCat(g.index())},
          {"UUID", uuid},
          {"device", absl::StrCat("nvidia", g.index())},
          {"model_name", model},
          {"Hostname", w.inventory().host().empty() ? w.name() : w.inventory().host()},
          {"worker", w.name()}};
      for (const DcgmField& field : kDcgmFields) out->Add(field.name, labels, field.value(g));
    }
  }

  // The database.
  out->Declare("llamafleet_database_size_bytes",
               "Size of the SQLite database file (db) and its write-ahead log (wal). The WAL is "
               "checkpointed in the background once it passes the checkpoint threshold (1,000 "
               "pages by default) and grows past that only while checkpoints fall behind.",
               MetricType::kGauge);
  out->Add("llamafleet_database_size_bytes", {{"file", "db"}},
           static_cast<double>(FileSize(options_.database_path)));
  out->Add("llamafleet_database_size_bytes", {{"file", "wal"}},
           static_cast<double>(FileSize(options_.database_path + "-wal")));
  const JobStore::WriterStats stats = store_->writer_stats();
  out->Declare("llamafleet_database_transactions_total",
               "Write transactions committed (each holds a group of writes).",
               MetricType::kCounter);
  out->Add("llamafleet_database_transactions_total", {}, static_cast<double>(stats.transactions));
  out->Declare("llamafleet_database_writes_total", "Writes committed.", MetricType::kCounter);
  out->Add("llamafleet_database_writes_total", {}, static_cast<double>(stats.writes));
  CollectRestarts(out);
  CollectUsage(*store_, options_.pricing, out);
}

void CoordinatorMetrics::CollectRestarts(Exposition* out) {
  absl::StatusOr<std::map<std::string, int64_t>> counts = CountAttemptFailures(*store_);
  if (!counts.ok()) {
    spdlog::warn("metrics: cannot count attempt failures: {}", counts.status().ToString());
    return;
  }
  std::set<std::string> classes(std::begin(kFailureClasses), std::end(kFailureClasses));
  for (const auto& [c, n] : *counts) classes.insert(c);
  for (const auto& [c, n] : restarts_seen_) classes.insert(c);
  out->Declare("llamafleet_job_restarts_total",
               "Attempts ended by a failure or a preemption, by failure class (from the "
               "database, so it survives coordinator restarts). retryable and node_fault "
               "attempts are restarted while the run policy has restarts left, preempted ones "
               "always; permanent and deadline fail the job.",
               MetricType::kCounter);
  for (const std::string& c : classes) {
    const auto it = counts->find(c);
    const int64_t now = it == counts->end() ? 0 : it->second;
    int64_t& seen = restarts_seen_[c];
    if (now < seen) restarts_deleted_[c] += seen - now;  // jobs deleted since the last scrape
    seen = now;
    out->Add("llamafleet_job_restarts_total", {{"failure_class", c}},
             static_cast<double>(now + restarts_deleted_[c]));
  }
}

}  // namespace llamafleet
