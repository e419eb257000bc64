#include "server/claim_judge.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/dir_fd.h"
#include "common/status_macros.h"
#include "server/user_identities.h"
#include "storage/job_store.h"

namespace llamafleet {
namespace {

// The system user workers run every job as with --run-as (worker/run_as.h), if this host
// knows it.
std::optional<uid_t> TrainersUid() {
  static const std::optional<uid_t> uid = []() -> std::optional<uid_t> {
    struct passwd pw;
    struct passwd* found = nullptr;
    char buf[4096];
    if (::getpwnam_r("llamafleet", &pw, buf, sizeof(buf), &found) != 0 || found == nullptr)
      return std::nullopt;
    return found->pw_uid;
  }();
  return uid;
}


}  // namespace

ClaimJudge::Lookup ClaimJudge::Inspect(const std::string& dir) const {
  Lookup out;
  std::optional<std::pair<std::string, std::string>> split = SplitBeneathRoot(roots_, dir);
  if (!split.has_value()) return out;
  absl::StatusOr<UniqueFd> root = OpenRootDir(split->first);
  if (!root.ok()) return out;
  const std::string& relative = split->second;
  struct stat st;
  if (relative.empty()) {
    if (::fstat(root->get(), &st) != 0) return out;
  } else {
    const size_t slash = relative.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : relative.substr(0, slash);
    const std::string leaf = slash == std::string::npos ? relative : relative.substr(slash + 1);
    absl::StatusOr<UniqueFd> at = OpenDirBeneath(root->get(), parent, std::nullopt, dir);
    if (!at.ok()) {
      if (absl::IsNotFound(at.status())) out.kind = Lookup::kMissing;
      return out;
    }
    if (::fstatat(at->get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) out.kind = Lookup::kMissing;
      return out;
    }
  }
  out.kind = S_ISDIR(st.st_mode) ? Lookup::kDirectory : Lookup::kNotDirectory;
  out.uid = st.st_uid;
  return out;
}

std::vector<uid_t> ClaimJudge::JobUids(const std::string& user) const {
  std::vector<uid_t> uids;
  if (std::optional<v1::RunIdentity> id = identities_->Find(user)) uids.push_back(id->uid());
  if (std::optional<uid_t> trainers = TrainersUid()) uids.push_back(*trainers);
  // Workers that are not root run every job as themselves: on one machine (the local
  // mode), the coordinator's user. Never root: root's directories are no job's.
  if (const uid_t self = ::geteuid(); self != 0) uids.push_back(self);
  return uids;
}

bool ClaimJudge::IsReal(const DirClaim& claim) const {
  if (claim.wrote || identities_ == nullptr) return true;
  const Lookup found = Inspect(claim.dir);
  if (found.kind != Lookup::kDirectory) return false;
  const std::vector<uid_t> uids = JobUids(claim.owner);
  return std::find(uids.begin(), uids.end(), found.uid) != uids.end();
}

absl::Status ClaimJudge::CheckClaimable(const std::string& user, absl::string_view prefix,
                                        const v1::JobSpec& spec) const {
  if (identities_ == nullptr) return absl::OkStatus();
  for (const auto& [field, dir] : {std::pair<absl::string_view, const std::string*>{
                                       "checkpoint.dir", &spec.checkpoint().dir()},
                                   {"output.export_dir", &spec.output().export_dir()}}) {
    if (dir->empty()) continue;
    const Lookup found = Inspect(*dir);
    if (found.kind == Lookup::kNotDirectory) {
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, field, " ", *dir, " exists and is not a directory (",
                       UidName(found.uid), "'s); name a directory"));
    }
    if (found.kind != Lookup::kDirectory) continue;
    const std::vector<uid_t> uids = JobUids(user);
    if (std::find(uids.begin(), uids.end(), found.uid) != uids.end()) continue;
    std::optional<v1::RunIdentity> id = identities_->Find(user);
    return absl::FailedPreconditionError(absl::StrCat(
        prefix, field, " ", *dir, " belongs to ", UidName(found.uid), ", not to ", user,
        "'s job identity",
        id.has_value() ? absl::StrCat(" (uid ", id->uid(), ")") : std::string(" (none yet)"),
        ": a job may claim only a directory that does not exist yet or one of its own identity's; "
        "name a new "
        "directory"));
  }
  return absl::OkStatus();
}

absl::Status ClaimJudge::MarkPendingClaims(JobStore& store,
                                           std::vector<SubmitJobInput>* inputs) const {
  if (identities_ == nullptr) return absl::OkStatus();
  for (SubmitJobInput& in : *inputs) {
    for (const std::string* dir : {&in.spec.checkpoint().dir(), &in.spec.output().export_dir()}) {
      if (dir->empty()) continue;
      std::vector<DirClaim> clashes;
      LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
        Txn txn(conn, 0);
        absl::StatusOr<std::vector<DirClaim>> found =
            ClashingClaims(txn, *dir, in.owner, {}, kMaxClaimsJudged);
        if (!found.ok()) return found.status();
        clashes = *std::move(found);
        return absl::OkStatus();
      }));
      for (const DirClaim& c : clashes) {
        if (c.owner == in.owner || c.deleted || IsReal(c)) continue;
        in.pending_claims.push_back(PendingClaim{c.job_id, c.field});
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace llamafleet
