#ifndef LLAMAFLEET_SERVER_CLUSTER_WORKER_IDENTITY_H_
#define LLAMAFLEET_SERVER_CLUSTER_WORKER_IDENTITY_H_

// Worker identities: the join token lets a machine join once; from then on its name is
// bound to a per-worker credential the coordinator issued on that first join. A hello
// under a known name without the right credential is refused before it can touch the
// existing session. Only the credential's SHA-256 is stored (storage/worker_credential_store.h);
// an admin releases a name with `llamafleet-coordinator worker forget NAME --data-dir DIR`.
// One join token mints at most max_identities names (--max-worker-identities), so a leaked
// token cannot fill the table with permanent names; forgetting a name frees its place.

#include <string>

#include "absl/status/statusor.h"
#include "storage/job_store.h"

namespace llamafleet {

class WorkerIdentity {
 public:
  static constexpr int64_t kDefaultMaxIdentities = 1024;

  // `store` is not owned and must outlive this object. `join_token`: the token hellos are
  // admitted with; `max_identities` <= 0: no cap.
  WorkerIdentity(JobStore* store, const std::string& join_token, int64_t max_identities = kDefaultMaxIdentities);

  // For a hello whose join token was already accepted: a known `name` must present its
  // credential (returns ""); a new name gets a fresh credential, recorded before it is
  // returned (the caller hands it to the worker in Welcome). UNAUTHENTICATED naming the
  // fix for a missing or wrong credential; RESOURCE_EXHAUSTED naming the cap and the fix
  // when the join token has minted max_identities names; UNAVAILABLE if the database
  // cannot answer.
  // Blocks for one read (and one commit on a first join); any thread.
  absl::StatusOr<std::string> Admit(const std::string& name, const std::string& credential);

 private:
  JobStore* const store_;
  const std::string join_token_sha256_;
  const int64_t max_identities_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_WORKER_IDENTITY_H_
