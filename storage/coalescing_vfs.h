// An SQLite VFS that writes a transaction's WAL frames with one pwrite.
//
// SQLite appends a commit's frames to the WAL as two writes each, a 24-byte header and
// the page, before it syncs the WAL. On the VMs this runs on a pwrite costs ~4 us of
// system time whatever its size: 24 frames written as 48 pwrites took 190-200 us, the
// same bytes as one pwrite 11-13 us (issue 13). This VFS wraps the default one and, for
// WAL files only, gathers contiguous writes in memory, writing them out as one pwrite
// (per 128 KiB - 1: the most the unix VFS writes in one call) before anything that could
// observe the file:
//   - xSync (so what a sync makes durable is exactly what SQLite wrote before it),
//   - xRead, xTruncate, xFileSize, xFileControl, xFetch and xClose on the WAL,
//   - a write that does not continue or overwrite the gathered range, or 1 MiB gathered,
//   - xShmBarrier on the database file, which SQLite calls while publishing a new WAL
//     index header: other connections find frames through that header, and read them
//     from the file with descriptors of their own.
// With synchronous=FULL every commit syncs the WAL before it publishes the header, so
// the barrier finds nothing left; it is the guard for any other path. A write that fails
// when the range is written out fails the xSync (or read, truncate...) that wrote it
// out, so the commit fails as if the write had; if writing out in xShmBarrier fails, the
// process aborts rather than publish frames that are not in the file.
// Database, journal and other files pass straight through.
#ifndef LLAMAFLEET_STORAGE_COALESCING_VFS_H_
#define LLAMAFLEET_STORAGE_COALESCING_VFS_H_

namespace llamafleet::sqlite {

// Registers the VFS (once; not as the default) and returns its name, for
// sqlite3_open_v2. Null if it could not be registered.
const char* CoalescingVfsName();

// Writes to WAL files through this VFS so far: calls to xWrite, and pwrites that wrote
// them out. For tests and benchmarks.
struct CoalescingVfsStats {
  long long wal_writes = 0;
  long long wal_pwrites = 0;
};
CoalescingVfsStats GetCoalescingVfsStats();

}  // namespace llamafleet::sqlite

#endif  // LLAMAFLEET_STORAGE_COALESCING_VFS_H_
