#include "server/permissions.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace llamafleet {
namespace {

const char* OperationName(Operation op) {
  switch (op) {
    case Operation::kRead:
      return "read jobs";
    case Operation::kSubmit:
      return "submit jobs";
    case Operation::kCancel:
      return "cancel jobs";
    case Operation::kReleaseDir:
      return "release jobs' claims on directories (admins do)";
  }
  return "do that";
}

}  // namespace

std::string RoleName(v1::Role role) {
  switch (role) {
    case v1::VIEWER:
      return "viewer";
    case v1::USER:
      return "user";
    case v1::ADMIN:
      return "admin";
    default:
      return "none";
  }
}

absl::StatusOr<v1::Role> ParseRole(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "viewer") return v1::VIEWER;
  if (lower == "user") return v1::USER;
  if (lower == "admin") return v1::ADMIN;
  return absl::InvalidArgumentError(
      absl::StrCat("role must be one of viewer, user, admin (got \"", name, "\")"));
}

absl::Status Authorize(const Principal& principal, Operation op, const std::string& job_owner,
                       const std::string& job_id) {
  const v1::Role role = principal.role;
  bool allowed = false;
  switch (op) {
    case Operation::kRead:
      allowed = role == v1::VIEWER || role == v1::USER || role == v1::ADMIN;
      break;
    case Operation::kSubmit:
      allowed = role == v1::USER || role == v1::ADMIN;
      break;
    case Operation::kCancel:
      allowed = role == v1::ADMIN ||
                (role == v1::USER && (job_owner.empty() || job_owner == principal.user));
      if (!allowed && role == v1::USER) {
        return absl::PermissionDeniedError(absl::StrCat(
            "user ", principal.user, " may not cancel job ", job_id, ", owned by ", job_owner,
            " (users cancel their own jobs; admins cancel any)"));
      }
      break;
    case Operation::kReleaseDir:
      allowed = role == v1::ADMIN;
      break;
  }
  if (allowed) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(principal.user, " (role ", RoleName(role),
                                                  ") may not ", OperationName(op)));
}

}  // namespace llamafleet
