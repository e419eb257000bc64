#ifndef LLAMAFLEET_SERVER_CLAIM_JUDGE_H_
#define LLAMAFLEET_SERVER_CLAIM_JUDGE_H_

// Which directories a job may claim for its output (checkpoint.dir, output.export_dir), and
// which recorded claims (storage/dir_claims.h) keep other users out, decided on what the
// storage says where the coordinator sees it. A job's directory is its identity's: the
// worker makes a missing one as the job's Unix identity (user_identities.h), and refuses
// one that belongs to anyone else. So:
//   - a job may name a directory that does not exist yet, or one that belongs to its
//     identity (or to `llamafleet`, the one identity workers run every job as with
//     --run-as, or to the coordinator's own user unless that is root: workers that are not
//     root run jobs as themselves, the coordinator's user in the local mode); one that
//     belongs to anyone else is refused at submission;
//   - a claim keeps other users' jobs out (their outputs there, their reads from a
//     checkpoint directory) once it is real: the job wrote there, or the directory exists
//     and belongs to the claimant's identity (it was there, or the job made it). Until
//     then it keeps out only its owner's other jobs.
// Directories are looked up from a descriptor of their path root, the last component
// with fstatat(AT_SYMLINK_NOFOLLOW), never following a link. Where the coordinator cannot
// look (the root is not mounted here, a directory on the way is closed to its user, a
// link on the way) nothing is refused for ownership and a claim is real only once written.
//
// These calls touch the storage: run them off the gRPC callback threads and the cluster
// loop (the job service runs them on an executor of its own).

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "llamafleet/v1/job.pb.h"
#include "storage/dir_claims.h"
#include "storage/job_writes.h"

namespace llamafleet {

class JobStore;
class UserIdentities;

class ClaimJudge {
 public:
  // `roots`: the coordinator's path roots (normalized). `identities` (not owned; null:
  // no identities, so every recorded claim is real and no owner is checked).
  ClaimJudge(std::vector<std::string> roots, const UserIdentities* identities)
      : roots_(std::move(roots)), identities_(identities) {}

  // Whether `claim` keeps users other than its owner out (see above).
  bool IsReal(const DirClaim& claim) const;

  // FAILED_PRECONDITION naming the field (`prefix` + field), the path and its owner's uid
  // when the spec's checkpoint.dir or output.export_dir exists here and is not a
  // directory, or belongs to none of JobUids(user). OK otherwise.
  absl::Status CheckClaimable(const std::string& user, absl::string_view prefix,
                              const v1::JobSpec& spec) const;

  // Fills each input's pending_claims with the clashing claims of other users' jobs that
  // are not real, at most kMaxClaimsJudged per directory (the rest stay clashes).
  // Errors: the store's.
  absl::Status MarkPendingClaims(JobStore& store, std::vector<SubmitJobInput>* inputs) const;

  static constexpr int kMaxClaimsJudged = 256;

 private:
  // What the storage says of a directory below a root.
  struct Lookup {
    enum Kind { kUnknown, kMissing, kNotDirectory, kDirectory } kind = kUnknown;
    uid_t uid = 0;
  };
  Lookup Inspect(const std::string& dir) const;
  // The uids `user`'s jobs may run as: their identity's, `llamafleet`'s where this host
  // knows that user, and this process's unless it is root.
  std::vector<uid_t> JobUids(const std::string& user) const;

  const std::vector<std::string> roots_;
  const UserIdentities* const identities_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLAIM_JUDGE_H_
