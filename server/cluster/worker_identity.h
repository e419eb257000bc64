#ifndef LLAMAFLEET_SERVER_CLUSTER_WORKER_IDENTITY_H_
#define LLAMAFLEET_SERVER_CLUSTER_WORKER_IDENTITY_H_

// Worker identities: the join token lets a machine join once; from then on its name is
// bound to a per-worker credential the coordinator issued on that first join. A hello
// under a known name without the right credential is refused before it can touch the
// existing session. Only the credential's SHA-256 is stored (storage/worker_credential_store.h);
// an admin releases a name with `llamafleet-coordinator worker forget NAME --data-dir DIR`.

#include <string>

#include "absl/status/statusor.h"
#include "storage/job_store.h"

namespace llamafleet {

class WorkerIdentity {
 public:
  // `store` is not owned and must outlive this object.
  explicit WorkerIdentity(JobStore* store) : store_(store) {}

  // For a hello whose join token was already accepted: a known `name` must present its
  // credential (returns ""); a new name gets a fresh credential, recorded before it is
  // returned (the caller hands it to the worker in Welcome). UNAUTHENTICATED naming the
  // fix for a missing or wrong credential; UNAVAILABLE if the database cannot answer.
  // Blocks for one read (and one commit on a first join); any thread.
  absl::StatusOr<std::string> Admit(const std::string& name, const std::string& credential);

 private:
  JobStore* const store_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_WORKER_IDENTITY_H_
