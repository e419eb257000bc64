#include "worker/task_setup.h"

#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "jobspec/data_sources.h"
#include "worker/job_checkpoint_dir.h"
#include "worker/job_dirs.h"
#include "worker/path_guard.h"
#include "worker/task_identity.h"
#include "worker/token_cache_dir.h"

namespace llamafleet::worker {

absl::Status CheckTaskPaths(const v1::TaskSpec& task) {
  const v1::JobSpec& spec = task.spec();
  if (task.path_roots_size() > 0) {
    const std::vector<std::string> roots(task.path_roots().begin(), task.path_roots().end());
    std::vector<std::pair<std::string, std::string>> fields = {
        {"model.path", spec.model().path()}, {"model.tokenizer", spec.model().tokenizer()}};
    for (const TrainSource& s : TrainSourcesOf(spec)) fields.push_back({s.field, s.path});
    for (const EvalSource& s : EvalSetsOf(spec)) fields.push_back({s.field, s.path});
    fields.push_back({"checkpoint.dir", spec.checkpoint().dir()});
    fields.push_back({"checkpoint.resume", spec.checkpoint().resume()});
    fields.push_back({"output.export_dir", spec.output().export_dir()});
    fields.push_back({"resume_from", task.resume_from()});
    for (const auto& [field, value] : fields) {
      if (value.empty() || (value == "latest" && field == "checkpoint.resume")) continue;
      LF_RETURN_IF_ERROR(CheckPathInRoots(field, value, roots));
    }
    // The directories it writes are reached without following links (the trainer opens
    // them so): a link in one fails the task before start.
    for (const auto& [field, value] :
         {std::pair<const char*, const std::string*>{"checkpoint.dir", &spec.checkpoint().dir()},
          {"output.export_dir", &spec.output().export_dir()}}) {
      if (value->empty()) continue;
      LF_RETURN_IF_ERROR(CheckWrittenDirHasNoLinks(roots, *value, field));
    }
  }
  if (task.node_rank() == 0 && !spec.output().export_dir().empty()) {
    return CheckExportDir(spec.output().export_dir(), task.job_id());
  }
  return absl::OkStatus();
}

absl::StatusOr<TaskSetup> PrepareTask(const v1::TaskSpec& task, const TrainerIdentities& identities,
                                      const std::string& data_dir) {
  absl::StatusOr<TaskIdentity> identity = IdentityForTask(identities, task);
  if (!identity.ok()) return identity.status();
  TaskSetup setup;
  setup.run_as = identity->run_as;
  setup.umask = identity->umask;
  const std::vector<std::string> roots(task.path_roots().begin(), task.path_roots().end());
  // Each owner's tokenized datasets in a directory of their own.
  absl::StatusOr<std::string> token_cache =
      PrepareTokenCacheDir(OwnerTokenCacheDir(roots, data_dir, task.owner()), setup.run_as);
  if (!token_cache.ok()) return token_cache.status();
  setup.token_cache_dir = *token_cache;
  if (identity->dir_mode.has_value()) {
    LF_RETURN_IF_ERROR(PrepareJobDirs(task, *setup.run_as, *identity->dir_mode));
    return setup;
  }
  // One identity for every job: the trainers make a default checkpoint dir in
  // <root>/llamafleet/checkpoints, which the worker makes and hands to them (the levels
  // above stay the worker's).
  const TokenCacheDir checkpoints = DefaultCheckpointRootDir(roots);
  if (!roots.empty() && absl::StartsWith(task.spec().checkpoint().dir(), checkpoints.path() + "/")) {
    absl::StatusOr<std::string> made = PrepareTokenCacheDir(checkpoints, setup.run_as);
    if (!made.ok()) return made.status();
  }
  return setup;
}

}  // namespace llamafleet::worker
