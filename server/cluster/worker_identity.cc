#include "server/cluster/worker_identity.h"

#include <openssl/crypto.h>

#include "absl/strings/str_cat.h"
#include "common/random_hex.h"
#include "jobspec/jobspec.h"
#include "storage/worker_credential_store.h"

namespace llamafleet {
namespace {

constexpr char kCredentialPrefix[] = "lfw_";

absl::Status Refused(const std::string& name, bool presented) {
  return absl::UnauthenticatedError(absl::StrCat(
      "worker name '", name, "' is already registered with its own credential, and this hello ",
      presented ? "carries a different one" : "carries none",
      ": start the worker with the data dir it first joined with (it keeps "
      "DATA_DIR/worker-credential), choose another --name, or have an admin release the name "
      "on the coordinator host with: llamafleet-coordinator worker forget ",
      name, " --data-dir DIR"));
}

}  // namespace

WorkerIdentity::WorkerIdentity(JobStore* store, const std::string& join_token, int64_t max_identities)
    : store_(store), join_token_sha256_(Sha256Hex(join_token)), max_identities_(max_identities) {}

absl::StatusOr<std::string> WorkerIdentity::Admit(const std::string& name,
                                                  const std::string& credential) {
  absl::StatusOr<std::optional<std::string>> known = LookupWorkerCredential(store_, name);
  if (!known.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot check the worker credential: ",
                                               known.status().message()));
  }
  if (known->has_value()) {
    const std::string given = Sha256Hex(credential);
    const std::string& expected = **known;
    if (credential.empty() || given.size() != expected.size() ||
        CRYPTO_memcmp(given.data(), expected.data(), given.size()) != 0) {
      return Refused(name, !credential.empty());
    }
    return std::string();
  }
  // A new name (or one an admin released): issue its credential.
  std::optional<std::string> random = RandomHex(32);
  if (!random.has_value()) return absl::UnavailableError("no randomness available for a worker credential");
  const std::string issued = absl::StrCat(kCredentialPrefix, *random);
  absl::Status s = InsertWorkerCredential(store_, name, Sha256Hex(issued), join_token_sha256_, max_identities_);
  if (absl::IsAlreadyExists(s)) return Refused(name, !credential.empty());  // a concurrent first join won
  if (absl::IsResourceExhausted(s)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "worker name '", name, "' is new, and ", s.message(), ", the most one join token may (--max-worker-identities ",
        max_identities_, "): start the worker under a name that already joined, or have an admin release unused "
        "names on the coordinator host with: llamafleet-coordinator worker forget NAME --data-dir DIR"));
  }
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot record the worker credential: ", s.message()));
  }
  return issued;
}

}  // namespace llamafleet
