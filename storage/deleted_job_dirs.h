#ifndef LLAMAFLEET_STORAGE_DELETED_JOB_DIRS_H_
#define LLAMAFLEET_STORAGE_DELETED_JOB_DIRS_H_

// Table deleted_job_dirs: the named checkpoint.dir of every job whose record was deleted
// (ttl_after_finished, DeleteJob) after it had written there (a checkpoint was recorded),
// with the job's id and owner. A named dir is the user's own and is not removed with the
// record, so its checkpoints outlive the job: the claim stands (storage/dir_claims.h), and
// only jobs of that owner may name it, or anything inside or above it, again, or read from
// it. A job that never wrote there leaves no record: its claim ended with it. Rows stay
// until an admin releases them (`llamafleet release-dir`).

#include <cstdint>

#include "absl/status/status.h"
#include "storage/job_store.h"

namespace llamafleet {

// Within the transaction that deletes job `job_id`'s row, before the DELETE: records its
// checkpoint.dir, if it named one and a checkpoint of it is recorded (a dir recorded
// before for another deleted job passes to this one).
absl::Status RecordDeletedJobDirs(Txn& txn, int64_t job_id);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_DELETED_JOB_DIRS_H_
