#ifndef LLAMAFLEET_STORAGE_WORKER_CREDENTIAL_STORE_H_
#define LLAMAFLEET_STORAGE_WORKER_CREDENTIAL_STORE_H_

// Table worker_credentials: one row per worker name that has joined, holding the SHA-256
// of the credential issued to it and of the join token it joined with
// (server/cluster/worker_identity.h). Any thread; reads go through
// the read pool, writes through the writer (committed before they return).

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "storage/job_store.h"

namespace llamafleet {

// The credential hash recorded for `name` (nullopt: the name is free).
absl::StatusOr<std::optional<std::string>> LookupWorkerCredential(JobStore* store,
                                                                  const std::string& name);
// Records `sha256` for a free `name`, minted by the join token whose SHA-256 is
// `join_token_sha256`. ALREADY_EXISTS if the name is taken; RESOURCE_EXHAUSTED if that
// token has minted `max_per_token` names already (those from before schema 11, whose
// token is not recorded, count against every token); nothing changes then. 0: no cap.
absl::Status InsertWorkerCredential(JobStore* store, const std::string& name, const std::string& sha256,
                                    const std::string& join_token_sha256, int64_t max_per_token);
// The names `join_token_sha256` has minted (with those from before schema 11).
absl::StatusOr<int64_t> CountWorkerCredentials(JobStore* store, const std::string& join_token_sha256);
// Releases `name`: the next worker to join under it gets a new credential. NOT_FOUND if
// the name holds none.
absl::Status ForgetWorkerCredential(JobStore* store, const std::string& name);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_WORKER_CREDENTIAL_STORE_H_
