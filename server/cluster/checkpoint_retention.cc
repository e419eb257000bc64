#include "server/cluster/checkpoint_retention.h"

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

absl::Status CheckCheckpointPath(const std::string& job_dir, const std::string& path) {
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
        "checkpoint path ", path, ": not a step-N directory directly inside the job's checkpoint dir ",
        job_dir));
  }
  // Symlinks: where both exist here, the real path must still be a step-N directory
  // inside the job's real directory.
  std::error_code ec1, ec2;
  const fs::path real_dir = fs::canonical(clean_dir, ec1);
  const fs::path real = fs::canonical(clean, ec2);
  if (!ec1 && !ec2 &&
      (real.parent_path() != real_dir || !IsStepName(real.filename().string()))) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint path ", path, " resolves to ",
                                                   real.string(), ", outside ", job_dir));
  }
  if (!ec2 && ec1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint path ", path, ": the job's checkpoint dir cannot be resolved"));
  }
  return absl::OkStatus();
}

RetentionPlan PlanRetention(const std::string& job_dir,
                            const std::vector<v1::Checkpoint>& checkpoints, int keep_last) {
  RetentionPlan plan;
  if (keep_last <= 0) return plan;
  for (size_t i = keep_last; i < checkpoints.size(); ++i) {
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

}  // namespace llamafleet
