#include "server/path_resolution.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/dir_fd.h"
#include "jobspec/jobspec.h"
#include "server/submit_policy.h"

namespace llamafleet {
namespace {

std::optional<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return std::nullopt;
  return std::string(buf);
}

}  // namespace

std::optional<std::string> ResolveBelowRoot(const std::vector<std::string>& roots, const std::string& path) {
  std::optional<std::pair<std::string, std::string>> split = SplitBeneathRoot(roots, path);
  if (!split.has_value()) return std::nullopt;
  const std::optional<std::string> real_root = RealPath(split->first);
  if (!real_root.has_value()) return std::nullopt;
  // The longest existing prefix, resolved; the missing rest appended as written.
  std::vector<std::string> parts = absl::StrSplit(split->second, '/', absl::SkipEmpty());
  size_t existing = parts.size();
  std::optional<std::string> real;
  for (; existing > 0; --existing) {
    const std::string prefix =
        absl::StrCat(split->first == "/" ? "" : split->first, "/",
                     absl::StrJoin(parts.begin(), parts.begin() + static_cast<long>(existing), "/"));
    struct stat st;
    if (::lstat(prefix.c_str(), &st) != 0) continue;
    real = RealPath(prefix);
    if (!real.has_value()) return std::nullopt;  // a dangling link: leads nowhere known
    break;
  }
  std::string out = real.value_or(*real_root);
  for (size_t i = existing; i < parts.size(); ++i) absl::StrAppend(&out, out == "/" ? "" : "/", parts[i]);
  if (!PathWithin(out, *real_root)) return std::nullopt;
  // Back into the spec's terms: below the root as configured.
  const std::string rest = out.size() > real_root->size() ? out.substr(real_root->size() + (*real_root == "/" ? 0 : 1)) : "";
  if (rest.empty()) return split->first;
  return absl::StrCat(split->first == "/" ? "" : split->first, "/", rest);
}

absl::Status CheckWrittenDirsHaveNoLinks(const std::vector<std::string>& roots, absl::string_view prefix,
                                         const v1::JobSpec& spec) {
  std::vector<std::string> messages;
  std::vector<v1::FieldViolation> violations;
  for (const auto& [field, path] :
       {std::pair<absl::string_view, const std::string*>{"checkpoint.dir", &spec.checkpoint().dir()},
        {"output.export_dir", &spec.output().export_dir()}}) {
    if (path->empty()) continue;
    std::optional<std::pair<std::string, std::string>> split = SplitBeneathRoot(roots, *path);
    if (!split.has_value() || !RealPath(split->first).has_value()) continue;
    const std::optional<std::string> resolved = ResolveBelowRoot(roots, *path);
    if (resolved.has_value() && *resolved == *path) continue;
    const std::string rule = absl::StrCat(
        *path, " leads through a symbolic link",
        resolved.has_value() ? absl::StrCat(" to ", *resolved) : std::string(" out of its root"),
        "; the directories a job writes are opened without following links: name the directory itself");
    messages.push_back(absl::StrCat(prefix, field, " ", rule));
    v1::FieldViolation v;
    v.set_field(absl::StrCat(prefix, field));
    v.set_description(rule);
    violations.push_back(std::move(v));
  }
  if (messages.empty()) return absl::OkStatus();
  return WithFieldViolations(absl::InvalidArgumentError(absl::StrJoin(messages, "; ")), violations);
}

}  // namespace llamafleet
