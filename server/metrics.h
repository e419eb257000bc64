#ifndef LLAMAFLEET_SERVER_METRICS_H_
#define LLAMAFLEET_SERVER_METRICS_H_

// Prometheus metrics for the coordinator, without a client library: counters and
// histograms that hot paths update with lock-free atomics, labelled families of them,
// and a renderer of the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
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

namespace llamafleet {

class JobStore;
class ClusterManager;
struct SubmitJobResult;

namespace metrics {

// Label name → value pairs, in the order they are written.
using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(absl::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved for Prometheus).
bool IsValidLabelName(absl::string_view name);
// Escapes \ " and newline as the text format requires inside a label value.
std::string EscapeLabelValue(absl::string_view value);
// Escapes \ and newline as the text format requires in HELP text.
std::string EscapeHelp(absl::string_view help);
// A sample value as Prometheus parses it: shortest round-trip decimal, "+Inf", "-Inf",
// "NaN".
std::string FormatValue(double value);

// A monotonically increasing value. Thread-safe and lock-free.
class Counter {
 public:
  // `amount` must be >= 0 (negative or NaN amounts are ignored: a counter never goes down).
  void Increment(double amount = 1);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into fixed buckets. Observe() is lock-free (atomic adds).
class Histogram {
 public:
  // `upper_bounds`: finite and strictly increasing (an invariant: violating it aborts);
  // the +Inf bucket is implicit.
  explicit Histogram(std::vector<double> upper_bounds);

  // NaN is ignored.
  void Observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;  // without +Inf
    // Cumulative counts: cumulative[i] observations <= upper_bounds[i]; the last entry
    // (one more than upper_bounds) is the +Inf bucket and equals `count`.
    std::vector<uint64_t> cumulative;
    uint64_t count = 0;
    double sum = 0;
  };
  // Consistent in itself (count is the +Inf bucket) even while others observe.
  Snapshot Snap() const;

  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  const std::vector<double> upper_bounds_;
  // Per-bucket (not cumulative) counts; the last one is the +Inf bucket.
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
};

// Bucket bounds base * factor^i, i = 0..count-1.
std::vector<double> ExponentialBuckets(double base, double factor, int count);

// One scrape's worth of samples, rendered as text. HELP and TYPE are written once per
// family, before its first sample; families keep the order they were declared in.
// Series are unique: a second sample with the same name and labels is dropped, as are
// samples with invalid names and samples of undeclared families (dropped() counts them;
// tests assert it stays 0). Not thread-safe: build one per scrape.
class Exposition {
 public:
  // Declares family `name`. Declaring it again with the same type does nothing; with
  // another type, or an invalid name, the family is refused (its samples are dropped).
  void Declare(absl::string_view name, absl::string_view help, MetricType type);

  // A counter or gauge sample of family `name`.
  void Add(absl::string_view name, const Labels& labels, double value);
  // A histogram's _bucket (with le), _sum and _count samples.
  void AddHistogram(absl::string_view name, const Labels& labels,
                    const Histogram::Snapshot& snapshot);

  std::string Text() const;
  int dropped() const { return dropped_; }

 private:
  struct Family {
    std::string name;
    std::string help;
    MetricType type;
    bool refused = false;
    std::string samples;  // rendered lines
  };
  // Appends one line to `family` unless its series is already there.
  void AddLine(Family& family, absl::string_view sample_name, const Labels& labels,
               absl::string_view value);
  Family* Find(absl::string_view name);

  std::vector<Family> families_;
  std::map<std::string, size_t, std::less<>> index_;  // family name → families_ index
  std::map<std::string, bool, std::less<>> series_;   // rendered "name{labels}" seen
  int dropped_ = 0;
};

// A family of counters, one per combination of label values. Thread-safe; a child's
// reference stays valid for the family's lifetime, so hot paths look it up once.
class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names);
  // `values` must have one value per label name (an invariant: violating it aborts).
  Counter& WithLabels(const std::vector<std::string>& values);
  void Collect(Exposition* out) const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Counter>> children_ ABSL_GUARDED_BY(mu_);
};

// A family of histograms sharing bucket bounds. Thread-safe, as CounterFamily.
class HistogramFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> upper_bounds);
  Histogram& WithLabels(const std::vector<std::string>& values);
  void Collect(Exposition* out) const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> upper_bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Histogram>> children_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metrics

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
