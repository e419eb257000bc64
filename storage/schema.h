#ifndef LLAMAFLEET_STORAGE_SCHEMA_H_
#define LLAMAFLEET_STORAGE_SCHEMA_H_

// The coordinator database's schema: its tables and indexes, built by migrations applied
// in order (PRAGMA user_version = the number applied), and the file's permissions.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/sqlite.h"

namespace llamafleet {

// The newest schema version this build knows.
int CurrentSchemaVersion();

// The database holds token hashes, every job's spec and its events: only the coordinator's
// user may read it. Creates the file with mode 0600 (SQLite gives the -wal and -shm files
// the database file's mode) and narrows an existing one, its -wal and -shm included.
absl::Status RestrictDatabaseFiles(const std::string& path);

// The schema version of `conn`'s database; FAILED_PRECONDITION (naming `path`) when it is
// newer than this build knows.
absl::StatusOr<int> SchemaVersion(sqlite::Connection& conn, const std::string& path);

// Migrates `conn`'s database from `version` to CurrentSchemaVersion(), one transaction per
// migration, then checks foreign keys (DATA_LOSS for rows left without their parent) and
// turns them on. Errors name `path` and the migration that failed; a failed migration
// leaves the database at the version before it.
absl::Status MigrateSchema(sqlite::Connection& conn, const std::string& path, int version);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_SCHEMA_H_
