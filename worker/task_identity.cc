#include "worker/task_identity.h"

#include <grp.h>
#include <pwd.h>

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace llamafleet::worker {
namespace {

absl::Status Refused(const std::string& field, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat("identity.", field, ": ", why));
}

bool PrintableName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (unsigned char c : name) {
    if (c < 0x21 || c > 0x7e || c == '=' || c == '/') return false;
  }
  return true;
}

// A dynamic identity is nobody's account and no group's: one this host knows (a local
// user or group, a running systemd DynamicUser service, an id another coordinator handed
// out) would give the job that account's files or that group's access. Its uid's number is
// looked up as a group too: a dynamic identity's gid is its uid.
absl::Status CheckDynamicIdsAreFree(const v1::RunIdentity& id) {
  constexpr char kFix[] =
      "' on this worker: give the coordinator a --dynamic-uid-range that no account or group of "
      "any worker holds";
  std::vector<char> buf(16384);
  struct passwd pw, *found = nullptr;
  if (getpwuid_r(id.uid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return Refused("uid", absl::StrCat("dynamic uid ", id.uid(), " is user '", pw.pw_name, kFix));
  }
  std::set<uint32_t> gids = {id.gid(), id.uid()};
  gids.insert(id.groups().begin(), id.groups().end());
  for (uint32_t gid : gids) {
    struct group gr, *group = nullptr;
    if (getgrgid_r(gid, &gr, buf.data(), buf.size(), &group) != 0 || group == nullptr) continue;
    const char* field = gid == id.gid() ? "gid" : gid == id.uid() ? "uid" : "groups";
    return Refused(field, absl::StrCat("dynamic ", field == std::string("groups") ? "group" : field,
                                       " ", gid, " is group '", gr.gr_name, kFix));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TaskIdentity> IdentityForTask(const TrainerIdentities& identities,
                                             const v1::TaskSpec& task) {
  TaskIdentity out;
  if (identities.mode == TrainerIdentityMode::kSingle) out.run_as = identities.single;
  if (identities.mode != TrainerIdentityMode::kPerOwner) return out;
  if (!task.has_identity()) {
    return absl::FailedPreconditionError(
        absl::StrCat("identity: the coordinator named no Unix identity for owner '", task.owner(),
                     "', and this root worker runs each owner's jobs as their own identity: "
                     "upgrade the coordinator, or "
                     "start the worker with --run-as USER to run every job as one user"));
  }
  const v1::RunIdentity& id = task.identity();
  if (id.uid() == 0) return Refused("uid", "0 is root; trainers never run as root by identity");
  if (id.gid() == 0)
    return Refused("gid", "0 is root's group; trainers never run with it by identity");
  for (uint32_t g : id.groups()) {
    if (g == 0)
      return Refused("groups", "0 is root's group; trainers never run with it by identity");
  }
  if (!PrintableName(id.name())) {
    return Refused("name", "must be 1..64 printable characters without spaces, '=' or '/'");
  }
  mode_t mode = id.dir_mode() == 0 ? 0700 : static_cast<mode_t>(id.dir_mode());
  if (mode != 0700 && mode != 0750 && mode != 0770) {
    return Refused("dir_mode", absl::StrFormat("%04o is not 0700, 0750 or 0770", id.dir_mode()));
  }
  if (id.dynamic()) {
    LF_RETURN_IF_ERROR(CheckDynamicIdsAreFree(id));
  }
  RunAs r;
  r.user = id.name();
  r.uid = id.uid();
  r.gid = id.gid();
  r.groups.push_back(id.gid());
  for (uint32_t g : id.groups()) {
    if (g != id.gid()) r.groups.push_back(g);
  }
  out.run_as = std::move(r);
  out.dir_mode = mode;
  out.umask = 0777 & ~mode;
  return out;
}

}  // namespace llamafleet::worker
