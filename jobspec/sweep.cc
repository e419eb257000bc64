#include "jobspec/sweep.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "jobspec/field_violations.h"
#include "jobspec/jobspec.h"
#include "jobspec/yaml_merge.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

using jobspec_internal::Violations;

bool IsIdentifier(absl::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Sets `path` of `spec` to the YAML scalar `value`, as --set does but without parsing the
// value as a YAML document (a scalar stays a scalar: no anchors, no nesting). "" on
// success, else what was wrong.
std::string SetField(v1::JobSpec* spec, const std::string& path, const std::string& value) {
  std::vector<std::string> whats;
  for (const jobspec_internal::MergeProblem& p : jobspec_internal::SetFieldFromYaml(spec, path, YAML::Node(value))) {
    // "training.lrr: unknown field ..." is reported on the parameter; keep only the what.
    whats.push_back(p.field == path ? p.what : p.ToString());
  }
  return absl::StrJoin(whats, "; ");
}

}  // namespace

std::string SweepPointPrefix(int index) { return absl::StrCat("sweep.points[", index, "]."); }

std::string SweepThrottleKey(const std::string& owner, const v1::JobSpec& spec) {
  if (!spec.has_sweep() || spec.sweep().point().sweep().empty() || spec.sweep().max_concurrent() == 0) {
    return "";
  }
  return absl::StrCat(owner, "/", spec.sweep().point().sweep());
}

absl::StatusOr<std::vector<v1::JobSpec>> ExpandSweep(const v1::JobSpec& spec, absl::string_view prefix) {
  if (!spec.has_sweep()) return std::vector<v1::JobSpec>{spec};
  const v1::SweepSpec& sweep = spec.sweep();
  Violations v(prefix);
  if (sweep.has_point()) v.Add("sweep.point", "is set by the coordinator on the jobs of a sweep; leave it out");
  if (sweep.parameters().empty()) {
    if (sweep.max_concurrent() > 0 || !sweep.mode().empty()) {
      v.Add("sweep.parameters", "must name at least one parameter (e.g. training.lr: [1.0e-4, 3.0e-4])");
    }
    if (!v.empty()) return v.ToStatus();
    v1::JobSpec plain = spec;
    plain.clear_sweep();
    return std::vector<v1::JobSpec>{plain};
  }
  if (spec.name().empty()) v.Add("name", "is required for a sweep (its jobs are named NAME-<index>)");
  const std::string mode = sweep.mode().empty() ? kSweepGrid : sweep.mode();
  if (mode != kSweepGrid && mode != kSweepZip) {
    v.Add("sweep.mode", absl::StrCat("must be grid or zip (got ", sweep.mode(), ")"));
  }
  // Name order, so the numbering does not depend on the map's.
  std::map<std::string, const v1::SweepValues*> params;
  for (const auto& [path, values] : sweep.parameters()) params[path] = &values;
  int64_t points = mode == kSweepZip ? -1 : 1;
  for (const auto& [path, values] : params) {
    const std::string field = absl::StrCat("sweep.parameters.", path);
    const std::vector<std::string> parts = absl::StrSplit(path, '.');
    if (!std::all_of(parts.begin(), parts.end(), IsIdentifier)) {
      v.Add(field, "must be a field path of dot-separated names (e.g. training.lr)");
      continue;
    }
    if (parts[0] == "name" || parts[0] == "sweep" || parts[0] == "depends_on" || parts[0] == "labels") {
      v.Add(field, absl::StrCat("cannot be swept (", parts[0], " is set per job by the sweep or fixed for all)"));
      continue;
    }
    if (path.size() > static_cast<size_t>(kMaxLabelKeyLength)) {
      v.Add(field, absl::StrCat("must be at most ", kMaxLabelKeyLength, " characters (it labels each job)"));
      continue;
    }
    const int n = values->values_size();
    if (n == 0) {
      v.Add(field, "must list at least one value");
      continue;
    }
    if (n > kMaxSweepPoints) {
      v.Add(field, absl::StrCat("has ", n, " values; at most ", kMaxSweepPoints));
      continue;
    }
    if (mode == kSweepZip) {
      if (points >= 0 && n != points) {
        v.Add(field, absl::StrCat("has ", n, " values, the other parameters ", points,
                                  " (mode zip takes the i-th value of each)"));
      }
      if (points < 0) points = n;
    } else {
      points = std::min<int64_t>(points * n, kMaxSweepPoints + 1);  // saturates: refused below
    }
    // Every value on its own: a field the spec lacks or a value it cannot take is named here.
    for (int j = 0; j < n; ++j) {
      const std::string& value = values->values(j);
      const std::string item = absl::StrCat(field, "[", j, "]");
      if (value.size() > static_cast<size_t>(kMaxLabelValueLength)) {
        v.Add(item, absl::StrCat("must be at most ", kMaxLabelValueLength, " characters (it labels its job)"));
        break;
      }
      v1::JobSpec scratch;
      if (std::string what = SetField(&scratch, path, value); !what.empty()) {
        v.Add(j == 0 ? field : item, what);
        break;
      }
    }
  }
  if (v.empty() && points > kMaxSweepPoints) {
    v.Add("sweep.parameters", absl::StrCat("make more than ", kMaxSweepPoints, " points; at most ",
                                           kMaxSweepPoints, " (one batch)"));
  }
  if (!v.empty()) return v.ToStatus();

  std::vector<v1::JobSpec> out;
  out.reserve(points);
  for (int64_t index = 0; index < points; ++index) {
    // Mixed radix over the parameters in name order, the last one fastest.
    std::vector<std::pair<std::string, std::string>> chosen;
    int64_t rest = index;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      const int n = it->second->values_size();
      const int j = mode == kSweepZip ? static_cast<int>(index) : static_cast<int>(rest % n);
      rest /= n;
      chosen.emplace_back(it->first, it->second->values(j));
    }
    std::reverse(chosen.begin(), chosen.end());
    v1::JobSpec point = spec;
    for (const auto& [path, value] : chosen) {
      SetField(&point, path, value);  // cannot fail: the same value was set on an empty spec above
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
    out.push_back(std::move(point));
  }
  return out;
}

}  // namespace llamafleet
