#include "server/cluster/job_expiry.h"

#include "storage/cluster_store.h"

namespace llamafleet {

std::vector<int64_t> JobExpiry::Due(JobStore& store, absl::Time now) {
  if (now - last_sweep_ <= interval_) return {};
  last_sweep_ = now;
  absl::StatusOr<std::vector<int64_t>> expired = ExpiredJobs(store, now);
  if (!expired.ok()) return {};
  return *std::move(expired);
}

}  // namespace llamafleet
