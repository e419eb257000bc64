#ifndef LLAMAFLEET_SERVER_USER_IDENTITIES_H_
#define LLAMAFLEET_SERVER_USER_IDENTITIES_H_

// The Unix identity each API user's jobs run as on the workers (TaskSpec.identity), chosen
// here, by the coordinator, so that it is the same on every node of the shared storage:
// a user configured under `users:` gets that identity (identity_config.h); any other gets
// a dynamic uid (gid the same, directories 0700, like systemd's DynamicUser=) from the
// configured range, recorded the first time they submit (storage/identity_store.h) and
// theirs for good, across restarts and config changes. Load refuses a range that holds an
// account or group of this host (identity_config.h's CheckDynamicRangeIsFree), and a new
// dynamic uid skips the configured users' uids and every id this host's user or group
// database knows.
//
// Thread-safe. Ensure may write (a user's first submission); Find never blocks on the
// database, for the cluster loop.

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "llamafleet/v1/worker.pb.h"
#include "server/identity_config.h"

namespace llamafleet {

// How messages name a uid: "uid 1001 (alice)", or "uid 1001" where this host does not know
// it (its user database, getpwuid_r).
std::string UidName(uid_t uid);

class JobStore;

class UserIdentities {
 public:
  // Reads the recorded dynamic uids. FAILED_PRECONDITION when one is a configured user's
  // uid too (two users would share files), naming both, and when the dynamic range holds an
  // account or group of this host (CheckDynamicRangeIsFree), naming the first.
  static absl::StatusOr<std::unique_ptr<UserIdentities>> Load(JobStore* store,
                                                              IdentityConfig config);

  // `user`'s identity: configured, else recorded, else a new dynamic uid, recorded before
  // it is given. RESOURCE_EXHAUSTED when the range has none left; FAILED_PRECONDITION
  // when dynamic uids are off and the user has no entry. Both name the fix. `done` runs on
  // the caller's thread when nothing is to be recorded, else on the store's writer thread
  // after the commit (it must not block).
  using Done = std::function<void(absl::StatusOr<v1::RunIdentity>)>;
  void EnsureAsync(const std::string& user, Done done);
  // The same, waiting for the write (tools, start-up, tests).
  absl::StatusOr<v1::RunIdentity> Ensure(const std::string& user);
  // Whether Ensure would succeed, recording nothing (dry runs).
  absl::Status Check(const std::string& user);
  // Configured or recorded; nullopt for a user who has none yet. Never blocks on I/O.
  std::optional<v1::RunIdentity> Find(const std::string& user) const;

  // Ensures every owner of an unfinished job has one (after an upgrade, jobs queued before
  // identities existed); returns the refusals, one line each.
  std::vector<std::string> EnsureActiveOwners();

  // One line for the start log: how many users are configured and the dynamic range.
  std::string Describe() const;

 private:
  UserIdentities(JobStore* store, IdentityConfig config)
      : store_(store), config_(std::move(config)) {}
  v1::RunIdentity Dynamic(uint32_t uid) const;
  absl::Status NoDynamicUids(const std::string& user) const;
  // A uid no dynamic user may get: a configured user's, or one this host's user database
  // names as an account or its group database as a group (it would be the job's gid too).
  bool Unavailable(uint32_t uid) const;

  JobStore* const store_;
  const IdentityConfig config_;
  mutable std::mutex mu_;
  std::map<std::string, uint32_t> dynamic_ ABSL_GUARDED_BY(mu_);
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_USER_IDENTITIES_H_
