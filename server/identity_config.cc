#include "server/identity_config.h"

#include <grp.h>
#include <pwd.h>

#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "server/auth.h"
#include "yaml-cpp/yaml.h"

namespace llamafleet {
namespace {

constexpr uint32_t kLowestDynamicUid = 1000;  // below: the system's own accounts
constexpr uint32_t kHighestUid = 2147483646;  // 2^31 - 2: what every filesystem keeps

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::StatusOr<uint32_t> Id(const YAML::Node& node, const std::string& field) {
  uint32_t id = 0;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &id) || id > kHighestUid) {
    return Invalid(field, absl::StrCat("expected a number from 1 to ", kHighestUid));
  }
  if (id == 0) return Invalid(field, "0 is root's; jobs never run as root by mapping");
  return id;
}

// A gid, or a group name this host knows.
absl::StatusOr<uint32_t> Group(const YAML::Node& node, const std::string& field) {
  if (node.IsScalar() && !node.Scalar().empty() && absl::ascii_isdigit(node.Scalar()[0]))
    return Id(node, field);
  if (!node.IsScalar() || node.Scalar().empty())
    return Invalid(field, "expected a group name or a gid");
  struct group gr, *found = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(node.Scalar().c_str(), &gr, buf.data(), buf.size(), &found) != 0 ||
      found == nullptr) {
    return Invalid(field, absl::StrCat("no group '", node.Scalar(),
                                       "' on the coordinator host (give its gid)"));
  }
  if (gr.gr_gid == 0) return Invalid(field, "0 is root's group; jobs never run with it by mapping");
  return static_cast<uint32_t>(gr.gr_gid);
}

absl::StatusOr<v1::RunIdentity> ParseUser(const std::string& api_user, const YAML::Node& node) {
  const std::string prefix = absl::StrCat("users.", api_user);
  if (!node.IsMap()) return Invalid(prefix, "expected a mapping with user, or uid and gid");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (key != "user" && key != "uid" && key != "gid" && key != "group" && key != "dir_mode") {
      return Invalid(absl::StrCat(prefix, ".", key),
                     "unknown key (user, uid, gid, group, dir_mode)");
    }
  }
  v1::RunIdentity id;
  if (node["user"]) {
    if (node["uid"] || node["gid"]) return Invalid(prefix, "give user or uid and gid, not both");
    const YAML::Node user = node["user"];
    if (!user.IsScalar() || user.Scalar().empty())
      return Invalid(prefix + ".user", "expected a Unix user name");
    struct passwd pw, *found = nullptr;
    std::vector<char> buf(16384);
    if (getpwnam_r(user.Scalar().c_str(), &pw, buf.data(), buf.size(), &found) != 0 ||
        found == nullptr) {
      return Invalid(prefix + ".user",
                     absl::StrCat("no user '", user.Scalar(),
                                  "' on the coordinator host (give uid and gid instead)"));
    }
    if (pw.pw_uid == 0) return Invalid(prefix + ".user", "root; jobs never run as root by mapping");
    if (pw.pw_gid == 0)
      return Invalid(prefix + ".user", "its group is root's; give uid and gid instead");
    id.set_uid(pw.pw_uid);
    id.set_gid(pw.pw_gid);
    id.set_name(pw.pw_name);
  } else {
    if (!node["uid"] || !node["gid"]) return Invalid(prefix, "expected user, or uid and gid");
    LF_ASSIGN_OR_RETURN(uint32_t uid, Id(node["uid"], prefix + ".uid"));
    LF_ASSIGN_OR_RETURN(uint32_t gid, Id(node["gid"], prefix + ".gid"));
    id.set_uid(uid);
    id.set_gid(gid);
    struct passwd pw, *found = nullptr;
    std::vector<char> buf(16384);
    const bool known =
        getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr;
    id.set_name(known ? std::string(pw.pw_name) : absl::StrCat("uid-", uid));
  }
  std::optional<uint32_t> shared;
  if (node["group"]) {
    LF_ASSIGN_OR_RETURN(uint32_t g, Group(node["group"], prefix + ".group"));
    shared = g;
  }
  uint32_t mode = shared.has_value() ? 0750 : 0700;
  if (node["dir_mode"]) {
    const YAML::Node m = node["dir_mode"];
    const std::string text = m.IsScalar() ? std::string(absl::StripPrefix(m.Scalar(), "0")) : "";
    if (text == "700") {
      mode = 0700;
    } else if (text == "750") {
      mode = 0750;
    } else if (text == "770") {
      mode = 0770;
    } else {
      return Invalid(prefix + ".dir_mode", "expected \"0700\", \"0750\" or \"0770\"");
    }
    if (mode != 0700 && !shared.has_value()) {
      return Invalid(prefix + ".dir_mode",
                     "a mode that shares with a group needs users." + api_user + ".group");
    }
  }
  if (shared.has_value() && *shared != id.gid()) {
    // The shared group is what the trainers' files are created with; the user's own stays.
    id.add_groups(id.gid());
    id.set_gid(*shared);
  }
  id.set_dir_mode(mode);
  return id;
}

}  // namespace

