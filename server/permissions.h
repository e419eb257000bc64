#ifndef LLAMAFLEET_SERVER_PERMISSIONS_H_
#define LLAMAFLEET_SERVER_PERMISSIONS_H_

// What each role may do; pure functions, shared by the gRPC services (after
// authenticating a call, auth.h) and the HTTP gateway (which refuses a request before
// reading its body when the caller's role cannot do what the route does).
//   viewer  reads everything;
//   user    reads everything, submits jobs, cancels the jobs it owns;
//   admin   does anything, including cancelling anyone's job and releasing a job's
//           claim on a directory.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llamafleet/v1/job.pb.h"

namespace llamafleet {

struct Principal {
  std::string user;
  v1::Role role = v1::ROLE_UNSPECIFIED;
};

enum class Operation {
  kRead,        // any Get/List/Watch/Stream call
  kSubmit,      // SubmitJob(s), dry runs included
  kCancel,      // CancelJob: also needs the job's owner
  kReleaseDir,  // ReleaseDir: admins only
};

// PERMISSION_DENIED naming the user, their role and what was refused. For kCancel with an
// empty `job_owner` only the role is checked (users may cancel the jobs they own).
absl::Status Authorize(const Principal& principal, Operation op, const std::string& job_owner = "",
                       const std::string& job_id = "");

// "viewer", "user", "admin" (case-insensitive) → Role; INVALID_ARGUMENT otherwise.
absl::StatusOr<v1::Role> ParseRole(const std::string& name);
std::string RoleName(v1::Role role);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_PERMISSIONS_H_
