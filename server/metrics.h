#ifndef LLAMAFLEET_SERVER_METRICS_H_
#define LLAMAFLEET_SERVER_METRICS_H_

// Prometheus metrics for the coordinator (the format's primitives are in prometheus.h).
//
// CoordinatorMetrics owns the coordinator's live counters and histograms; everything
// else (jobs by state, workers, GPUs, database size) is read from its sources when a
// scrape asks for it, so a scrape always shows the database and the cluster as they are.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/prometheus.h"

namespace llamafleet {

class JobStore;
class ClusterManager;
struct SubmitJobResult;


struct CoordinatorMetricsOptions {
  // The SQLite database file; its size and its -wal file's are reported.
  std::string database_path;
  // Configured GPU quotas per queue (llamafleet_queue_gpu_quota).
  std::map<std::string, int64_t> queue_gpu_quotas;
  // llamafleet_coordinator_start_time_seconds.
  absl::Time start_time = absl::Now();
  // Prices active attempts in llamafleet_cost_total (storage/usage_store.h).
  std::map<std::string, double> pricing;
};

// The coordinator's metrics. Hooks (Record*) are thread-safe and cheap (atomics); Render
// reads the store and the cluster snapshot at scrape time.
class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(CoordinatorMetricsOptions options);
  ~CoordinatorMetrics();

  // The sources Render reads (not owned). Until Attach and after Detach, a scrape shows
  // only the process's own counters. Detach waits for a scrape in progress, so the
  // sources may be destroyed once it returns.
  void Attach(JobStore* store, const ClusterManager* cluster);
  void Detach();

  // How a submitted job was answered (llamafleet_job_submissions_total{result}).
  enum class SubmitResult { kCreated, kDuplicate, kInvalid, kDryRun, kError };
  void RecordSubmissions(SubmitResult result, int64_t jobs);
  // A durable acknowledgement: counts each job as created or duplicate and observes the
  // request's latency (received → acknowledgement sent).
  void RecordSubmitted(const std::vector<SubmitJobResult>& results, absl::Duration latency);
  void RecordSchedulingPass(absl::Duration duration);
  // An attempt's start-up phase (llamafleet_startup_phase_seconds{phase}); names that are
  // not in kStartupPhases (common/startup_phases.h) are not recorded.
  void RecordStartupPhase(const std::string& phase, double seconds);
  // A straggler flagged (llamafleet_stragglers_total{queue,action}; action: the queue's
  // straggler_policy, flag or restart-without).
  void RecordStraggler(const std::string& queue, const std::string& action);
  // A GPU health event read from a worker's samples
  // (llamafleet_gpu_health_events_total{event,fatal}; server/cluster/gpu_health_rules.h).
  void RecordGpuHealthEvent(const std::string& event, bool fatal);
  // Webhook deliveries dropped at a bound of the webhook queue
  // (llamafleet_webhook_deliveries_dropped_total; server/webhooks.h counts into it).
  metrics::Counter* webhook_deliveries_dropped() { return webhook_dropped_all_; }

  // One scrape, in the text exposition format 0.0.4. Thread-safe.
  std::string Render();

  // Content-Type of Render()'s output.
  static constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

 private:
  // Reads SQLite and the cluster snapshot into `out` (scrape_mu_ held).
  void CollectSources(metrics::Exposition* out);
  void CollectRestarts(metrics::Exposition* out);

  // Constant after construction.
  const CoordinatorMetricsOptions options_;

  // Live metrics (thread-safe themselves).
  metrics::CounterFamily submissions_;
  metrics::Counter* submissions_by_result_[5];  // indexed by SubmitResult
  metrics::HistogramFamily submit_latency_;
  metrics::Histogram* submit_latency_all_;
  metrics::HistogramFamily pass_duration_;
  metrics::Histogram* pass_duration_all_;
  metrics::CounterFamily passes_;
  metrics::Counter* passes_all_;
  metrics::HistogramFamily startup_phase_;
  metrics::CounterFamily stragglers_;
  metrics::CounterFamily gpu_health_events_;
  metrics::CounterFamily webhook_dropped_;
  metrics::Counter* webhook_dropped_all_;

  // Scrapes are serialized; the sources are only used under this lock.
  std::mutex scrape_mu_;
  JobStore* store_ ABSL_GUARDED_BY(scrape_mu_) = nullptr;
  const ClusterManager* cluster_ ABSL_GUARDED_BY(scrape_mu_) = nullptr;
  // Restart counts as last read from SQLite, and what deletions (ttl_after_finished
  // removes a job with its attempts) took away since this process started: the counter
  // reported is their sum, so it never goes down while the coordinator runs.
  std::map<std::string, int64_t> restarts_seen_ ABSL_GUARDED_BY(scrape_mu_);
  std::map<std::string, int64_t> restarts_deleted_ ABSL_GUARDED_BY(scrape_mu_);
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_METRICS_H_
