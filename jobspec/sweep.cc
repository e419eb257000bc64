#include "jobspec/sweep.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "jobspec/field_violations.h"
#include "jobspec/jobspec.h"
#include "jobspec/yaml_merge.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

using jobspec_internal::MergeProblem;
using jobspec_internal::Violations;

bool IsIdentifier(absl::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// The document `--set path=value` merges, {a: {b: value}} for a.b, with a handle on its
// value: assigning a string to `leaf` changes the value in `root` (yaml-cpp nodes share
// their data; reset() rebinds a handle, where assignment would change what it refers to).
// The value is a YAML scalar as written, never parsed as a document.
struct Update {
  YAML::Node root;
  YAML::Node leaf;
};

Update AlongPath(const std::string& path) {
  Update u;
  u.leaf.reset(YAML::Node(std::string()));
  u.root.reset(u.leaf);
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    YAML::Node wrapper(YAML::NodeType::Map);
    wrapper[*it] = u.root;
    u.root.reset(wrapper);
  }
  return u;
}

// Merges `update` (an Update's root for `path`) into `spec` in place; "" on success, else what
// was wrong, and the spec may be part changed. Whether a merge succeeds depends on the
// update alone, never on what the spec holds, so one that merged into an empty spec
// merges into any.
std::string Merge(const YAML::Node& update, const std::string& path, v1::JobSpec* spec) {
  std::vector<MergeProblem> problems;
  jobspec_internal::MergeYaml(update, "", spec, &problems, nullptr);
  std::vector<std::string> whats;
  for (const MergeProblem& p : problems) {
    // "training.lrr: unknown field ..." is reported on the parameter; keep only the what.
    whats.push_back(p.field == path ? p.what : p.ToString());
  }
  return absl::StrJoin(whats, "; ");
}

// One swept field and its values.
struct Parameter {
  std::string path;
  const v1::SweepValues* values = nullptr;
  Update update;  // AlongPath(path): set its leaf to a value, merge its root
  size_t longest_value = 0;

  // Sets the field of `spec` to values(j) in place (see Merge).
  std::string SetValue(int j, v1::JobSpec* spec) {
    update.leaf = values->values(j);
    return Merge(update.root, path, spec);
  }
};

// The parameters in name order (so the numbering does not depend on the map's), their
// shapes checked; the number of points in *points (saturated past kMaxSweepPoints).
// Looks only at sizes and names: no value is parsed.
std::vector<Parameter> CheckShapes(const v1::SweepSpec& sweep, const std::string& mode,
                                   int64_t* points, Violations* v) {
  std::map<std::string, const v1::SweepValues*> by_name;
  for (const auto& [path, values] : sweep.parameters()) by_name[path] = &values;
  std::vector<Parameter> params;
  *points = mode == kSweepZip ? -1 : 1;
  for (const auto& [path, values] : by_name) {
    const std::string field = absl::StrCat("sweep.parameters.", path);
    const std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
    if (!std::all_of(parts.begin(), parts.end(), IsIdentifier)) {
      v->Add(field, "must be a field path of dot-separated names (e.g. training.lr)");
      continue;
    }
    if (parts[0] == "name" || parts[0] == "sweep" || parts[0] == "depends_on" ||
        parts[0] == "labels") {
      v->Add(field, absl::StrCat("cannot be swept (", parts[0],
                                 " is set per job by the sweep or fixed for all)"));
      continue;
    }
    if (path.size() > static_cast<size_t>(kMaxLabelKeyLength)) {
      v->Add(field, absl::StrCat("must be at most ", kMaxLabelKeyLength,
                                 " characters (it labels each job)"));
      continue;
    }
    const int n = values->values_size();
    if (n == 0) {
      v->Add(field, "must list at least one value");
      continue;
    }
    if (n > kMaxSweepPoints) {
      v->Add(field, absl::StrCat("has ", n, " values; at most ", kMaxSweepPoints));
      continue;
    }
    if (mode == kSweepZip) {
      if (*points >= 0 && n != *points) {
        v->Add(field, absl::StrCat("has ", n, " values, the other parameters ", *points,
                                   " (mode zip takes the i-th value of each)"));
      }
      if (*points < 0) *points = n;
    } else {
      // Saturates: refused by the caller.
      *points = std::min<int64_t>(*points * n, kMaxSweepPoints + 1);
    }
    params.push_back(Parameter{path, values, AlongPath(path), 0});
  }
  return params;
}

