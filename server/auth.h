#ifndef LLAMAFLEET_SERVER_AUTH_H_
#define LLAMAFLEET_SERVER_AUTH_H_

// Who is calling, and what they may do.
//
// Callers present an API token as gRPC metadata `authorization: Bearer <token>` (the HTTP
// gateway forwards its Authorization header unchanged, so one check covers both
// transports). Tokens are random, shown once at creation, and stored only as their
// SHA-256 in the coordinator's database (table api_tokens), with a user name and a role:
//   viewer  reads everything;
//   user    reads everything, submits jobs, cancels the jobs it owns;
//   admin   does anything, including cancelling anyone's job.
// Workers never use these tokens: they join with the cluster's join token.
//
// With authentication off (--insecure-no-auth) every caller is an admin named by the
// x-llamafleet-user metadata, or "anonymous".

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/job.pb.h"
#include "server/permissions.h"

namespace grpc {
class CallbackServerContext;
}

namespace llamafleet {

class AuthFailures;
class JobStore;

struct ApiTokenRecord {
  int64_t id = 0;
  std::string user;
  v1::Role role = v1::ROLE_UNSPECIFIED;
  int64_t create_time_us = 0;
  bool revoked = false;
};

// Every call checks its token against the database: one indexed lookup of the token's
// SHA-256 in api_tokens (token_sha256 is UNIQUE, so SQLite keeps an index on it), on a
// statement prepared once per reader connection. Nothing is remembered between calls, so
// a token created or revoked by any means (the `llamafleet-coordinator token` commands,
// another process, SQL typed into the database) counts from the next call on.
class Authenticator {
 public:
  // `store` is not owned and must outlive the authenticator.
  Authenticator(JobStore* store, bool enabled);

  bool enabled() const { return enabled_; }

  // Where failed token attempts are counted per peer (auth_failures.h); not owned, must
  // outlive the authenticator. Set before serving. Unset: not counted.
  void set_failures(AuthFailures* failures) { failures_ = failures; }

  // UNAUTHENTICATED without a valid, unrevoked token (the message says how to get one);
  // INVALID_ARGUMENT for a malformed x-llamafleet-user when authentication is off;
  // RESOURCE_EXHAUSTED while the caller's address is blocked for failed attempts.
  absl::StatusOr<Principal> Authenticate(const grpc::CallbackServerContext& context) const;

  // The token check alone, for an authentication that is on: `authorization` is the
  // metadata's value ("Bearer <token>"; empty when absent).
  absl::StatusOr<Principal> AuthenticateBearer(absl::string_view authorization) const;

  // Authenticate, then Authorize.
  absl::StatusOr<Principal> Check(const grpc::CallbackServerContext& context, Operation op,
                                  const std::string& job_owner = "") const;

 private:
  JobStore* const store_;
  const bool enabled_;
  AuthFailures* failures_ = nullptr;
};


// User names: 1..64 characters of letters, digits, '-', '_', '.' and '@'.
absl::Status ValidateUserName(const std::string& user, const std::string& field);

// Token management (the `llamafleet-coordinator token` commands; safe while a
// coordinator runs on the same database). Create returns the token, which is not stored.
absl::StatusOr<std::string> CreateApiToken(JobStore* store, const std::string& user, v1::Role role);
absl::StatusOr<std::vector<ApiTokenRecord>> ListApiTokens(JobStore* store);
// NOT_FOUND if there is no such token id.
absl::Status RevokeApiToken(JobStore* store, int64_t id);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_AUTH_H_
