#ifndef LLAMAFLEET_WORKER_FS_IDENTITY_H_
#define LLAMAFLEET_WORKER_FS_IDENTITY_H_

// Acting on the filesystem as another Unix identity, on the calling thread only. While `fn`
// runs, the kernel checks every search, create and write as it would for `who`, and what
// is created belongs to `who` (and `who.gid`): a root worker never makes a directory
// where the identity itself could not (a job naming a path inside another user's 0700
// directory gets EACCES, as its trainer would), and with NFS root squashing the server
// sees the identity, not root.
//
// Linux keeps credentials per thread. setfsuid/setfsgid and the raw setgroups system
// call change only the calling thread's (glibc's setgroups() would change every thread's),
// so the worker's other threads keep root meanwhile; a thread `fn` started would inherit
// the identity (so `fn` starts none). Needs CAP_SETUID and CAP_SETGID.

#include <functional>

#include "absl/status/status.h"
#include "worker/run_as.h"

namespace llamafleet::worker {

// Runs `fn` with the calling thread's filesystem uid, gid and supplementary groups those
// of `who`, then restores the thread's own. FAILED_PRECONDITION when they cannot be
// switched (not root); `fn`'s status otherwise. Aborts the process when they cannot be
// restored: a thread left as another identity must not go on.
absl::Status WithFsIdentity(const RunAs& who, const std::function<absl::Status()>& fn);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_FS_IDENTITY_H_
