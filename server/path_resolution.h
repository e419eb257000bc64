#ifndef LLAMAFLEET_SERVER_PATH_RESOLUTION_H_
#define LLAMAFLEET_SERVER_PATH_RESOLUTION_H_

// A spec's path as the storage resolves it, for the coordinator's ownership checks. The
// submit policy (submit_policy.h) judges paths lexically; a symbolic link inside a root
// can make two different strings name one directory (a user's link into another user's
// checkpoint directory). Where the coordinator sees the storage, these functions resolve
// the links, so that ownership is decided on what a path leads to, in a dry run exactly as
// in a real submission. Where it does not, the lexical path is all there is (and the
// workers, which open job directories without following links, refuse the rest).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

// `path` (normalized, below one of `roots`) with every link of its existing part resolved,
// written below the root as the spec names it (a root that is itself a link stays as
// named); nullopt when the root is not there on this machine, or the path leads out of it.
std::optional<std::string> ResolveBelowRoot(const std::vector<std::string>& roots, const std::string& path);

// The directories a job writes (checkpoint.dir, output.export_dir) are opened on the
// workers without following any link below the root. INVALID_ARGUMENT, naming the field
// (`prefix` + field) and where the path leads, when one of them leads through a link here;
// OK when none does or the storage is not visible here.
absl::Status CheckWrittenDirsHaveNoLinks(const std::vector<std::string>& roots, absl::string_view prefix,
                                         const v1::JobSpec& spec);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_PATH_RESOLUTION_H_
