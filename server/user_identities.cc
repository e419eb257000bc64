#include "server/user_identities.h"

#include <grp.h>
#include <pwd.h>

#include <future>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/identity_store.h"
#include "storage/job_store.h"

namespace llamafleet {

std::string UidName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) {
    return absl::StrCat("uid ", uid, " (", found->pw_name, ")");
  }
  return absl::StrCat("uid ", uid);
}

absl::StatusOr<std::unique_ptr<UserIdentities>> UserIdentities::Load(JobStore* store,
                                                                     IdentityConfig config) {
  LF_RETURN_IF_ERROR(ValidateIdentityConfig(config));
  if (config.dynamic.has_value()) {
    LF_RETURN_IF_ERROR(CheckDynamicRangeIsFree(*config.dynamic, "dynamic_uid_range"));
  }
  std::unique_ptr<UserIdentities> ids(new UserIdentities(store, std::move(config)));
  absl::StatusOr<std::map<std::string, uint32_t>> recorded = ListDynamicUids(store);
  if (!recorded.ok()) return recorded.status();
  for (const auto& [user, id] : ids->config_.users) {
    for (const auto& [other, uid] : *recorded) {
      if (uid == id.uid() && other != user) {
        return absl::FailedPreconditionError(absl::StrCat(
            "users.", user, ".uid: ", uid, " is the dynamic uid recorded for user ", other,
            ", whose files on the storage it owns; map ", user, " to another uid"));
      }
    }
  }
  std::lock_guard<std::mutex> lock(ids->mu_);
  ids->dynamic_ = std::move(*recorded);
  return ids;
}

v1::RunIdentity UserIdentities::Dynamic(uint32_t uid) const {
  v1::RunIdentity id;
  id.set_uid(uid);
  id.set_gid(uid);
  id.set_name(absl::StrCat("llamafleet-", uid));
  id.set_dir_mode(0700);
  id.set_dynamic(true);
  return id;
}

bool UserIdentities::Unavailable(uint32_t uid) const {
  // nobody (65534) and the 16-bit -1 (65535) are no one's to give.
  if (uid == 65534 || uid == 65535) return true;
  for (const auto& [user, id] : config_.users) {
    if (id.uid() == uid) return true;
  }
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) return true;
  struct group gr, *group = nullptr;
  return getgrgid_r(uid, &gr, buf, sizeof(buf), &group) == 0 && group != nullptr;
}

std::optional<v1::RunIdentity> UserIdentities::Find(const std::string& user) const {
  if (auto it = config_.users.find(user); it != config_.users.end()) return it->second;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = dynamic_.find(user); it != dynamic_.end()) return Dynamic(it->second);
  return std::nullopt;
}

absl::Status UserIdentities::NoDynamicUids(const std::string& user) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "user ", user,
      " has no Unix identity to run jobs as: dynamic uids are off (dynamic_uid_range: none) and "
      "users: in the coordinator's config does not name them; an administrator must add users.",
      user));
}

absl::Status UserIdentities::Check(const std::string& user) {
  if (Find(user).has_value()) return absl::OkStatus();
  if (!config_.dynamic.has_value()) return NoDynamicUids(user);
  std::set<uint32_t> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [u, uid] : dynamic_) taken.insert(uid);
  }
  for (uint64_t uid = config_.dynamic->first; uid <= config_.dynamic->last; ++uid) {
    if (!taken.count(static_cast<uint32_t>(uid)) && !Unavailable(static_cast<uint32_t>(uid))) {
      return absl::OkStatus();
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("no dynamic uid left for user ", user, ": all of ", config_.dynamic->first, "-",
                   config_.dynamic->last,
                   " are taken; widen --dynamic-uid-range (dynamic_uid_range) or map the user "
                   "under users: in the "
                   "coordinator's config"));
}

void UserIdentities::EnsureAsync(const std::string& user, Done done) {
  if (std::optional<v1::RunIdentity> id = Find(user)) return done(*std::move(id));
  if (!config_.dynamic.has_value()) return done(NoDynamicUids(user));
  auto uid = std::make_shared<uint32_t>(0);
  store_->Write(AllocateDynamicUidTxn(
                    user, config_.dynamic->first, config_.dynamic->last,
                    [this](uint32_t u) { return Unavailable(u); }, uid),
                [this, user, uid, done = std::move(done)](absl::Status s) {
                  if (!s.ok()) return done(s);
                  {
                    std::lock_guard<std::mutex> lock(mu_);
                    dynamic_[user] = *uid;
                  }
                  done(Dynamic(*uid));
                });
}

absl::StatusOr<v1::RunIdentity> UserIdentities::Ensure(const std::string& user) {
  std::promise<absl::StatusOr<v1::RunIdentity>> result;
  std::future<absl::StatusOr<v1::RunIdentity>> got = result.get_future();
  EnsureAsync(user,
              [&result](absl::StatusOr<v1::RunIdentity> id) { result.set_value(std::move(id)); });
  return got.get();
}

std::vector<std::string> UserIdentities::EnsureActiveOwners() {
  std::vector<std::string> refusals;
  absl::StatusOr<std::vector<std::string>> owners = ListActiveOwners(store_);
  if (!owners.ok()) return {std::string(owners.status().message())};
  for (const std::string& owner : *owners) {
    if (absl::StatusOr<v1::RunIdentity> id = Ensure(owner); !id.ok())
      refusals.emplace_back(id.status().message());
  }
  return refusals;
}

std::string UserIdentities::Describe() const {
  size_t recorded = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    recorded = dynamic_.size();
  }
  const std::string users = absl::StrCat(config_.users.size(), " users mapped (users:)");
  if (!config_.dynamic.has_value()) {
    return absl::StrCat("job identities: ", users, "; dynamic uids off: other users cannot submit");
  }
  return absl::StrCat("job identities: ", users, "; other users get a dynamic uid of ",
                      config_.dynamic->first, "-", config_.dynamic->last, " (", recorded,
                      " recorded)");
}

}  // namespace llamafleet