// Refuses labels the points could not carry: the spec's own, sweep=<name> and one per
// parameter, at most kMaxLabels in all (as ValidateJobSpec would on every point).
void CheckLabelCount(const v1::JobSpec& spec, Violations* v) {
  const auto& labels = spec.labels();
  if (labels.size() > static_cast<size_t>(kMaxLabels)) {
    v->Add("labels", absl::StrCat("must have at most ", kMaxLabels, " entries"));
    return;
  }
  size_t total = labels.size() + (labels.contains(kSweepLabel) ? 0 : 1);
  for (const auto& [path, values] : spec.sweep().parameters()) {
    if (!labels.contains(path)) ++total;
  }
  if (total > static_cast<size_t>(kMaxLabels)) {
    v->Add("sweep.parameters",
           absl::StrCat("with the spec's ", labels.size(),
                        " labels, sweep=<name> and one label per parameter, ",
                        "each job would carry ", total, " labels; at most ", kMaxLabels));
  }
}

// Checks every value of every parameter against an empty spec.
void CheckValues(std::vector<Parameter>* params, Violations* v) {
  v1::JobSpec scratch;
  for (Parameter& param : *params) {
    const std::string field = absl::StrCat("sweep.parameters.", param.path);
    const int n = param.values->values_size();
    for (int j = 0; j < n; ++j) {
      const std::string& value = param.values->values(j);
      const std::string item = absl::StrCat(field, "[", j, "]");
      if (value.size() > static_cast<size_t>(kMaxLabelValueLength)) {
        v->Add(item, absl::StrCat("must be at most ", kMaxLabelValueLength,
                                  " characters (it labels its job)"));
        break;
      }
      scratch.Clear();
      if (std::string what = param.SetValue(j, &scratch); !what.empty()) {
        v->Add(j == 0 ? field : item, what);
        break;
      }
      param.longest_value = std::max(param.longest_value, value.size());
    }
  }
}

// At most how many bytes a point adds to `base` (the spec without its sweep parameters):
// for each parameter, its field (the value and the keys along its path), its label and
// its entry in sweep.point.values; the name's "-<index>" and the index.
int64_t PointBytesOverBase(const std::vector<Parameter>& params) {
  int64_t bytes = 32;
  for (const Parameter& p : params) {
    bytes +=
        3 * static_cast<int64_t>(p.longest_value) + 5 * static_cast<int64_t>(p.path.size()) + 32;
  }
  return bytes;
}

// "; the batch has room for 12 more" when the caller's budget is below the sweep's own
// bound, else "".
std::string BatchRoom(int64_t budget, int64_t own, const std::string& room) {
  return budget < own ? absl::StrCat("; this batch has room for ", room, " more") : "";
}

}  // namespace

std::string SweepPointPrefix(int index) { return absl::StrCat("sweep.points[", index, "]."); }

std::string SweepThrottleKey(const std::string& owner, const v1::JobSpec& spec) {
  if (!spec.has_sweep() || spec.sweep().point().sweep().empty() ||
      spec.sweep().max_concurrent() == 0) {
    return "";
  }
  return absl::StrCat(owner, "/", spec.sweep().point().sweep());
}

