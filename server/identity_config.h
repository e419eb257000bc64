#ifndef LLAMAFLEET_SERVER_IDENTITY_CONFIG_H_
#define LLAMAFLEET_SERVER_IDENTITY_CONFIG_H_

// Which Unix identity each API user's jobs run as on the workers, as the coordinator is
// configured (user_identities.h applies it):
//
//   users:                                  # API user -> Unix identity
//     alice: {user: alice}                  # a Unix user, resolved on the coordinator host
//     bob:   {uid: 2001, gid: 2001}
//     carol: {uid: 2002, gid: 2002, group: mlteam, dir_mode: "0770"}
//   dynamic_uid_range: 61184-65519          # or --dynamic-uid-range; "none": no dynamic uids
//
// A user without an entry gets a dynamic uid (gid the same) of the range, kept for them
// for good. `group` (a name or a gid) shares the job's directories with a group: the
// trainers run with it as their primary group (what their files are created with; the
// user's own gid stays a supplementary group) and the worker makes the job's directories
// with `dir_mode` 0750 (the default with a group) or 0770; without one they are 0700.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "llamafleet/v1/worker.pb.h"

namespace YAML {
class Node;
}

namespace llamafleet {

struct UidRange {
  uint32_t first = 0;
  uint32_t last = 0;
  bool Contains(uint32_t uid) const { return uid >= first && uid <= last; }
};

// systemd's range for DynamicUser= services (systemd's UIDs.md).
inline constexpr UidRange kDefaultDynamicUids = {61184, 65519};

struct IdentityConfig {
  // Configured users (`users:`), each a complete identity (dynamic false).
  std::map<std::string, v1::RunIdentity> users;
  // Where users without an entry get a uid; nullopt ("none"): such users may not submit.
  std::optional<UidRange> dynamic = kDefaultDynamicUids;
};

// "A-B" (first and last uid, 1000 <= A <= B < 2^31 - 1) or "none". INVALID_ARGUMENT
// naming `field` otherwise.
absl::StatusOr<std::optional<UidRange>> ParseUidRange(const std::string& text,
                                                      const std::string& field);

// The `users:` mapping: each key an API user name (auth.h's ValidateUserName), each value
// a mapping with `user` (a Unix user name) or `uid` and `gid`, and optionally `group` and
// `dir_mode`. Names are resolved with this host's user and group databases. Refuses, naming
// the field (users.NAME.uid, ...): unknown keys, root's uid or gid, a name this host does not
// know, a dir_mode other than 0700, 0750 or 0770, and a group mode without a group.
absl::StatusOr<std::map<std::string, v1::RunIdentity>> ParseUsersConfig(const YAML::Node& users);

// Whole-config checks: no configured uid lies inside the dynamic range (it would be handed
// to someone else too). INVALID_ARGUMENT naming users.NAME.uid.
absl::Status ValidateIdentityConfig(const IdentityConfig& config);

// Whether `range` is free on this host: FAILED_PRECONDITION naming `field`, the range and
// its first (lowest) id that an account or a group of this host's user and group
// databases holds, with the fix; OK when none does. A dynamic uid is its job's uid and gid
// at once, so a job given one that an account or group holds would get that account's
// files or that group's access. 65534 (nobody, nogroup) and 65535 do not count: they are
// never handed out. The databases are enumerated (getpwent, getgrent: local files,
// systemd's DynamicUser= services, a name service that enumerates); entries a name service
// does not enumerate (sssd or LDAP without enumerate) are not seen here, but each uid is
// still looked up before it is handed out, and by each worker before a job runs as it.
absl::Status CheckDynamicRangeIsFree(const UidRange& range, const std::string& field);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_IDENTITY_CONFIG_H_
