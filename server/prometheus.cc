#include "server/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace llamafleet {
namespace metrics {
namespace {

// An invariant broken by the code itself (not by input): stop loudly.
[[noreturn]] void Invariant(const std::string& what) {
  spdlog::critical("metrics: {}", what);
  std::abort();
}

// Adds `amount` to an atomic double (C++17 has no fetch_add for floating point).
void AtomicAdd(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not one.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", labels[i].first, "=\"", EscapeLabelValue(labels[i].second),
                    "\"");
  }
  out += "}";
  return out;
}

Labels Zip(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  Labels labels;
  for (size_t i = 0; i < names.size(); ++i) labels.emplace_back(names[i], values[i]);
  return labels;
}

}  // namespace

bool IsValidMetricName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok =
        absl::ascii_isalpha(c) || c == '_' || c == ':' || (i > 0 && absl::ascii_isdigit(c));
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || absl::StartsWith(name, "__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = absl::ascii_isalpha(c) || c == '_' || (i > 0 && absl::ascii_isdigit(c));
    if (!ok) return false;
  }
  return true;
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size();) {
    const size_t n = Utf8SequenceLength(value, i);
    if (n == 0) {
      // Label values come from outside (worker names, GPU models); Prometheus rejects a
      // scrape with invalid UTF-8, so a bad byte becomes U+FFFD.
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (n == 1) {
      switch (value[i]) {
        case '\\':
          out += "\\\\";
          break;
        case '"':
          out += "\\\"";
          break;
        case '\n':
          out += "\\n";
          break;
        default:
          out += value[i];
      }
    } else {
      out.append(value.data() + i, n);
    }
    i += n;
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  const double magnitude = std::fabs(value);
  if (value == std::trunc(value) && magnitude < 9007199254740992.0) {  // 2^53: exact integers
    return absl::StrCat(static_cast<int64_t>(value));
  }
  // Shortest round-trip digits; plain decimals where that reads naturally (le="0.0005",
  // not "5e-04"), exponents for the very small and the very large.
  char buf[400];
  const std::chars_format format = magnitude >= 1e-4 && magnitude < 1e21
                                       ? std::chars_format::fixed
                                       : std::chars_format::scientific;
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), value, format);
  return std::string(buf, r.ptr);
}

