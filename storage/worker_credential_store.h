#ifndef LLAMAFLEET_STORAGE_WORKER_CREDENTIAL_STORE_H_
#define LLAMAFLEET_STORAGE_WORKER_CREDENTIAL_STORE_H_

// Table worker_credentials: one row per worker name that has joined, holding the SHA-256
// of the credential issued to it (server/cluster/worker_identity.h). Any thread; reads go through
// the read pool, writes through the writer (committed before they return).

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "storage/job_store.h"

namespace llamafleet {

// The credential hash recorded for `name` (nullopt: the name is free).
absl::StatusOr<std::optional<std::string>> LookupWorkerCredential(JobStore* store,
                                                                  const std::string& name);
// Records `sha256` for a free `name`. ALREADY_EXISTS if the name is taken (nothing changes).
absl::Status InsertWorkerCredential(JobStore* store, const std::string& name,
                                    const std::string& sha256);
// Releases `name`: the next worker to join under it gets a new credential. NOT_FOUND if
// the name holds none.
absl::Status ForgetWorkerCredential(JobStore* store, const std::string& name);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_WORKER_CREDENTIAL_STORE_H_
