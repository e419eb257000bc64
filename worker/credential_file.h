#ifndef LLAMAFLEET_WORKER_CREDENTIAL_FILE_H_
#define LLAMAFLEET_WORKER_CREDENTIAL_FILE_H_

// The worker's credential file in its data dir (DATA_DIR/worker-credential, mode 0600): the
// name it was issued for, then the credential (server/cluster/worker_identity.h), one per
// line. The credential proves the name, not the process: a copy of this file lets a second
// process present it, which the coordinator refuses while the name's session lives
// (server/cluster/worker_sessions.h).

#include <string>

#include "absl/status/status.h"

namespace llamafleet::worker {

std::string CredentialPath(const std::string& data_dir);

// The credential saved for `name` ("" when none, or saved for another name).
std::string LoadCredential(const std::string& data_dir, const std::string& name);

// Written whole under a temporary name, synced, then renamed: a crash leaves the old file
// or the new one. FAILED_PRECONDITION naming the file when it cannot be written.
absl::Status SaveCredential(const std::string& data_dir, const std::string& name,
                            const std::string& credential);

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_CREDENTIAL_FILE_H_