absl::StatusOr<std::vector<v1::JobSpec>> ExpandSweep(const v1::JobSpec& spec,
                                                     absl::string_view prefix,
                                                     const SweepBudget& budget) {
  if (!spec.has_sweep()) return std::vector<v1::JobSpec>{spec};
  const v1::SweepSpec& sweep = spec.sweep();
  Violations v(prefix);
  if (sweep.has_point())
    v.Add("sweep.point", "is set by the coordinator on the jobs of a sweep; leave it out");
  if (sweep.parameters().empty()) {
    if (sweep.max_concurrent() > 0 || !sweep.mode().empty()) {
      v.Add("sweep.parameters",
            "must name at least one parameter (e.g. training.lr: [1.0e-4, 3.0e-4])");
    }
    if (!v.empty()) return v.ToStatus();
    v1::JobSpec plain = spec;
    plain.clear_sweep();
    return std::vector<v1::JobSpec>{plain};
  }
  if (sweep.parameters_size() > kMaxSweepParameters) {
    v.Add("sweep.parameters",
          absl::StrCat("has ", sweep.parameters_size(), " parameters; at most ",
                       kMaxSweepParameters, " (each labels every job of the sweep)"));
    return v.ToStatus();
  }
  if (spec.name().empty())
    v.Add("name", "is required for a sweep (its jobs are named NAME-<index>)");
  const std::string mode = sweep.mode().empty() ? kSweepGrid : sweep.mode();
  if (mode != kSweepGrid && mode != kSweepZip) {
    v.Add("sweep.mode", absl::StrCat("must be grid or zip (got ", sweep.mode(), ")"));
  }
  int64_t points = 0;
  std::vector<Parameter> params = CheckShapes(sweep, mode, &points, &v);
  CheckLabelCount(spec, &v);
  const int64_t max_points = std::min<int64_t>(budget.max_points, kMaxSweepPoints);
  if (v.empty() && points > kMaxSweepPoints) {
    v.Add("sweep.parameters", absl::StrCat("make more than ", kMaxSweepPoints, " points; at most ",
                                           kMaxSweepPoints, " (one batch)"));
  } else if (v.empty() && points > max_points) {
    v.Add("sweep.parameters",
          absl::StrCat("make ", points, " points",
                       BatchRoom(max_points, kMaxSweepPoints, absl::StrCat(max_points)),
                       " (at most ", kMaxBatchSize, " jobs per call)"));
  }
  if (!v.empty()) return v.ToStatus();
  CheckValues(&params, &v);
  if (!v.empty()) return v.ToStatus();

  // Everything the points share, made once: the spec without its sweep parameters.
  v1::JobSpec base = spec;
  v1::SweepSpec* s = base.mutable_sweep();
  s->clear_parameters();
  s->set_mode(mode);
  s->mutable_point()->set_sweep(spec.name());
  s->mutable_point()->set_points(static_cast<int32_t>(points));
  (*base.mutable_labels())[kSweepLabel] = spec.name();
  const int64_t max_bytes = std::min<int64_t>(budget.max_bytes, kMaxSweepSpecBytes);
  const int64_t point_bytes =
      static_cast<int64_t>(base.ByteSizeLong()) + PointBytesOverBase(params);
  if (points * point_bytes > max_bytes) {
    v.Add("sweep.parameters",
          absl::StrCat("make ", points, " jobs of up to ", FormatBytes(point_bytes), " each (",
                       FormatBytes(points * point_bytes), "); at most ",
                       FormatBytes(kMaxSweepSpecBytes), " of job specs per sweep",
                       BatchRoom(max_bytes, kMaxSweepSpecBytes, FormatBytes(max_bytes))));
    return v.ToStatus();
  }

  std::vector<v1::JobSpec> out;
  out.reserve(points);
  std::vector<int> chosen(params.size());
  for (int64_t index = 0; index < points; ++index) {
    // Mixed radix over the parameters in name order, the last one fastest.
    int64_t rest = index;
    for (size_t k = params.size(); k-- > 0;) {
      const int n = params[k].values->values_size();
      chosen[k] = mode == kSweepZip ? static_cast<int>(index) : static_cast<int>(rest % n);
      rest /= n;
    }
    v1::JobSpec& point = out.emplace_back(base);
    v1::SweepPoint* p = point.mutable_sweep()->mutable_point();
    for (size_t k = 0; k < params.size(); ++k) {
      const std::string& value = params[k].values->values(chosen[k]);
      if (std::string what = params[k].SetValue(chosen[k], &point); !what.empty()) {
        return absl::InternalError(absl::StrCat("sweep.parameters.", params[k].path, "[", chosen[k],
                                                "] merged into an empty spec but not into point ",
                                                index, ": ", what));
      }
      (*point.mutable_labels())[params[k].path] = value;
      p->add_values(absl::StrCat(params[k].path, "=", value));
    }
    point.set_name(absl::StrCat(spec.name(), "-", index));
    p->set_index(static_cast<int32_t>(index));
  }
  return out;
}

}  // namespace llamafleet
