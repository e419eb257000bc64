#include "server/submit_policy.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "jobspec/data_sources.h"
#include "jobspec/jobspec.h"

namespace llamafleet {
namespace {

constexpr char kReservedDir[] = "llamafleet";
constexpr char kCheckpointsDir[] = "llamafleet/checkpoints";
constexpr char kTokenCacheDir[] = "llamafleet/token-cache";  // owners' token caches (the workers')

std::string Join(absl::string_view root, absl::string_view rest) {
  return root == "/" ? absl::StrCat("/", rest) : absl::StrCat(root, "/", rest);
}

// The spec's path fields with their names; `resume` excludes checkpoint.resume's keywords.
std::vector<std::pair<std::string, std::string*>> PathFields(v1::JobSpec* spec) {
  std::vector<std::pair<std::string, std::string*>> out = {
      {"model.path", spec->mutable_model()->mutable_path()},
      {"model.tokenizer", spec->mutable_model()->mutable_tokenizer()},
  };
  for (auto& field : MutableDataPathFields(spec)) out.push_back(std::move(field));
  out.push_back({"checkpoint.dir", spec->mutable_checkpoint()->mutable_dir()});
  out.push_back({"output.export_dir", spec->mutable_output()->mutable_export_dir()});
  // Only a spec with a peft block has an adapter path: asking would add an empty block.
  if (spec->has_peft())
    out.push_back({"peft.adapter_path", spec->mutable_peft()->mutable_adapter_path()});
  const std::string& resume = spec->checkpoint().resume();
  if (resume != "latest") {
    out.push_back({"checkpoint.resume", spec->mutable_checkpoint()->mutable_resume()});
  }
  return out;
}

}  // namespace

std::optional<std::string> NormalizeAbsolutePath(absl::string_view path) {
  if (path.empty() || path[0] != '/') return std::nullopt;
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

bool PathWithin(absl::string_view path, absl::string_view root) {
  if (root == "/") return !path.empty() && path[0] == '/';
  return path == root ||
         (path.size() > root.size() && path.substr(0, root.size()) == root && path[root.size()] == '/');
}

absl::StatusOr<std::vector<std::string>> NormalizeRoots(const std::vector<std::string>& roots,
                                                        absl::string_view what) {
  std::vector<std::string> out;
  for (const std::string& root : roots) {
    std::optional<std::string> normalized = NormalizeAbsolutePath(root);
    if (!normalized.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a path root must be an absolute directory, got '", root, "'"));
    }
    if (std::find(out.begin(), out.end(), *normalized) == out.end()) out.push_back(*normalized);
  }
  return out;
}

std::string DefaultCheckpointRoot(const std::vector<std::string>& roots) {
  return roots.empty() ? "" : Join(roots[0], kCheckpointsDir);
}

std::string DefaultCheckpointDir(const std::vector<std::string>& roots, int64_t job_id) {
  return roots.empty() ? "" : absl::StrCat(DefaultCheckpointRoot(roots), "/", job_id);
}

std::optional<int64_t> DefaultCheckpointDirJob(const std::vector<std::string>& roots,
                                               absl::string_view path) {
  for (const std::string& root : roots) {
    const std::string base = Join(root, kCheckpointsDir);
    if (!PathWithin(path, base) || path.size() <= base.size()) continue;
    absl::string_view rest = path.substr(base.size() + 1);
    int64_t id;
    if (absl::SimpleAtoi(rest.substr(0, rest.find('/')), &id) && id > 0) return id;
  }
  return std::nullopt;
}

std::optional<std::string> InsideReservedDir(const std::vector<std::string>& roots,
                                             absl::string_view path) {
  for (const std::string& root : roots) {
    std::string reserved = Join(root, kReservedDir);
    if (PathWithin(path, reserved)) return reserved;
  }
  return std::nullopt;
}

absl::Status ApplySubmitPolicy(const SubmitPolicy& policy, v1::Role role, absl::string_view prefix,
                               v1::JobSpec* spec) {
  std::vector<std::string> messages;
  std::vector<v1::FieldViolation> violations;
  auto add = [&](absl::string_view field, std::string rule) {
    messages.push_back(absl::StrCat(prefix, field, " ", rule));
    v1::FieldViolation v;
    v.set_field(absl::StrCat(prefix, field));
    v.set_description(std::move(rule));
    violations.push_back(std::move(v));
  };
  const std::string roots = absl::StrJoin(policy.path_roots, ", ");
  for (auto& [field, value] : PathFields(spec)) {
    if (value->empty()) continue;
    if (policy.path_roots.empty()) {
      add(field,
          "names a path, but this coordinator has no path roots: an administrator must start "
          "it with --path-root DIR (repeatable) or list the directories jobs may use under "
          "paths.roots in its config file");
      continue;
    }
    std::optional<std::string> normalized = NormalizeAbsolutePath(*value);
    if (!normalized.has_value()) {
      add(field, absl::StrCat("must be an absolute path inside a path root (", roots, "), got '",
                              *value, "'"));
      continue;
    }
    const bool inside = std::any_of(policy.path_roots.begin(), policy.path_roots.end(),
                                    [&](const std::string& r) { return PathWithin(*normalized, r); });
    if (!inside) {
      add(field, absl::StrCat("must be inside a path root (", roots, "), got ", *normalized));
      continue;
    }
    const auto cache = std::find_if(policy.path_roots.begin(), policy.path_roots.end(), [&](const std::string& r) {
      return PathWithin(*normalized, Join(r, kTokenCacheDir));
    });
    if (cache != policy.path_roots.end()) {
      add(field, absl::StrCat("must not be inside ", Join(*cache, kTokenCacheDir),
                              ", where workers keep each owner's tokenized datasets"));
      continue;
    }
    if (field == "checkpoint.dir" || field == "output.export_dir") {
      if (std::find(policy.path_roots.begin(), policy.path_roots.end(), *normalized) !=
          policy.path_roots.end()) {
        add(field, absl::StrCat("must be a directory inside a path root, not the root ",
                                *normalized, " itself"));
        continue;
      }
      if (std::optional<std::string> reserved = InsideReservedDir(policy.path_roots, *normalized)) {
        add(field, absl::StrCat("must not be inside ", *reserved,
                                ", which llamafleet keeps for jobs' default checkpoint "
                                "directories (leave checkpoint.dir empty to get one)"));
        continue;
      }
    }
    *value = std::move(*normalized);
  }

  if (spec->queue() != "default" && !policy.queues.count(spec->queue())) {
    std::vector<std::string> known = {"default"};
    for (const std::string& q : policy.queues) {
      if (q != "default") known.push_back(q);
    }
    add("queue", absl::StrCat("'", spec->queue(), "' is not a queue of this coordinator (",
                              absl::StrJoin(known, ", "), ")"));
  }
  auto max = policy.max_priority.find(role);
  if (max != policy.max_priority.end() && spec->priority() > max->second) {
    add("priority", absl::StrCat("(", spec->priority(), ") is above ", max->second,
                                 ", the highest a ", absl::AsciiStrToLower(v1::Role_Name(role)),
                                 " may set (limits.max_priority)"));
  }
  if (messages.empty()) return absl::OkStatus();
  return WithFieldViolations(absl::InvalidArgumentError(absl::StrJoin(messages, "; ")), violations);
}

}  // namespace llamafleet
