#ifndef LLAMAFLEET_SERVER_PROMETHEUS_H_
#define LLAMAFLEET_SERVER_PROMETHEUS_H_

// The Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), without a client
// library: counters and histograms that hot paths update with lock-free atomics,
// labelled families of them, and an Exposition that renders families of samples.

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

namespace llamafleet {

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

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_PROMETHEUS_H_
