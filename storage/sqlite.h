#ifndef LLAMAFLEET_STORAGE_SQLITE_H_
#define LLAMAFLEET_STORAGE_SQLITE_H_

// Thin RAII wrappers over the SQLite C API. SQLite result codes become absl::Status here,
// once: SQLITE_FULL is RESOURCE_EXHAUSTED, SQLITE_BUSY is UNAVAILABLE, constraint
// violations are ALREADY_EXISTS/FAILED_PRECONDITION, everything else INTERNAL.
//
// A status made here may reach a client as it is, so its message never carries SQL text
// or SQLite's own message (which quotes the statement, its tables and columns): it says
// what failed in SQLite's generic words for the code ("SQL logic error", "database or
// disk is full") and a number, and the log line with that number (warning level) has the
// statement and SQLite's message.

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace llamafleet::sqlite {

// Converts a SQLite result code to a Status whose message is `what` (no SQL text in it),
// the code's generic description and the number of a log line that also has the
// connection's message and `sql`.
absl::Status ToStatus(int rc, sqlite3* db, absl::string_view what, absl::string_view sql = {});

// One prepared statement. Reset() before reuse; bind indexes are 1-based.
class Statement {
 public:
  Statement() = default;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  Statement& operator=(Statement&& other) noexcept;
  ~Statement();

  static absl::StatusOr<Statement> Prepare(sqlite3* db, absl::string_view sql);

  Statement& Bind(int i, int64_t v);
  Statement& Bind(int i, absl::string_view v);
  Statement& BindBlob(int i, absl::string_view v);
  Statement& BindNull(int i);
  Statement& BindDouble(int i, double v);

  // Steps once: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Steps to completion, ignoring rows.
  absl::Status Run();
  void Reset();

  int64_t ColumnInt(int i) const { return sqlite3_column_int64(stmt_, i); }
  std::string ColumnText(int i) const;
  double ColumnDouble(int i) const { return sqlite3_column_double(stmt_, i); }
  bool ColumnIsNull(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

// Owns a connection.
class Connection {
 public:
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Opens (creating if `create`) the database at `path`, sets busy timeout and
  // foreign keys. Errors name the path.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path, bool create,
                                                         bool read_only);

  absl::Status Exec(absl::string_view sql);
  absl::StatusOr<Statement> Prepare(absl::string_view sql) {
    return Statement::Prepare(db_, sql);
  }
  // The statement for `sql`, prepared once per connection and kept: later calls hand back
  // the same statement, reset and unbound. For statements run on every request (parsing
  // the SQL again costs more than running a point lookup). The statement stays owned by
  // the connection; reset it when done so it does not hold a read snapshot open.
  absl::StatusOr<Statement*> Cached(const std::string& sql);
  // Runs a query whose result is one integer (e.g. a PRAGMA).
  absl::StatusOr<int64_t> QueryInt(absl::string_view sql);
  sqlite3* raw() const { return db_; }
  bool InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }

 private:
  explicit Connection(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  std::unordered_map<std::string, Statement> cached_;
};

}  // namespace llamafleet::sqlite

#endif  // LLAMAFLEET_STORAGE_SQLITE_H_
