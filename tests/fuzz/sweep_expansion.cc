// Sweep expansion (jobspec/sweep.h) on specs as a gRPC client may send them: no YAML in
// front of it and up to 4 MiB of protobuf. The input is a small language that builds the
// spec, so a few bytes can ask for the shapes that cost (hundreds of parameters, a large
// spec times 1,000 points), one directive a line:
//
//   name NAME              the spec's name
//   mode MODE              sweep.mode
//   max_concurrent N       sweep.max_concurrent
//   point                  sets sweep.point (only the coordinator may)
//   label KEY=VALUE        a label of the spec
//   set PATH=VALUE         a field of the spec, as --set (ignored where it does not apply)
//   long PATH N            the field PATH set to N bytes of 'x' (N at most 64 KiB)
//   param PATH V1 V2 ...   a sweep parameter; a value "..N" stands for 0, 1, ..., N-1
//   budget POINTS BYTES    the caller's budget (a batch's room)
//   *N LINE                LINE N times (N at most 1,000), each '#' in it the repetition
//
// Properties: refused with INVALID_ARGUMENT, never another code; a spec over a bound (more
// than kMaxSweepParameters parameters, a parameter with more than kMaxSweepPoints values,
// a grid over the points allowed) is refused; what is made stays within the bounds: at
// most the points allowed, at most the bytes allowed (the work is linear in those, so an
// input's time and memory are bounded whatever it asks for), each point a valid shape
// (its index, no parameters, at most kMaxLabels labels); and each point is what setting
// every parameter with --set on a copy of the spec would make (SetFieldFromYaml, the
// quadratic way the expansion replaced), checked where that reference is cheap.
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "fuzz_check.h"
#include "jobspec/jobspec.h"
#include "jobspec/sweep.h"
#include "jobspec/yaml_merge.h"
#include "yaml-cpp/yaml.h"

using namespace llamafleet;

namespace {

constexpr int64_t kMaxRequestBytes = 4 << 20;  // the coordinator's gRPC message bound
constexpr int kMaxRepeat = 1000;
constexpr int kMaxRange = 2000;
constexpr int64_t kMaxLong = 64 << 10;  // 1,000 points of it pass the 16 MiB bound

// What building the spec costs the harness, kept below what its decoding may spend so
// that an input's time goes to the expansion: `bytes` added to the spec (at most what a
// gRPC request holds), `work` done (a --set copies the spec).
struct Decoding {
  int64_t bytes = 0;
  int64_t work = 0;
  bool Exceeded() const { return bytes > kMaxRequestBytes || work > 16 * kMaxRequestBytes; }
};

// Applies one directive to `spec`/`budget`; false when the input asks for more than the
// language allows (the input is skipped).
bool Apply(const std::string& line, v1::JobSpec* spec, SweepBudget* budget, Decoding* cost) {
  cost->bytes += static_cast<int64_t>(line.size());
  cost->work += static_cast<int64_t>(line.size());
  const size_t space = line.find(' ');
  const std::string word = line.substr(0, space);
  const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
  int64_t n = 0;
  if (word == "name") {
    spec->set_name(rest);
  } else if (word == "mode") {
    spec->mutable_sweep()->set_mode(rest);
  } else if (word == "max_concurrent") {
    uint32_t m = 0;
    if (absl::SimpleAtoi(rest, &m)) spec->mutable_sweep()->set_max_concurrent(m);
  } else if (word == "point") {
    spec->mutable_sweep()->mutable_point()->set_sweep("x");
  } else if (word == "label" || word == "set") {
    const size_t eq = rest.find('=');
    if (eq == std::string::npos) return true;
    if (word == "label") {
      (*spec->mutable_labels())[rest.substr(0, eq)] = rest.substr(eq + 1);
    } else {
      cost->work += cost->bytes;
      (void)jobspec_internal::SetFieldFromYaml(spec, rest.substr(0, eq),
                                               YAML::Node(rest.substr(eq + 1)));
    }
  } else if (word == "long") {
    const std::vector<std::string> parts = fuzz::Split(rest, ' ');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &n) || n < 0) return true;
    if (n > kMaxLong) return false;
    cost->bytes += n;
    cost->work += cost->bytes;
    if (cost->Exceeded()) return false;
    (void)jobspec_internal::SetFieldFromYaml(spec, parts[0], YAML::Node(std::string(n, 'x')));
  } else if (word == "param") {
    std::vector<std::string> parts = fuzz::Split(rest, ' ');
    v1::SweepValues& values = (*spec->mutable_sweep()->mutable_parameters())[parts[0]];
    for (size_t i = 1; i < parts.size(); ++i) {
      if (parts[i].size() > 2 && parts[i].compare(0, 2, "..") == 0 &&
          absl::SimpleAtoi(parts[i].substr(2), &n)) {
        if (n > kMaxRange) return false;
        cost->bytes += 8 * n;
        cost->work += 8 * n;
        if (cost->Exceeded()) return false;
        for (int64_t k = 0; k < n; ++k) values.add_values(absl::StrCat(k));
      } else {
        values.add_values(parts[i]);
      }
    }
  } else if (word == "budget") {
    const std::vector<std::string> parts = fuzz::Split(rest, ' ');
    if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &budget->max_points) &&
        absl::SimpleAtoi(parts[1], &budget->max_bytes)) {
      budget->max_points = std::clamp<int64_t>(budget->max_points, 0, kMaxSweepPoints);
      budget->max_bytes = std::clamp<int64_t>(budget->max_bytes, 0, kMaxSweepSpecBytes);
    }
  }
  return true;
}

