#include "worker/job_checkpoint_dir.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/job_dir_marker.h"
#include "common/status_macros.h"

namespace llamafleet::worker {

absl::StatusOr<UniqueFd> OpenJobCheckpointDir(const std::vector<std::string>& roots, const std::string& dir,
                                              const std::string& job_id) {
  std::string clean = dir;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  absl::StatusOr<UniqueFd> fd = OpenDirInRoots(roots, clean, 0755);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(), absl::StrCat("checkpoint.dir: ", fd.status().message()));
  }
  LF_RETURN_IF_ERROR(ClaimJobDir(fd->get(), job_id, "checkpoint.dir", clean));
  return fd;
}

absl::Status CheckWrittenDirHasNoLinks(const std::vector<std::string>& roots, const std::string& dir,
                                       const std::string& field) {
  std::string clean = dir;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  std::optional<std::pair<std::string, std::string>> split = SplitBeneathRoot(roots, clean);
  if (!split.has_value()) return absl::OkStatus();  // the path checks name what is wrong
  absl::StatusOr<UniqueFd> at = OpenRootDir(split->first);
  if (!at.ok()) return absl::OkStatus();
  std::string walked = split->first;
  for (absl::string_view part : absl::StrSplit(split->second, '/', absl::SkipEmpty())) {
    absl::StrAppend(&walked, walked == "/" ? "" : "/", part);
    absl::StatusOr<UniqueFd> next = OpenDirBeneath(at->get(), part, std::nullopt, clean);
    if (!next.ok()) {
      if (next.status().code() == absl::StatusCode::kNotFound) return absl::OkStatus();
      return absl::FailedPreconditionError(absl::StrCat(field, ": ", walked, " is a symbolic link or not a directory; ",
                                                        "the directories a job writes are opened without following links"));
    }
    at = std::move(next);
  }
  return absl::OkStatus();
}

std::string ThroughHeldDir(const std::string& path, const std::string& dir, const std::string& io_dir) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  absl::string_view rest = path;
  if (!absl::ConsumePrefix(&rest, base)) return path;
  if (!rest.empty() && rest[0] != '/') return path;
  return absl::StrCat(io_dir, rest);
}

}  // namespace llamafleet::worker
