#include "storage/sqlite.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace llamafleet::sqlite {

absl::Status ToStatus(int rc, sqlite3* db, absl::string_view what, absl::string_view sql) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return absl::OkStatus();
  static std::atomic<int64_t> errors{0};
  const int64_t number = ++errors;
  spdlog::warn("database error {}: {}: {}{}{}", number, std::string(what),
               db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
               sql.empty() ? "" : " in: ", std::string(sql.substr(0, 400)));
  const std::string message = absl::StrCat(what, ": ", sqlite3_errstr(rc), " (database error ",
                                           number, ", logged by the coordinator)");
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(message);
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = other.stmt_;
    other.stmt_ = nullptr;
  }
  return *this;
}

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

absl::StatusOr<Statement> Statement::Prepare(sqlite3* db, absl::string_view sql) {
  Statement s;
  s.db_ = db;
  int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &s.stmt_, nullptr);
  if (rc != SQLITE_OK) return ToStatus(rc, db, "prepare", sql);
  return s;
}

Statement& Statement::Bind(int i, int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}
Statement& Statement::Bind(int i, absl::string_view v) {
  sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Statement& Statement::BindBlob(int i, absl::string_view v) {
  sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  return *this;
}
Statement& Statement::BindDouble(int i, double v) {
  sqlite3_bind_double(stmt_, i, v);
  return *this;
}
Statement& Statement::BindNull(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return ToStatus(rc, db_, "step", sqlite3_sql(stmt_) != nullptr ? sqlite3_sql(stmt_) : "");
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) {
      Reset();
      return row.status();
    }
    if (!*row) break;
  }
  Reset();
  return absl::OkStatus();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string Statement::ColumnText(int i) const {
  const void* data = sqlite3_column_blob(stmt_, i);
  int size = sqlite3_column_bytes(stmt_, i);
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
}

Connection::~Connection() {
  cached_.clear();  // finalized before the connection closes
  sqlite3_close_v2(db_);
}

absl::StatusOr<Statement*> Connection::Cached(const std::string& sql) {
  auto it = cached_.find(sql);
  if (it == cached_.end()) {
    LF_ASSIGN_OR_RETURN(Statement st, Prepare(sql));
    it = cached_.emplace(sql, std::move(st)).first;
  } else {
    it->second.Reset();
  }
  return &it->second;
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& path, bool create,
                                                            bool read_only) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_NOMUTEX;
  flags |= read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (create && !read_only) flags |= SQLITE_OPEN_CREATE;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = ToStatus(rc, db, absl::StrCat("cannot open database ", path));
    sqlite3_close_v2(db);
    return s;
  }
  std::unique_ptr<Connection> conn(new Connection(db));
  sqlite3_busy_timeout(db, 10000);
  sqlite3_extended_result_codes(db, 1);
  LF_RETURN_IF_ERROR(conn->Exec("PRAGMA foreign_keys=ON"));
  // Touch the schema so that a file that is not a database fails here, with its path.
  if (absl::StatusOr<int64_t> v = conn->QueryInt("PRAGMA schema_version"); !v.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open database ", path, ": ", v.status().message()));
  }
  return conn;
}

absl::Status Connection::Exec(absl::string_view sql) {
  std::string copy(sql);
  const int rc = sqlite3_exec(db_, copy.c_str(), nullptr, nullptr, nullptr);
  return ToStatus(rc, db_, "exec", copy);
}

absl::StatusOr<int64_t> Connection::QueryInt(absl::string_view sql) {
  LF_ASSIGN_OR_RETURN(Statement stmt, Prepare(sql));
  LF_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    spdlog::warn("database query returned no row: {}", std::string(sql));
    return absl::InternalError("database query returned no row");
  }
  return stmt.ColumnInt(0);
}

}  // namespace llamafleet::sqlite
