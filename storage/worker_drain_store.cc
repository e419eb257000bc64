#include "storage/worker_drain_store.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/sqlite.h"

namespace llamafleet {
namespace {

absl::Status Upsert(Txn& txn, const WorkerDrainRecord& r) {
  LF_ASSIGN_OR_RETURN(
      auto* q,
      txn.Statement(
          "INSERT INTO worker_drains (name, reason, source, since_us) VALUES (?1, ?2, ?3, ?4) "
          "ON CONFLICT(name) DO UPDATE SET reason = excluded.reason, source = excluded.source, "
          "since_us = excluded.since_us"));
  const int64_t since = r.since == absl::InfinitePast() ? txn.NowMicros() : absl::ToUnixMicros(r.since);
  q->Bind(1, r.name).Bind(2, r.reason).Bind(3, r.source).Bind(4, since);
  return q->Run();
}

}  // namespace

absl::StatusOr<std::map<std::string, WorkerDrainRecord>> ListWorkerDrains(JobStore& store) {
  std::map<std::string, WorkerDrainRecord> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(sqlite::Statement q,
                        conn.Prepare("SELECT name, reason, source, since_us FROM worker_drains"));
    while (true) {
      LF_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return absl::OkStatus();
      WorkerDrainRecord r;
      r.name = q.ColumnText(0);
      r.reason = q.ColumnText(1);
      r.source = q.ColumnText(2);
      r.since = absl::FromUnixMicros(q.ColumnInt(3));
      out[r.name] = std::move(r);
    }
  }));
  return out;
}

TxnFunction SetWorkerDrainTxn(WorkerDrainRecord record) {
  return [record = std::move(record)](Txn& txn) { return Upsert(txn, record); };
}

TxnFunction ClearWorkerDrainTxn(std::string name, std::string source) {
  return [name = std::move(name), source = std::move(source)](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(
        auto* q,
        txn.Statement("DELETE FROM worker_drains WHERE name = ?1 AND (?2 = '' OR source = ?2)"));
    q->Bind(1, name).Bind(2, source);
    return q->Run();
  };
}

absl::Status DrainWorker(JobStore* store, const std::string& name, const std::string& reason) {
  if (reason.empty()) return absl::InvalidArgumentError("--reason must say why the worker is drained");
  bool known = false;
  LF_RETURN_IF_ERROR(store->WriteAndWait([&](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(auto* q, txn.Statement("SELECT 1 FROM workers WHERE name = ?1"));
    q->Bind(1, name);
    LF_ASSIGN_OR_RETURN(bool row, q->Step());
    known = row;
    q->Reset();
    if (!known) return absl::OkStatus();
    return Upsert(txn, {name, reason, "operator", absl::InfinitePast()});
  }));
  if (!known) return absl::NotFoundError(absl::StrCat("no worker named ", name, " has registered"));
  return absl::OkStatus();
}

absl::Status UndrainWorker(JobStore* store, const std::string& name) {
  bool found = false;
  LF_RETURN_IF_ERROR(store->WriteAndWait([&](Txn& txn) -> absl::Status {
    LF_RETURN_IF_ERROR(ClearWorkerDrainTxn(name, "")(txn));
    found = txn.Changes() > 0;
    return absl::OkStatus();
  }));
  if (!found) return absl::NotFoundError(absl::StrCat("worker ", name, " is not drained"));
  return absl::OkStatus();
}

}  // namespace llamafleet
