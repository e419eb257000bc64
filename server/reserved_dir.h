#ifndef LLAMAFLEET_SERVER_RESERVED_DIR_H_
#define LLAMAFLEET_SERVER_RESERVED_DIR_H_

// <first path root>/llamafleet holds jobs' default checkpoint directories and the
// workers' token caches. Whoever owns it decides where those go, so the coordinator makes
// it at start (mode 0755) and refuses to start when it is not llamafleet's: a symbolic
// link, not a directory, owned by someone other than root, the coordinator's user or the
// trainers' system user `llamafleet`, or writable by group or others. Its `checkpoints`
// and `token-cache`, where present, must pass the same test.

#include <string>

#include "absl/status/status.h"

namespace llamafleet {

// OK when the directory is llamafleet's (made now, or found so). When it is missing and
// the coordinator cannot make it (the root is not there on this machine, or is not
// writable by the coordinator's user) OK too, and `*unchecked` is set. FAILED_PRECONDITION naming the directory, what is wrong, its
// owner's uid and the fix otherwise.
absl::Status PrepareReservedDir(const std::string& first_root, bool* unchecked);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_RESERVED_DIR_H_
