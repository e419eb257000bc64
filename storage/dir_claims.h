#ifndef LLAMAFLEET_STORAGE_DIR_CLAIMS_H_
#define LLAMAFLEET_STORAGE_DIR_CLAIMS_H_

// Claims on the directories jobs name for their output (checkpoint.dir,
// output.export_dir): where they are recorded, which still stand, what clashes with a new
// job's directory, and an admin's release.
//
// A job's claim is recorded with it (jobs.checkpoint_dir, jobs.export_dir) and, once its
// record is deleted, in deleted_job_dirs (storage/deleted_job_dirs.h). A claim stands
// while its job has not ended, and afterwards only if the job wrote there: a checkpoint
// recorded from its checkpoint.dir, an export in its output.export_dir (the job
// SUCCEEDED). A deleted job's claim is recorded only if it had written there.
//
// Whether a standing claim that has not been written keeps other users out depends on
// who owns the directory on the storage; the store does not look, the coordinator does
// (server/claim_judge.h) and names the claims it found not to count in
// SubmitJobInput::pending_claims.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/job_writes.h"

namespace llamafleet {

class JobStore;

struct DirClaim {
  int64_t job_id = 0;
  std::string owner;     // the job's owner (API user)
  std::string field;     // "checkpoint.dir" or "output.export_dir"
  std::string dir;       // normalized
  bool deleted = false;  // the job's record was deleted
  bool wrote = false;    // the job wrote there (always, for a deleted job's)

  // "the checkpoint directory of job 7", "the export directory of deleted job 5".
  std::string Describe() const;
};

// The standing claims that clash with `dir` (normalized), the directory `owner`'s new job
// names for output: a claim on `dir`, on a directory above it or below it. A deleted
// job's claim clashes only for other owners (its owner may take the directory again).
// Claims in `pending` (SubmitJobInput::pending_claims) are left out. At most `limit`.
absl::StatusOr<std::vector<DirClaim>> ClashingClaims(Txn& txn, const std::string& dir,
                                                     const std::string& owner,
                                                     const std::vector<PendingClaim>& pending,
                                                     int limit);

// FAILED_PRECONDITION naming the field (`prefix` + `field`), `dir` and the job when a
// claim of ClashingClaims clashes with it; OK otherwise.
absl::Status CheckJobDirFree(Txn& txn, const std::string& prefix, absl::string_view field,
                             const std::string& dir, const std::string& owner,
                             const std::vector<PendingClaim>& pending);

// For each input, whether its owner already used its idempotency key: the submission then
// returns that job and stores nothing for it, so nothing of it needs checking again.
absl::StatusOr<std::vector<bool>> KnownSubmissions(JobStore& store,
                                                   const std::vector<SubmitJobInput>& inputs);

// What SubmitJobsTxn refuses about the inputs' own directories, refused the same way (a
// dry run's answer, and the check before a submission is queued): a standing claim that
// clashes (CheckJobDirFree), or another input of the batch naming, inside or above one of
// them. FAILED_PRECONDITION naming the field. Inputs that are `known` (KnownSubmissions;
// empty: none) are left out.
absl::Status CheckJobDirsFree(JobStore& store, const std::vector<SubmitJobInput>& inputs,
                              const std::vector<bool>& known = {});

// The standing claims on checkpoint directories that are `path` (normalized) or one of its
// ancestors: whose checkpoints a read of `path` reads.
absl::StatusOr<std::vector<DirClaim>> CheckpointClaimsOver(JobStore& store,
                                                           const std::string& path);

// Removes every claim on exactly `dir` (normalized): a job's record of it
// (checkpoint_dir, export_dir set to NULL, with a "dir_released" event naming `actor`, the
// job's state unchanged) and a deleted job's. Fills *released with what was removed;
// NOT_FOUND naming `dir` when nothing claims it.
TxnFunction ReleaseDirClaimsTxn(std::string dir, std::string actor,
                                std::shared_ptr<std::vector<DirClaim>> released);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_DIR_CLAIMS_H_
