#ifndef LLAMAFLEET_STORAGE_DELETED_JOB_DIRS_H_
#define LLAMAFLEET_STORAGE_DELETED_JOB_DIRS_H_

// Table deleted_job_dirs: the named checkpoint.dir of every job whose record was deleted
// (ttl_after_finished, DeleteJob), with the job's id and owner. A named dir is the user's
// own and is not removed with the record, so its checkpoints outlive the job: the same
// checks that keep a live job's dir (storage/job_writes.h, the dir-free check at submit
// and in dry-run) and its checkpoints (CheckpointDirOwners, the reads check) keep it its
// owner's, and only jobs of that owner may name it, or anything inside or above it, again.
// Rows stay until an operator deletes them.

#include <cstdint>

#include "absl/status/status.h"
#include "storage/job_store.h"

namespace llamafleet {

// Within the transaction that deletes job `job_id`'s row, before the DELETE: records its
// checkpoint.dir, if it named one (a dir recorded before for another deleted job passes
// to this one).
absl::Status RecordDeletedJobDirs(Txn& txn, int64_t job_id);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_DELETED_JOB_DIRS_H_