// The point `index` as the expansion promises it, made the slow way: every parameter set
// with --set on a copy of the spec.
v1::JobSpec Reference(const v1::JobSpec& spec, int64_t index, int64_t points) {
  const std::string mode = spec.sweep().mode().empty() ? kSweepGrid : spec.sweep().mode();
  const std::map<std::string, v1::SweepValues> params(spec.sweep().parameters().begin(),
                                                      spec.sweep().parameters().end());
  std::vector<std::pair<std::string, std::string>> chosen;
  int64_t rest = index;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const int n = it->second.values_size();
    chosen.emplace_back(it->first, it->second.values(mode == kSweepZip ? index : rest % n));
    rest /= n;
  }
  std::reverse(chosen.begin(), chosen.end());
  v1::JobSpec point = spec;
  for (const auto& [path, value] : chosen) {
    FUZZ_CHECK(jobspec_internal::SetFieldFromYaml(&point, path, YAML::Node(value)).empty(),
               "%s=%s does not set on the reference", path.c_str(), value.c_str());
  }
  point.set_name(absl::StrCat(spec.name(), "-", index));
  (*point.mutable_labels())[kSweepLabel] = spec.name();
  v1::SweepSpec* s = point.mutable_sweep();
  s->clear_parameters();
  s->set_mode(mode);
  v1::SweepPoint* p = s->mutable_point();
  p->set_sweep(spec.name());
  p->set_index(static_cast<int32_t>(index));
  p->set_points(static_cast<int32_t>(points));
  for (const auto& [path, value] : chosen) {
    (*point.mutable_labels())[path] = value;
    p->add_values(absl::StrCat(path, "=", value));
  }
  return point;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::JobSpec spec;
  SweepBudget budget;
  Decoding cost;
  for (const std::string& line : fuzz::Split(fuzz::Text(data, size), '\n')) {
    int repeat = 1;
    std::string body = line;
    if (!line.empty() && line[0] == '*') {
      const size_t space = line.find(' ');
      if (space == std::string::npos || !absl::SimpleAtoi(line.substr(1, space - 1), &repeat)) {
        continue;
      }
      if (repeat < 0 || repeat > kMaxRepeat) return 0;
      body = line.substr(space + 1);
    }
    for (int r = 0; r < repeat; ++r) {
      if (!Apply(absl::StrReplaceAll(body, {{"#", absl::StrCat(r)}}), &spec, &budget, &cost) ||
          cost.Exceeded()) {
        return 0;
      }
    }
  }
  if (static_cast<int64_t>(spec.ByteSizeLong()) > kMaxRequestBytes) return 0;  // gRPC refuses it

  const v1::SweepSpec& sweep = spec.sweep();
  const bool zip = sweep.mode() == kSweepZip;
  int64_t grid = 1;
  int most_values = 0;
  for (const auto& [path, values] : sweep.parameters()) {
    grid = std::min<int64_t>(grid * std::max(values.values_size(), 1), kMaxSweepPoints + 1);
    most_values = std::max(most_values, values.values_size());
  }
  absl::StatusOr<std::vector<v1::JobSpec>> points = ExpandSweep(spec, "jobs[0].spec.", budget);
  if (!points.ok()) {
    FUZZ_CHECK(points.status().code() == absl::StatusCode::kInvalidArgument, "%s",
               points.status().ToString().c_str());
    return 0;
  }
  const int64_t max_points = std::min<int64_t>(budget.max_points, kMaxSweepPoints);
  const int64_t max_bytes = std::min<int64_t>(budget.max_bytes, kMaxSweepSpecBytes);
  if (sweep.parameters().empty()) {
    FUZZ_CHECK(points->size() == 1 && !(*points)[0].has_sweep(),
               "a spec without parameters is itself");
    return 0;
  }
  FUZZ_CHECK(sweep.parameters_size() <= kMaxSweepParameters, "%d parameters accepted",
             sweep.parameters_size());
  FUZZ_CHECK(most_values <= kMaxSweepPoints, "a parameter with %d values accepted", most_values);
  FUZZ_CHECK(zip || grid <= max_points, "a grid of %lld points accepted (at most %lld)",
             static_cast<long long>(grid), static_cast<long long>(max_points));
  const int64_t n = static_cast<int64_t>(points->size());
  FUZZ_CHECK(n >= 1 && n <= max_points && n == (zip ? most_values : grid), "%lld points",
             static_cast<long long>(n));
  int64_t bytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    const v1::JobSpec& point = (*points)[i];
    bytes += static_cast<int64_t>(point.ByteSizeLong());
    FUZZ_CHECK(point.sweep().parameters().empty() && point.sweep().point().index() == i &&
                   point.sweep().point().points() == n,
               "point %lld is not marked as its sweep's", static_cast<long long>(i));
    FUZZ_CHECK(point.labels().size() <= static_cast<size_t>(kMaxLabels),
               "point %lld has %zu labels", static_cast<long long>(i), point.labels().size());
  }
  FUZZ_CHECK(bytes <= max_bytes, "the points take %lld bytes; at most %lld",
             static_cast<long long>(bytes), static_cast<long long>(max_bytes));
  // The reference copies the spec once per parameter of each point: only where that is cheap.
  const int64_t sets = n * sweep.parameters_size();
  if (sets <= 2000 && sets * static_cast<int64_t>(spec.ByteSizeLong()) <= (int64_t{256} << 10)) {
    for (int64_t i = 0; i < n; ++i) {
      FUZZ_CHECK(
          google::protobuf::util::MessageDifferencer::Equals((*points)[i], Reference(spec, i, n)),
          "point %lld differs from --set of each parameter:\n%s\n--- reference:\n%s",
          static_cast<long long>(i), (*points)[i].DebugString().c_str(),
          Reference(spec, i, n).DebugString().c_str());
    }
  }
  return 0;
}
