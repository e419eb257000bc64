#ifndef LLAMAFLEET_STORAGE_TXN_HELPERS_H_
#define LLAMAFLEET_STORAGE_TXN_HELPERS_H_

// Small statement helpers the storage files share (not part of the storage API).

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "llamafleet/v1/job.pb.h"
#include "storage/job_writes.h"
#include "storage/sqlite.h"

namespace llamafleet::storage_internal {

// Runs `sql` inside the transaction with `bind` applied, to completion.
template <typename BindFn>
absl::Status Exec(Txn& txn, const std::string& sql, BindFn bind) {
  absl::StatusOr<sqlite::Statement*> s = txn.Statement(sql);
  if (!s.ok()) return s.status();
  bind(**s);
  return (*s)->Run();
}

// The job as stored; NOT_FOUND "job N not found" without it.
inline absl::StatusOr<v1::Job> RequireJob(Txn& txn, int64_t job_id) {
  absl::StatusOr<std::optional<v1::Job>> job = txn.LoadJob(job_id);
  if (!job.ok()) return job.status();
  if (!job->has_value()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  return std::move(**job);
}

// Steps the bound statement `s` to completion, calling `row` for each result row (a non-OK
// status from it stops there and is returned).
template <typename RowFn>
absl::Status EachRow(sqlite::Statement& s, RowFn row) {
  while (true) {
    absl::StatusOr<bool> has = s.Step();
    if (!has.ok()) return has.status();
    if (!*has) return absl::OkStatus();
    LF_RETURN_IF_ERROR(row(s));
  }
}

// Runs a read `sql` with `bind` applied, calling `row` for each result row (EachRow).
template <typename RowFn>
absl::Status Query(sqlite::Connection& conn, const std::string& sql,
                   const std::function<void(sqlite::Statement&)>& bind, RowFn row) {
  absl::StatusOr<sqlite::Statement> s = conn.Prepare(sql);
  if (!s.ok()) return s.status();
  bind(*s);
  return EachRow(*s, row);
}

}  // namespace llamafleet::storage_internal

#endif  // LLAMAFLEET_STORAGE_TXN_HELPERS_H_