void Counter::Increment(double amount) {
  if (!(amount >= 0)) return;  // negative or NaN
  AtomicAdd(value_, amount);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      buckets_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    if (!std::isfinite(upper_bounds_[i]) || (i > 0 && upper_bounds_[i] <= upper_bounds_[i - 1])) {
      Invariant("histogram bucket bounds must be finite and strictly increasing");
    }
  }
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // Bucket i counts values in (bound[i-1], bound[i]]; past the last bound: +Inf.
  const size_t i =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Snap() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  s.cumulative.resize(upper_bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    total += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;  // == the +Inf bucket, by construction
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

// ---------------------------------------------------------------------------
// Exposition
// ---------------------------------------------------------------------------

Exposition::Family* Exposition::Find(absl::string_view name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &families_[it->second];
}

void Exposition::Declare(absl::string_view name, absl::string_view help, MetricType type) {
  if (Family* f = Find(name)) {
    if (f->type != type) {
      spdlog::error("metrics: {} declared as {} and as {}", std::string(name), TypeName(f->type),
                    TypeName(type));
      ++dropped_;
    }
    return;
  }
  Family f;
  f.name = std::string(name);
  f.help = std::string(help);
  f.type = type;
  f.refused = !IsValidMetricName(name);
  if (f.refused) spdlog::error("metrics: invalid metric name '{}'", std::string(name));
  index_.emplace(f.name, families_.size());
  families_.push_back(std::move(f));
}

void Exposition::AddLine(Family& family, absl::string_view sample_name, const Labels& labels,
                         absl::string_view value) {
  if (family.refused) {
    ++dropped_;
    return;
  }
  std::set<absl::string_view> names;
  for (const auto& [name, v] : labels) {
    if (!IsValidLabelName(name) || !names.insert(name).second) {
      spdlog::error("metrics: {}: invalid or repeated label name '{}'", std::string(sample_name),
                    std::string(name));
      ++dropped_;
      return;
    }
  }
  // The same series is the same set of labels, whatever their order.
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string key = absl::StrCat(sample_name, RenderLabels(sorted));
  if (!series_.emplace(std::move(key), true).second) {
    ++dropped_;
    return;
  }
  absl::StrAppend(&family.samples, sample_name, RenderLabels(labels), " ", value, "\n");
}

void Exposition::Add(absl::string_view name, const Labels& labels, double value) {
  Family* f = Find(name);
  if (f == nullptr || f->type == MetricType::kHistogram) {
    spdlog::error("metrics: sample of undeclared (or histogram) family {}", std::string(name));
    ++dropped_;
    return;
  }
  AddLine(*f, name, labels, FormatValue(value));
}

void Exposition::AddHistogram(absl::string_view name, const Labels& labels,
                              const Histogram::Snapshot& snapshot) {
  Family* f = Find(name);
  if (f == nullptr || f->type != MetricType::kHistogram) {
    spdlog::error("metrics: histogram samples for undeclared (or other) family {}",
                  std::string(name));
    ++dropped_;
    return;
  }
  for (const auto& [label, v] : labels) {
    if (label == "le") {  // reserved for the bucket bound
      ++dropped_;
      return;
    }
  }
  const std::string bucket = absl::StrCat(name, "_bucket");
  for (size_t i = 0; i < snapshot.cumulative.size(); ++i) {
    Labels with_le = labels;
    with_le.emplace_back("le", i < snapshot.upper_bounds.size()
                                   ? FormatValue(snapshot.upper_bounds[i])
                                   : std::string("+Inf"));
    AddLine(*f, bucket, with_le, absl::StrCat(snapshot.cumulative[i]));
  }
  AddLine(*f, absl::StrCat(name, "_sum"), labels, FormatValue(snapshot.sum));
  AddLine(*f, absl::StrCat(name, "_count"), labels, absl::StrCat(snapshot.count));
}

std::string Exposition::Text() const {
  std::string out;
  for (const Family& f : families_) {
    if (f.refused || f.samples.empty()) continue;
    absl::StrAppend(&out, "# HELP ", f.name, " ", EscapeHelp(f.help), "\n# TYPE ", f.name, " ",
                    TypeName(f.type), "\n", f.samples);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Families
// ---------------------------------------------------------------------------

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}

Counter& CounterFamily::WithLabels(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) {
    Invariant(absl::StrCat(name_, ": ", values.size(), " label values for ", label_names_.size(),
                           " labels"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Counter>& c = children_[values];
  if (c == nullptr) c = std::make_unique<Counter>();
  return *c;
}

void CounterFamily::Collect(Exposition* out) const {
  out->Declare(name_, help_, MetricType::kCounter);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, counter] : children_) {
    out->Add(name_, Zip(label_names_, values), counter->Value());
  }
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names,
                                 std::vector<double> upper_bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      upper_bounds_(std::move(upper_bounds)) {}

Histogram& HistogramFamily::WithLabels(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) {
    Invariant(absl::StrCat(name_, ": ", values.size(), " label values for ", label_names_.size(),
                           " labels"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Histogram>& h = children_[values];
  if (h == nullptr) h = std::make_unique<Histogram>(upper_bounds_);
  return *h;
}

void HistogramFamily::Collect(Exposition* out) const {
  out->Declare(name_, help_, MetricType::kHistogram);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, histogram] : children_) {
    out->AddHistogram(name_, Zip(label_names_, values), histogram->Snap());
  }
}

}  // namespace metrics

}  // namespace llamafleet
