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
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llamafleet/v1/job.pb.h"

namespace grpc {
class CallbackServerContext;
}

namespace llamafleet {

class JobStore;

struct Principal {
  std::string user;
  v1::Role role = v1::ROLE_UNSPECIFIED;
};

enum class Operation {
  kRead,    // any Get/List/Watch/Stream call
  kSubmit,  // SubmitJob(s), dry runs included
  kCancel,  // CancelJob: also needs the job's owner
};

struct ApiTokenRecord {
  int64_t id = 0;
  std::string user;
  v1::Role role = v1::ROLE_UNSPECIFIED;
  int64_t create_time_us = 0;
  bool revoked = false;
};

// A token check is a SQLite read (~12 us of the coordinator's CPU on a warm connection,
// about a tenth of what a submission costs). Valid tokens are therefore remembered, by
// hash, for at most `cache_ttl`, and every remembered token is forgotten as soon as any
// token is created or revoked: CreateApiToken and RevokeApiToken bump, after their
// commit, a counter in a small shared file beside the database (DB-tokens, mapped by
// every process that uses it), and the authenticator compares it on every call. So a
// revocation through `llamafleet-coordinator token revoke` counts for every call that
// starts after the command returns, as before; a change made some other way (SQL typed
// into the database, an older binary) counts within cache_ttl. A process that cannot
// map the file (a read-only data dir) checks every call against the database.
class TokenChangeCounter;

class Authenticator {
 public:
  // `store` is not owned and must outlive the authenticator.
  Authenticator(JobStore* store, bool enabled, absl::Duration cache_ttl = absl::Seconds(1));
  ~Authenticator();

  bool enabled() const { return enabled_; }

  // UNAUTHENTICATED without a valid, unrevoked token (the message says how to get one);
  // INVALID_ARGUMENT for a malformed x-llamafleet-user when authentication is off.
  absl::StatusOr<Principal> Authenticate(const grpc::CallbackServerContext& context) const;

  // Authenticate, then Authorize.
  absl::StatusOr<Principal> Check(const grpc::CallbackServerContext& context, Operation op,
                                  const std::string& job_owner = "") const;

 private:
  struct Remembered {
    Principal principal;
    absl::Time expires;
  };
  JobStore* const store_;
  const bool enabled_;
  const absl::Duration cache_ttl_;
  std::unique_ptr<TokenChangeCounter> changes_;  // null: no cache
  mutable absl::Mutex mu_;
  mutable uint64_t cache_generation_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::flat_hash_map<std::string, Remembered> cache_ ABSL_GUARDED_BY(mu_);
};

// The counter behind the token cache: one 64-bit word in DB_PATH + "-tokens", shared by
// mapping the file.
class TokenChangeCounter {
 public:
  // Null, with `error` set, when the file cannot be opened or mapped.
  static std::unique_ptr<TokenChangeCounter> Open(const std::string& db_path, std::string* error);
  ~TokenChangeCounter();
  uint64_t Load() const;
  void Bump();

 private:
  explicit TokenChangeCounter(uint64_t* word) : word_(word) {}
  uint64_t* const word_;
};

// PERMISSION_DENIED naming the user, their role and what was refused.
absl::Status Authorize(const Principal& principal, Operation op, const std::string& job_owner = "",
                       const std::string& job_id = "");

// "viewer", "user", "admin" (case-insensitive) → Role; INVALID_ARGUMENT otherwise.
absl::StatusOr<v1::Role> ParseRole(const std::string& name);
std::string RoleName(v1::Role role);

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
