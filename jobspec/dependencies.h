#ifndef LLAMAFLEET_JOBSPEC_DEPENDENCIES_H_
#define LLAMAFLEET_JOBSPEC_DEPENDENCIES_H_

// Dependencies between jobs (JobSpec.depends_on): resolving a submitted batch's
// references, and whether a queued job may run, must wait or can never run. Pure: the
// caller supplies what the store knows about parents.
//
// At submission (ResolveBatchDependencies):
//   - depends_on[i].job is a job id ("41", an existing job the caller owns, or any job for
//     an admin) or the name of a job of the same batch that comes before it. Names are
//     not unique in general; within a batch a referenced name must be. A reference to a
//     later job is refused (naming the cycle when it closes one), so the batch's graph,
//     and the whole graph with it, is acyclic: an existing job never depends on a new one.
//   - "{{ jobs.NAME.export_dir }}" (NAME: a job of the batch before this one, or a job id)
//     in a path field is replaced by that job's output.export_dir; the job must also be in
//     depends_on, so the directory is complete before the dependent runs.
// At each scheduling pass (EvaluateDependencies): every condition holds → kReady; one can
// no longer hold (parent FAILED or CANCELLED under "succeeded", or the parent's record is
// gone) → kImpossible; otherwise kWaiting, naming the first parent not yet done.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

inline constexpr int kMaxDependencies = 32;
inline constexpr char kDependsOnSucceeded[] = "succeeded";
inline constexpr char kDependsOnFinished[] = "finished";

// An existing job as a submission may refer to it.
struct ParentJob {
  std::string owner;
  std::string name;
  std::string export_dir;
};
// The job with that id; NOT_FOUND when there is none.
using ParentLookup = std::function<absl::StatusOr<ParentJob>(int64_t id)>;

// One job of a batch being submitted. `spec` has defaults applied and is rewritten in
// place (templates filled in).
struct BatchEntry {
  v1::JobSpec* spec = nullptr;
  std::string field_prefix;  // "jobs[2].spec."
  // Out: for depends_on[k] naming entry b of the batch, {k, b} (b < this entry's index);
  // the store writes b's id there once it has one.
  std::vector<std::pair<int, int>> batch_parents;
};

// Checks and resolves every entry's depends_on and templates, as the header says. `user`
// and `admin` are the submitter's. INVALID_ARGUMENT (with field violations) for a bad
// reference, PERMISSION_DENIED for another user's job; nothing is half-rewritten that
// matters: on error the batch is refused whole.
absl::Status ResolveBatchDependencies(std::vector<BatchEntry>& batch, const std::string& user,
                                      bool admin, const ParentLookup& lookup);

struct DependencyVerdict {
  enum Kind { kReady, kWaiting, kImpossible };
  Kind kind = kReady;
  // kWaiting: "waiting for job 41 (RUNNING)"; kImpossible: the cancel reason,
  // "dependency job 41 FAILED (depends_on: succeeded)".
  std::string message;
};

// `states`: the state of every parent the store still has (absent: deleted).
DependencyVerdict EvaluateDependencies(const v1::JobSpec& spec,
                                       const std::map<int64_t, v1::JobState>& states);

// Makes the spec a job was submitted with (`submitted`) stand on its own, as a job run
// again alone needs: its depends_on becomes the resolved one (ids, and names of jobs of
// its batch that the store replaces by their ids), and each path field that held a
// template gets the value it resolved to. `resolved`: the same job after
// ResolveBatchDependencies. Other fields are left as written.
void KeepResolvedReferences(const v1::JobSpec& resolved, v1::JobSpec* submitted);

// The parent ids of a stored spec (depends_on[].job as numbers; entries that are not
// numbers, which the store never keeps, are skipped).
std::vector<int64_t> ParentIds(const v1::JobSpec& spec);

}  // namespace llamafleet

#endif  // LLAMAFLEET_JOBSPEC_DEPENDENCIES_H_