absl::StatusOr<std::optional<UidRange>> ParseUidRange(const std::string& text,
                                                      const std::string& field) {
  if (text == "none") return std::optional<UidRange>();
  std::vector<std::string> parts = absl::StrSplit(text, '-');
  UidRange r;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &r.first) ||
      !absl::SimpleAtoi(parts[1], &r.last)) {
    return Invalid(field,
                   absl::StrCat("\"", text, "\" is not FIRST-LAST (e.g. 61184-65519) or none"));
  }
  if (r.first < kLowestDynamicUid || r.last > kHighestUid || r.first > r.last) {
    return Invalid(field, absl::StrCat("\"", text, "\" must satisfy ", kLowestDynamicUid,
                                       " <= FIRST <= LAST <= ", kHighestUid));
  }
  return std::optional<UidRange>(r);
}

absl::StatusOr<std::map<std::string, v1::RunIdentity>> ParseUsersConfig(const YAML::Node& users) {
  std::map<std::string, v1::RunIdentity> out;
  if (users.IsNull()) return out;
  if (!users.IsMap()) return Invalid("users", "expected a mapping of API users to Unix identities");
  for (const auto& kv : users) {
    const std::string api_user = kv.first.as<std::string>();
    LF_RETURN_IF_ERROR(ValidateUserName(api_user, absl::StrCat("users.", api_user)));
    LF_ASSIGN_OR_RETURN(v1::RunIdentity id, ParseUser(api_user, kv.second));
    out[api_user] = std::move(id);
  }
  return out;
}

absl::Status ValidateIdentityConfig(const IdentityConfig& config) {
  if (!config.dynamic.has_value()) return absl::OkStatus();
  for (const auto& [user, id] : config.users) {
    if (config.dynamic->Contains(id.uid())) {
      return Invalid(
          absl::StrCat("users.", user, ".uid"),
          absl::StrCat(id.uid(), " is inside the dynamic uid range ", config.dynamic->first, "-",
                       config.dynamic->last, ", which is handed out to users without a mapping"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDynamicRangeIsFree(const UidRange& range, const std::string& field) {
  std::optional<uint32_t> first;
  std::string holder;  // "uid N is user 'x'" or "gid N is group 'y'"
  auto consider = [&](uint32_t id, const char* kind, const char* what, const char* name) {
    // nobody and nogroup (65534) and the 16-bit -1 are never handed out (user_identities.h).
    if (!range.Contains(id) || id == 65534 || id == 65535 || (first.has_value() && *first <= id))
      return;
    first = id;
    holder = absl::StrCat(kind, " ", id, " is ", what, " '", name, "'");
  };
  setpwent();
  while (const struct passwd* pw = getpwent()) consider(pw->pw_uid, "uid", "user", pw->pw_name);
  endpwent();
  setgrent();
  while (const struct group* gr = getgrent()) consider(gr->gr_gid, "gid", "group", gr->gr_name);
  endgrent();
  if (!first.has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(field, " ", range.first, "-", range.last, ": ", holder,
                   " on the coordinator host, and a dynamic uid is its job's uid and gid: that job "
                   "would get its files or its "
                   "access. Pick a range that no account or group of any coordinator host or "
                   "worker holds, and that no other "
                   "coordinator sharing the storage or these hosts hands out"));
}

}  // namespace llamafleet
