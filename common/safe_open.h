#ifndef LLAMAFLEET_COMMON_SAFE_OPEN_H_
#define LLAMAFLEET_COMMON_SAFE_OPEN_H_

// Opening a file someone else may have put there: a file a job names, a marker or manifest
// in a job's directory, anything below a path root that users with a shell can write. Such
// a user can make any name they may write a symbolic link, a FIFO (whose open blocks until
// someone opens its other end), a socket or a device. So every such open goes through
// here:
//   - the entry is looked at first (fstatat, no link followed) and anything but a regular
//     file is refused without being opened (opening a device may do something);
//   - the open adds O_NOFOLLOW (unless the caller reads through links its path checks
//     resolved, LastLink::kFollow), O_NONBLOCK (a FIFO swapped in meanwhile opens at once
//     rather than blocking) and O_CLOEXEC;
//   - the descriptor is checked again (fstat): it is what is read or written, so a swap
//     between the look and the open is caught too;
//   - reads are bounded.
// The descriptor returned is blocking again (O_NONBLOCK means nothing to a regular file).
//
// No absl beyond status and strings, no Torch: the coordinator, the worker and the trainer
// link this.

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dir_fd.h"

namespace llamafleet {

// Whether a symbolic link as the last component of the name is followed (a read through a
// link inside the roots that the path checks resolved) or refused (anything in a directory
// a job writes).
enum class LastLink { kRefuse, kFollow };

// What the entry of `st` is, for messages: "a FIFO", "a socket", "a directory", ...
std::string FileKind(mode_t mode);

// Opens `name`, relative to `dir_fd` (AT_FDCWD: `name` is a path), read-only as above.
// Errors name `shown` (the file as users know it, "output.export_dir: /fsx/x/.marker"):
// NOT_FOUND when it does not exist, FAILED_PRECONDITION when it is not a regular file
// ("... is not a regular file (a FIFO)"), is a link (LastLink::kRefuse) or cannot be
// opened, PERMISSION_DENIED when access is denied.
absl::StatusOr<UniqueFd> OpenRegularFile(int dir_fd, const std::string& name,
                                         absl::string_view shown,
                                         LastLink last = LastLink::kRefuse);

// Creates `name` relative to `dir_fd` (mode `mode`, past the umask) or truncates it when it
// is a regular file, write-only, never through a link. Errors as OpenRegularFile's; an
// existing FIFO, socket or device is refused and left as it is.
absl::StatusOr<UniqueFd> CreateRegularFile(int dir_fd, const std::string& name, mode_t mode,
                                           absl::string_view shown);

// The whole content of the regular file `name` (OpenRegularFile), at most `max_bytes`:
// FAILED_PRECONDITION naming `shown`, its size and the bound when it holds more (judged on
// the descriptor before any byte is read, and again while reading), DATA_LOSS on a read
// error; OpenRegularFile's errors otherwise.
absl::StatusOr<std::string> ReadRegularFile(int dir_fd, const std::string& name, size_t max_bytes,
                                            absl::string_view shown,
                                            LastLink last = LastLink::kRefuse);

}  // namespace llamafleet

#endif  // LLAMAFLEET_COMMON_SAFE_OPEN_H_
