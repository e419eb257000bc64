#include "worker/fs_identity.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace llamafleet::worker {
namespace {

// The thread's own supplementary groups (the getgroups system call reads the calling
// thread's credentials).
std::vector<gid_t> ThreadGroups() {
  const int n = ::getgroups(0, nullptr);
  std::vector<gid_t> groups(n > 0 ? n : 0);
  if (n > 0 && ::getgroups(n, groups.data()) != n) groups.clear();
  return groups;
}

bool SetThreadGroups(const std::vector<gid_t>& groups) {
  return ::syscall(SYS_setgroups, groups.size(), groups.data()) == 0;
}

// setfsuid/setfsgid report the previous value, not success: asking again with an invalid
// id (-1) reads the current one.
bool SetFsUid(uid_t uid) {
  ::setfsuid(uid);
  return static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))) == uid;
}
bool SetFsGid(gid_t gid) {
  ::setfsgid(gid);
  return static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))) == gid;
}

[[noreturn]] void Abort(const char* what) {
  std::fprintf(stderr, "llamafleet-worker: fatal: cannot restore this thread's %s after acting as a job's identity\n",
               what);
  std::abort();
}

}  // namespace

absl::Status WithFsIdentity(const RunAs& who, const std::function<absl::Status()>& fn) {
  const uid_t own_uid = ::geteuid();
  const gid_t own_gid = ::getegid();
  const std::vector<gid_t> own_groups = ThreadGroups();
  std::vector<gid_t> groups = who.groups;
  if (groups.empty()) groups.push_back(who.gid);
  if (!SetThreadGroups(groups)) {
    return absl::FailedPreconditionError(absl::StrCat("cannot take the groups of ", who.user, " (uid ", who.uid,
                                                      "): ", std::strerror(errno), "; the worker must be root"));
  }
  if (!SetFsGid(who.gid) || !SetFsUid(who.uid)) {
    const int error = errno;
    if (!SetFsGid(own_gid)) Abort("filesystem gid");
    if (!SetThreadGroups(own_groups)) Abort("groups");
    return absl::FailedPreconditionError(absl::StrCat("cannot act as ", who.user, " (uid ", who.uid, ", gid ",
                                                      who.gid, "): ", std::strerror(error),
                                                      "; the worker must be root"));
  }
  absl::Status status = fn();
  if (!SetFsUid(own_uid)) Abort("filesystem uid");
  if (!SetFsGid(own_gid)) Abort("filesystem gid");
  if (!SetThreadGroups(own_groups)) Abort("groups");
  return status;
}

}  // namespace llamafleet::worker
