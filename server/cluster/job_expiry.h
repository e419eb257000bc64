#ifndef LLAMAFLEET_SERVER_CLUSTER_JOB_EXPIRY_H_
#define LLAMAFLEET_SERVER_CLUSTER_JOB_EXPIRY_H_

// Finished jobs whose spec's ttl_after_finished has passed: the cluster loop deletes
// their records (and what they left, ClusterOptions::on_job_deleted). The store is swept
// at most once per interval. Used only on the cluster loop's strand (not thread-safe).

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "storage/job_store.h"

namespace llamafleet {

class JobExpiry {
 public:
  explicit JobExpiry(absl::Duration interval = absl::Seconds(30)) : interval_(interval) {}

  // The jobs expired at `now`, when a sweep is due (more than `interval` after the last
  // one); otherwise, or when the store cannot be read, none.
  std::vector<int64_t> Due(JobStore& store, absl::Time now);

 private:
  const absl::Duration interval_;
  absl::Time last_sweep_ = absl::InfinitePast();
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_JOB_EXPIRY_H_
