#include "storage/worker_credential_store.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"

namespace llamafleet {
namespace {

// The names a join token minted: its own rows and those from before the token was recorded.
constexpr char kCountMinted[] =
    "SELECT COUNT(*) FROM worker_credentials WHERE join_token_sha256 = ?1 OR join_token_sha256 = ''";

}  // namespace

absl::StatusOr<std::optional<std::string>> LookupWorkerCredential(JobStore* store,
                                                                  const std::string& name) {
  std::optional<std::string> hash;
  LF_RETURN_IF_ERROR(store->Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(
        sqlite::Statement q,
        conn.Prepare("SELECT credential_sha256 FROM worker_credentials WHERE name = ?1"));
    q.Bind(1, name);
    LF_ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) hash = q.ColumnText(0);
    return absl::OkStatus();
  }));
  return hash;
}

absl::Status InsertWorkerCredential(JobStore* store, const std::string& name, const std::string& sha256,
                                    const std::string& join_token_sha256, int64_t max_per_token) {
  bool inserted = false;
  int64_t minted = 0;
  LF_RETURN_IF_ERROR(store->WriteAndWait([&](Txn& txn) -> absl::Status {
    if (max_per_token > 0) {
      LF_ASSIGN_OR_RETURN(auto* count, txn.Statement(kCountMinted));
      count->Bind(1, join_token_sha256);
      LF_RETURN_IF_ERROR(count->Step().status());
      minted = count->ColumnInt(0);
      count->Reset();
      if (minted >= max_per_token) return absl::OkStatus();
    }
    LF_ASSIGN_OR_RETURN(
        auto* q,
        txn.Statement(
            "INSERT OR IGNORE INTO worker_credentials (name, credential_sha256, create_time_us, "
            "join_token_sha256) "
            "VALUES (?1, ?2, ?3, ?4)"));
    q->Bind(1, name).Bind(2, sha256).Bind(3, txn.NowMicros()).Bind(4, join_token_sha256);
    LF_RETURN_IF_ERROR(q->Run());
    inserted = txn.Changes() > 0;
    return absl::OkStatus();
  }));
  if (max_per_token > 0 && minted >= max_per_token) {
    return absl::ResourceExhaustedError(absl::StrCat("the join token has minted ", minted, " worker names"));
  }
  if (!inserted) return absl::AlreadyExistsError(absl::StrCat("worker name ", name, " is taken"));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CountWorkerCredentials(JobStore* store, const std::string& join_token_sha256) {
  int64_t n = 0;
  LF_RETURN_IF_ERROR(store->Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(sqlite::Statement q, conn.Prepare(kCountMinted));
    q.Bind(1, join_token_sha256);
    LF_RETURN_IF_ERROR(q.Step().status());
    n = q.ColumnInt(0);
    return absl::OkStatus();
  }));
  return n;
}

absl::Status ForgetWorkerCredential(JobStore* store, const std::string& name) {
  bool found = false;
  LF_RETURN_IF_ERROR(store->WriteAndWait([&](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(auto* q, txn.Statement("DELETE FROM worker_credentials WHERE name = ?1"));
    q->Bind(1, name);
    LF_RETURN_IF_ERROR(q->Run());
    found = txn.Changes() > 0;
    return absl::OkStatus();
  }));
  if (!found) return absl::NotFoundError(absl::StrCat("no worker named ", name, " holds a credential"));
  return absl::OkStatus();
}

}  // namespace llamafleet
