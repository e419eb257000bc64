#ifndef LLAMAFLEET_JOBSPEC_SWEEP_H_
#define LLAMAFLEET_JOBSPEC_SWEEP_H_

// Hyperparameter sweeps (JobSpec.sweep): a submitted spec with sweep.parameters stands
// for one job per point of its grid. Pure.
//
// Points are numbered from 0. Parameters are taken in name order; in "grid" mode the
// last one varies fastest (lr [1e-4, 3e-4] x r [8, 16] gives (1e-4, 8), (1e-4, 16),
// (3e-4, 8), (3e-4, 16)); in "zip" mode point i takes the i-th value of each. Each job is
// the submitted spec with every parameter set to its value as `--set path=value` would
// (the value a YAML scalar), named "<name>-<index>", labelled sweep=<name> and
// <path>=<value>, with sweep.parameters cleared and sweep.point describing the point.
// mode and max_concurrent stay on every job: the scheduler holds back a job of a sweep
// while max_concurrent jobs of the same owner and sweep name hold workers.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "jobspec/jobspec.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

inline constexpr int kMaxSweepPoints = 1000;  // kMaxBatchSize: one sweep, one batch
// Each parameter labels every job of the sweep, beside sweep=<name>, and a job carries at
// most kMaxLabels labels. So one expansion sets at most kMaxSweepPoints x
// kMaxSweepParameters fields.
inline constexpr int kMaxSweepParameters = kMaxLabels - 1;
// The points' specs together, as protobuf bytes: what the store writes in one transaction
// and a dry run answers.
inline constexpr int64_t kMaxSweepSpecBytes = int64_t{16} << 20;
inline constexpr char kSweepLabel[] = "sweep";
inline constexpr char kSweepGrid[] = "grid";
inline constexpr char kSweepZip[] = "zip";

// What one expansion may make. A batch of several sweeps passes what its earlier entries
// left of the batch's own bounds.
struct SweepBudget {
  int64_t max_points = kMaxSweepPoints;
  int64_t max_bytes = kMaxSweepSpecBytes;  // of the points' specs (ByteSizeLong) together
};

// The jobs a submitted spec stands for: {spec} when it has no sweep.parameters, else one
// spec per point in index order (see above). Does not apply defaults or validate the
// points' specs: the caller does both for each point, naming it with SweepPointPrefix.
// INVALID_ARGUMENT, fields under `prefix`, when: sweep.point is set (only the coordinator
// sets it); name is empty; mode is not grid or zip; max_concurrent is set without
// parameters; there are more than kMaxSweepParameters parameters, or the spec's labels,
// sweep and one label per parameter make more than kMaxLabels; a parameter has no values
// or more than kMaxSweepPoints, names no field of a spec, names name, sweep, depends_on or
// labels, is longer than a label key, or has a value its field cannot take or longer than
// a label value; zip lengths differ; there are more points than kMaxSweepPoints or
// budget.max_points; the points' specs would take more than kMaxSweepSpecBytes or
// budget.max_bytes (estimated from the spec's size, an upper bound). Every bound is checked
// from the sizes of the request before any point is made, and the work is linear in the
// points' specs: each point is one copy of the spec, its sweep parameters dropped once,
// with each parameter's field set on it. (INTERNAL only if a value that set on an empty
// spec failed to set on a point, which the merge's rules rule out.)
absl::StatusOr<std::vector<v1::JobSpec>> ExpandSweep(const v1::JobSpec& spec,
                                                     absl::string_view prefix = "",
                                                     const SweepBudget& budget = {});

// How errors name point `index` of a sweep: "sweep.points[3]." (a field of that point's
// spec follows: "sweep.points[3].training.lr").
std::string SweepPointPrefix(int index);

// The throttle a job of a sweep belongs to: "<owner>/<sweep name>"; "" for a job that is
// not a sweep's point or whose sweep has no max_concurrent.
std::string SweepThrottleKey(const std::string& owner, const v1::JobSpec& spec);

}  // namespace llamafleet

#endif  // LLAMAFLEET_JOBSPEC_SWEEP_H_
