#ifndef LLAMAFLEET_SERVER_SUBMIT_POLICY_H_
#define LLAMAFLEET_SERVER_SUBMIT_POLICY_H_

// What a submission may ask for beyond the spec's own rules (jobspec.h): the coordinator's
// path roots, its queues, and per-role priority limits. Pure functions of the spec and
// the policy, so they are table-tested without a server; the checks that need the
// database (another job's checkpoint directory, active jobs per user) live in the job
// service and the store.
//
// Paths: every path field must be absolute and, after '.' and '..' are resolved lexically,
// inside one of the roots. The check is lexical on purpose: the coordinator need not see
// the storage; each worker re-checks with realpath (a symlink inside a root may lead out)
// before the trainer opens anything, using TaskSpec.path_roots.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

struct SubmitPolicy {
  // Normalized (NormalizeRoots). Empty: no job may name a path (and every job must name
  // data.train_path), so nothing can be submitted until a root is configured.
  std::vector<std::string> path_roots;
  // Queues a job may name; "default" is always accepted.
  std::set<std::string> queues;
  // Highest spec.priority each role may set; a role not listed may use the full range.
  std::map<v1::Role, int32_t> max_priority;
  // Active (queued + running) jobs one user may have; 0 = no limit.
  int64_t max_active_jobs_per_user = 10000;
  // Whether a submission's inputs and outputs are checked on the storage where the
  // coordinator sees it (server/job_paths_check.h).
  bool check_paths = true;
};

// "/a/./b/../c//" → "/a/c": '.' and '..' resolved lexically ('..' above "/" stays at "/"),
// repeated and trailing '/' removed. nullopt for a relative or empty path.
std::optional<std::string> NormalizeAbsolutePath(absl::string_view path);

// True if `path` is `root` or lies below it (both normalized).
bool PathWithin(absl::string_view path, absl::string_view root);

// Normalizes the roots and drops duplicates; INVALID_ARGUMENT naming `what` ("--path-root",
// "paths.roots") for a relative or empty one.
absl::StatusOr<std::vector<std::string>> NormalizeRoots(const std::vector<std::string>& roots,
                                                        absl::string_view what);

// Where a job's checkpoints go when its spec leaves checkpoint.dir empty:
// <first root>/llamafleet/checkpoints/<job id> ("" without roots). llamafleet keeps
// <root>/llamafleet for itself: no job may name a checkpoint.dir or output.export_dir in it.
std::string DefaultCheckpointRoot(const std::vector<std::string>& roots);
std::string DefaultCheckpointDir(const std::vector<std::string>& roots, int64_t job_id);
// If `path` (normalized) lies inside <root>/llamafleet/checkpoints/<id> for a root, that id.
std::optional<int64_t> DefaultCheckpointDirJob(const std::vector<std::string>& roots,
                                               absl::string_view path);
// If `path` (normalized) lies inside <root>/llamafleet for a root, that directory.
std::optional<std::string> InsideReservedDir(const std::vector<std::string>& roots,
                                             absl::string_view path);

// Checks the spec's path fields against the roots and normalizes them in place (the
// stored spec names the paths that were checked); no path may lie inside a root's
// llamafleet/token-cache (the workers' per-owner token caches). Also: the queue is configured, the
// priority is within the caller's role's maximum. Returns OK or INVALID_ARGUMENT listing
// each violation as "<prefix><field> <rule>" with field violations attached (as
// ValidateJobSpec does). `prefix` is "spec." or "jobs[3].spec.".
absl::Status ApplySubmitPolicy(const SubmitPolicy& policy, v1::Role role, absl::string_view prefix,
                               v1::JobSpec* spec);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_SUBMIT_POLICY_H_
