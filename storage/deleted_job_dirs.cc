#include "storage/deleted_job_dirs.h"

#include "storage/txn_helpers.h"

namespace llamafleet {

absl::Status RecordDeletedJobDirs(Txn& txn, int64_t job_id) {
  return storage_internal::Exec(
      txn,
      "INSERT OR REPLACE INTO deleted_job_dirs (dir, job_id, owner, deleted_us) "
      "SELECT checkpoint_dir, id, owner, ?2 FROM jobs WHERE id = ?1 AND checkpoint_dir IS NOT NULL "
      "AND EXISTS (SELECT 1 FROM checkpoints WHERE job_id = ?1)",
      [&](sqlite::Statement& st) { st.Bind(1, job_id).Bind(2, txn.NowMicros()); });
}

}  // namespace llamafleet
