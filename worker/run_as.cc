#include "worker/run_as.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace llamafleet::worker {
namespace {

// Variables of the worker that a trainer never sees even under an allowed prefix.
constexpr const char* kSecrets[] = {"LLAMAFLEET_JOIN_TOKEN", "LLAMAFLEET_TOKEN"};
constexpr const char* kExact[] = {"PATH",   "LANG",       "LANGUAGE", "TZ",
                                  "TMPDIR", "LD_LIBRARY_PATH", "HOME"};
constexpr const char* kPrefixes[] = {"LC_",     "NCCL_",  "FI_",  "CUDA_",      "NVIDIA_",
                                     "TORCH_",  "GLOO_",  "OMP_", "LLAMAFLEET_"};
constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

bool Allowed(const std::string& name) {
  for (const char* s : kSecrets) {
    if (name == s) return false;
  }
  for (const char* e : kExact) {
    if (name == e) return true;
  }
  for (const char* p : kPrefixes) {
    if (absl::StartsWith(name, p)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::optional<RunAs>> ResolveRunAs(const std::string& spec, uid_t euid) {
  std::string user = spec, group;
  if (spec.empty()) {
    return std::optional<RunAs>();
  } else if (size_t colon = spec.find(':'); colon != std::string::npos) {
    user = spec.substr(0, colon);
    group = spec.substr(colon + 1);
    if (user.empty() || group.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--run-as \"", spec, "\": expected USER or USER:GROUP"));
    }
  }
  if (uid_t self = 0; group.empty() && absl::SimpleAtoi(user, &self) && self == euid && euid != 0) {
    return std::optional<RunAs>();  // a non-root worker naming its own uid
  }
  struct passwd pw, *found = nullptr;
  std::vector<char> buf(16384);
  uid_t numeric = 0;
  if (getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    if (absl::SimpleAtoi(user, &numeric) &&
        getpwuid_r(numeric, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      // a numeric uid with a passwd entry
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--run-as: no such user '", user, "'"));
    }
  }
  RunAs r;
  r.user = pw.pw_name;
  r.uid = pw.pw_uid;
  r.gid = pw.pw_gid;
  struct stat st;
  if (pw.pw_dir != nullptr && ::stat(pw.pw_dir, &st) == 0 && S_ISDIR(st.st_mode)) r.home = pw.pw_dir;
  if (!group.empty()) {
    struct group gr, *gfound = nullptr;
    std::vector<char> gbuf(16384);
    gid_t gnum = 0;
    if (getgrnam_r(group.c_str(), &gr, gbuf.data(), gbuf.size(), &gfound) == 0 && gfound != nullptr) {
      r.gid = gr.gr_gid;
    } else if (absl::SimpleAtoi(group, &gnum)) {
      r.gid = gnum;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--run-as: no such group '", group, "'"));
    }
  }
  int n = 64;
  std::vector<gid_t> groups(n);
  if (getgrouplist(r.user.c_str(), r.gid, groups.data(), &n) < 0) {
    groups.resize(n);
    getgrouplist(r.user.c_str(), r.gid, groups.data(), &n);
  }
  groups.resize(n);
  r.groups = groups.empty() ? std::vector<gid_t>{r.gid} : groups;
  if (euid != 0) {
    if (r.uid == euid) return std::optional<RunAs>();  // already that user
    return absl::FailedPreconditionError(absl::StrCat(
        "--run-as ", spec, ": only a worker running as root can run trainers as another user"));
  }
  return std::optional<RunAs>(std::move(r));
}

absl::StatusOr<TrainerIdentities> ResolveTrainerIdentities(const std::string& spec, uid_t euid) {
  TrainerIdentities out;
  if (spec.empty()) {
    out.mode = euid == 0 ? TrainerIdentityMode::kPerOwner : TrainerIdentityMode::kWorkerUser;
    return out;
  }
  absl::StatusOr<std::optional<RunAs>> single = ResolveRunAs(spec, euid);
  if (!single.ok()) return single.status();
  if (single->has_value()) {
    out.mode = TrainerIdentityMode::kSingle;
    out.single = std::move(*single);
  }
  return out;
}

std::string DescribeTrainerIdentities(const TrainerIdentities& identities, uid_t euid) {
  switch (identities.mode) {
    case TrainerIdentityMode::kPerOwner:
      return "per-owner identities: each job's trainers run as the Unix identity the coordinator names for its "
             "owner (a mapped user or a dynamic uid), and the job's checkpoint and export directories are made "
             "owned by it, mode 0700: the kernel keeps one user's jobs out of another's files";
    case TrainerIdentityMode::kSingle: {
      const RunAs& r = *identities.single;
      return absl::StrCat("single identity (--run-as): every job's trainers run as user ", r.user, " (uid ", r.uid,
                          ", gid ", r.gid,
                          "); users are kept apart only by path checks and directory modes (leave --run-as out "
                          "for per-owner identities)");
    }
    case TrainerIdentityMode::kWorkerUser:
      break;
  }
  return absl::StrCat("worker's own user: trainers run as this worker's user (uid ", euid,
                      "); a worker that is not root cannot switch users, so users are kept apart only by path "
                      "checks and directory modes (run it as root for per-owner identities)");
}

std::vector<std::string> TrainerBaseEnvironment(const char* const* inherited,
                                                const std::optional<RunAs>& run_as,
                                                const std::string& work_dir) {
  std::map<std::string, std::string> env;
  for (const char* const* e = inherited; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    if (Allowed(name)) env[name] = entry.substr(eq + 1);
  }
  if (!env.count("PATH")) env["PATH"] = kDefaultPath;
  if (run_as.has_value()) {
    env["HOME"] = run_as->home.empty() ? work_dir : run_as->home;
    env["USER"] = run_as->user;
    env["LOGNAME"] = run_as->user;
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

}  // namespace llamafleet::worker
