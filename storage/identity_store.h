#ifndef LLAMAFLEET_STORAGE_IDENTITY_STORE_H_
#define LLAMAFLEET_STORAGE_IDENTITY_STORE_H_

// Table user_identities: the dynamic Unix uid each API user without a configured mapping
// was given (server/user_identities.h), one per user and never reused for another user,
// so that a user's files on shared storage stay theirs across restarts, config changes
// and every worker. Any thread; reads go through the read pool, writes through the
// writer (committed before they return).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/job_store.h"

namespace llamafleet {

// Every recorded dynamic uid, by user.
absl::StatusOr<std::map<std::string, uint32_t>> ListDynamicUids(JobStore* store);

// The write (JobStore::Write, WriteAndWait) that finds the uid recorded for `user` or,
// without one, records for `user` the lowest of [first, last] that no user holds and
// `unavailable` does not refuse (a configured user's uid, an account's), and sets `*uid`.
// Transactions run one at a time, so two users never get one uid (and the column is
// UNIQUE). RESOURCE_EXHAUSTED naming the range and how many users hold a uid of it when
// none is left; nothing is recorded then.
TxnFunction AllocateDynamicUidTxn(std::string user, uint32_t first, uint32_t last,
                                  std::function<bool(uint32_t)> unavailable, std::shared_ptr<uint32_t> uid);

// The owners of jobs that are not finished (their next attempts need an identity).
absl::StatusOr<std::vector<std::string>> ListActiveOwners(JobStore* store);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_IDENTITY_STORE_H_
