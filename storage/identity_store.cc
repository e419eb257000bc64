#include "storage/identity_store.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "llamafleet/v1/job.pb.h"
#include "storage/sqlite.h"

namespace llamafleet {

absl::StatusOr<std::map<std::string, uint32_t>> ListDynamicUids(JobStore* store) {
  std::map<std::string, uint32_t> out;
  LF_RETURN_IF_ERROR(store->Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(sqlite::Statement q, conn.Prepare("SELECT user, uid FROM user_identities"));
    while (true) {
      LF_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return absl::OkStatus();
      out[q.ColumnText(0)] = static_cast<uint32_t>(q.ColumnInt(1));
    }
  }));
  return out;
}

TxnFunction AllocateDynamicUidTxn(std::string user, uint32_t first, uint32_t last,
                                  std::function<bool(uint32_t)> unavailable, std::shared_ptr<uint32_t> uid) {
  return [user = std::move(user), first, last, unavailable = std::move(unavailable),
          uid = std::move(uid)](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(auto* mine,
                        txn.Statement("SELECT uid FROM user_identities WHERE user = ?1"));
    mine->Bind(1, user);
    LF_ASSIGN_OR_RETURN(bool row, mine->Step());
    if (row) {
      *uid = static_cast<uint32_t>(mine->ColumnInt(0));
      return absl::OkStatus();
    }
    LF_ASSIGN_OR_RETURN(
        auto* held, txn.Statement("SELECT uid FROM user_identities WHERE uid BETWEEN ?1 AND ?2"));
    held->Bind(1, static_cast<int64_t>(first)).Bind(2, static_cast<int64_t>(last));
    std::set<uint32_t> taken;
    while (true) {
      LF_ASSIGN_OR_RETURN(bool next, held->Step());
      if (!next) break;
      taken.insert(static_cast<uint32_t>(held->ColumnInt(0)));
    }
    for (uint64_t candidate = first; candidate <= last; ++candidate) {
      const uint32_t u = static_cast<uint32_t>(candidate);
      if (taken.count(u) || (unavailable && unavailable(u))) continue;
      LF_ASSIGN_OR_RETURN(
          auto* insert,
          txn.Statement(
              "INSERT INTO user_identities (user, uid, create_time_us) VALUES (?1, ?2, ?3)"));
      insert->Bind(1, user).Bind(2, static_cast<int64_t>(u)).Bind(3, txn.NowMicros());
      LF_RETURN_IF_ERROR(insert->Run());
      *uid = u;
      return absl::OkStatus();
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "no dynamic uid left for user ", user, ": all of ", first, "-", last, " are taken (", taken.size(),
        " users hold one, the rest are mapped users' or accounts'); widen --dynamic-uid-range "
        "(dynamic_uid_range) or map the user under users: in the coordinator's config"));
  };
}

absl::StatusOr<std::vector<std::string>> ListActiveOwners(JobStore* store) {
  std::vector<std::string> out;
  LF_RETURN_IF_ERROR(store->Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(
        sqlite::Statement q,
        conn.Prepare(
            "SELECT DISTINCT owner FROM jobs WHERE state NOT IN (?1, ?2, ?3) ORDER BY owner"));
    q.Bind(1, static_cast<int64_t>(v1::SUCCEEDED))
        .Bind(2, static_cast<int64_t>(v1::FAILED))
        .Bind(3, static_cast<int64_t>(v1::CANCELLED));
    while (true) {
      LF_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return absl::OkStatus();
      out.push_back(q.ColumnText(0));
    }
  }));
  return out;
}

}  // namespace llamafleet
