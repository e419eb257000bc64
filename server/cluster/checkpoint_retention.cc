#include "server/cluster/checkpoint_retention.h"

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_dir_marker.h"
#include "common/status_macros.h"

namespace llamafleet {
namespace fs = std::filesystem;

namespace {

bool IsStepName(const std::string& name) {
  if (!absl::StartsWith(name, "step-") || name.size() == 5 || name.size() > 5 + 18) return false;
  for (size_t i = 5; i < name.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

}  // namespace

absl::Status CheckCheckpointPathLexically(const std::string& job_dir, const std::string& path) {
  if (job_dir.empty()) {
    return absl::InvalidArgumentError("checkpoint path: the job has no checkpoint dir");
  }
  const fs::path dir(job_dir), p(path);
  if (!dir.is_absolute() || !p.is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint path ", path, ": not an absolute path inside ", job_dir));
  }
  fs::path clean = p.lexically_normal();
  if (!clean.has_filename()) clean = clean.parent_path();  // trailing slash
  fs::path clean_dir = dir.lexically_normal();
  if (!clean_dir.has_filename()) clean_dir = clean_dir.parent_path();
  if (clean.parent_path() != clean_dir || !IsStepName(clean.filename().string())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint path ", path,
        ": not a step-N directory directly inside the job's checkpoint dir ", job_dir));
  }
  return absl::OkStatus();
}

absl::Status CheckCheckpointPath(const std::string& job_dir, const std::string& path) {
  LF_RETURN_IF_ERROR(CheckCheckpointPathLexically(job_dir, path));
  fs::path clean = fs::path(path).lexically_normal();
  if (!clean.has_filename()) clean = clean.parent_path();
  fs::path clean_dir = fs::path(job_dir).lexically_normal();
  if (!clean_dir.has_filename()) clean_dir = clean_dir.parent_path();
  // Symlinks: where both exist here, the real path must still be a step-N directory
  // inside the job's real directory.
  std::error_code ec1, ec2;
  const fs::path real_dir = fs::canonical(clean_dir, ec1);
  const fs::path real = fs::canonical(clean, ec2);
  if (!ec1 && !ec2 && (real.parent_path() != real_dir || !IsStepName(real.filename().string()))) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint path ", path, " resolves to ",
                                                   real.string(), ", outside ", job_dir));
  }
  if (!ec2 && ec1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint path ", path, ": the job's checkpoint dir cannot be resolved"));
  }
  return absl::OkStatus();
}

absl::Status CheckRecordedCheckpoint(const std::string& job_dir, const std::string& path) {
  LF_RETURN_IF_ERROR(CheckCheckpointPath(job_dir, path));
  std::error_code ec;
  if (!fs::exists(path + "/manifest.json", ec) && fs::exists(path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " has no manifest"));
  }
  return absl::OkStatus();
}

RetentionPlan PlanRetention(const std::string& job_dir,
                            const std::vector<v1::Checkpoint>& checkpoints, int keep_last) {
  RetentionPlan plan;
  if (keep_last <= 0) return plan;
  // The lowest eval loss is kept whatever its age (the first of equals).
  size_t best = checkpoints.size();
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    if (checkpoints[i].has_eval_loss() &&
        (best == checkpoints.size() ||
         checkpoints[i].eval_loss() < checkpoints[best].eval_loss())) {
      best = i;
    }
  }
  for (size_t i = keep_last; i < checkpoints.size(); ++i) {
    if (i == best) continue;
    absl::Status s = CheckCheckpointPath(job_dir, checkpoints[i].path());
    if (s.ok()) {
      plan.remove.push_back(checkpoints[i]);
    } else {
      plan.refused.push_back(checkpoints[i]);
      plan.refusals.push_back(std::string(s.message()));
    }
  }
  return plan;
}

std::vector<std::string> DeletionAnchors(const std::vector<std::string>& path_roots,
                                         const std::string& checkpoint_root) {
  // Below a root, the default checkpoint root is opened from the root like any job dir:
  // <root>/llamafleet/checkpoints is not trusted as a path.
  if (!path_roots.empty() || checkpoint_root.empty()) return path_roots;
  return {checkpoint_root};
}

namespace {

std::string Clean(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.string();
}

}  // namespace

absl::StatusOr<UniqueFd> OpenJobDirToDelete(const std::vector<std::string>& anchors,
                                            const std::string& job_dir, int64_t job_id) {
  const std::string dir = Clean(job_dir);
  absl::StatusOr<UniqueFd> fd = OpenDirInRoots(anchors, dir, std::nullopt);
  if (!fd.ok()) {
    if (fd.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::FailedPreconditionError(fd.status().message());
    }
    return fd.status();
  }
  LF_RETURN_IF_ERROR(CheckJobDirMarker(fd->get(), std::to_string(job_id), dir));
  return fd;
}

std::vector<int64_t> RemoveCheckpointFiles(const std::vector<std::string>& anchors,
                                           const std::string& job_dir, int64_t job_id,
                                           const std::vector<v1::Checkpoint>& remove,
                                           std::vector<std::string>* errors) {
  std::vector<int64_t> gone;
  if (remove.empty()) return gone;
  absl::StatusOr<UniqueFd> dir = OpenJobDirToDelete(anchors, job_dir, job_id);
  if (!dir.ok() && dir.status().code() != absl::StatusCode::kNotFound) {
    errors->push_back(absl::StrCat("nothing removed: ", dir.status().message()));
    return gone;
  }
  for (const v1::Checkpoint& c : remove) {
    // Files first, rows after: a crash in between leaves a row whose files are gone, which
    // the next pass removes again (a missing entry is OK).
    if (dir.ok()) {
      const std::string name = fs::path(Clean(c.path())).filename().string();
      if (absl::Status s = RemoveTreeAt(dir->get(), name); !s.ok()) {
        errors->push_back(absl::StrCat("cannot remove checkpoint ", c.path(), ": ", s.message()));
        continue;
      }
    }
    gone.push_back(c.step());
  }
  return gone;
}

absl::Status RemoveJobDir(const std::vector<std::string>& anchors, const std::string& job_dir,
                          int64_t job_id, const char* marker) {
  const fs::path dir(Clean(job_dir));
  const std::string parent = dir.parent_path().string();
  const std::string name = dir.filename().string();
  absl::StatusOr<UniqueFd> parent_fd = anchors.size() == 1 && Clean(anchors[0]) == parent
                                           ? OpenRootDir(parent)
                                           : OpenDirInRoots(anchors, parent, std::nullopt);
  if (!parent_fd.ok()) {
    if (parent_fd.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    return parent_fd.status();
  }
  absl::StatusOr<UniqueFd> fd = OpenDirBeneath(parent_fd->get(), name, std::nullopt, dir.string());
  if (!fd.ok()) {
    if (fd.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    return fd.status();
  }
  LF_RETURN_IF_ERROR(CheckJobDirMarker(fd->get(), std::to_string(job_id), dir.string(), marker));
  return RemoveTreeAt(parent_fd->get(), name);
}

}  // namespace llamafleet
