#include "storage/coalescing_vfs.h"

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

namespace llamafleet::sqlite {
namespace {

constexpr char kName[] = "llamafleet-coalesce";
// Gathered bytes written out at once past this (a transaction of ~250 frames).
constexpr size_t kMaxGathered = size_t{1} << 20;
// The most one call to the unix VFS's xWrite writes: it masks the length with 0x1ffff
// (seekAndWriteFd), so a longer write would be cut and reported as SQLITE_FULL.
// SQLite's own writes are a page at most; ours are split to fit.
constexpr size_t kMaxWrite = 0x1ffff;

std::atomic<long long> g_wal_writes{0};
std::atomic<long long> g_wal_pwrites{0};

sqlite3_vfs* g_real = nullptr;  // the VFS this one wraps (the default at registration)
sqlite3_vfs g_vfs;

// What SQLite allocates szOsFile bytes for: our state, then the wrapped file.
struct File {
  sqlite3_file base;  // base.pMethods: kMethods, or null when the open failed
  sqlite3_file* real;
  bool wal;
  File* wal_file;  // a database file: its WAL, while open (flushed at xShmBarrier)
  File* database;  // a WAL file: its database file, to unlink itself at close
  std::string gathered;
  sqlite3_int64 gathered_at;
};

// The wrapped file starts right after ours: keep it aligned for its int64s and pointers.
static_assert(sizeof(File) % 8 == 0, "the wrapped file would be misaligned");

File* AsFile(sqlite3_file* f) { return reinterpret_cast<File*>(f); }
const sqlite3_io_methods* Real(File* f) { return f->real->pMethods; }

// Writes the gathered range out: one pwrite per kMaxWrite bytes (the unix VFS retries
// short writes).
int Flush(File* f) {
  int rc = SQLITE_OK;
  for (size_t at = 0; at < f->gathered.size() && rc == SQLITE_OK; at += kMaxWrite) {
    const size_t n = std::min(kMaxWrite, f->gathered.size() - at);
    g_wal_pwrites.fetch_add(1, std::memory_order_relaxed);
    rc = Real(f)->xWrite(f->real, f->gathered.data() + at, static_cast<int>(n),
                         f->gathered_at + static_cast<sqlite3_int64>(at));
  }
  f->gathered.clear();  // on failure too: the caller fails, and SQLite abandons what it wrote
  return rc;
}

int Close(sqlite3_file* pf) {
  File* f = AsFile(pf);
  int rc = f->wal ? Flush(f) : SQLITE_OK;
  const int close_rc = Real(f)->xClose(f->real);
  if (rc == SQLITE_OK) rc = close_rc;
  if (f->database != nullptr && f->database->wal_file == f) f->database->wal_file = nullptr;
  if (f->wal_file != nullptr && f->wal_file->database == f) f->wal_file->database = nullptr;
  std::destroy_at(&f->gathered);
  return rc;
}

int Read(sqlite3_file* pf, void* out, int amount, sqlite3_int64 offset) {
  File* f = AsFile(pf);
  if (int rc = Flush(f); rc != SQLITE_OK) return SQLITE_IOERR_READ;
  return Real(f)->xRead(f->real, out, amount, offset);
}

int Write(sqlite3_file* pf, const void* data, int amount, sqlite3_int64 offset) {
  File* f = AsFile(pf);
  if (!f->wal) return Real(f)->xWrite(f->real, data, amount, offset);
  g_wal_writes.fetch_add(1, std::memory_order_relaxed);
  const sqlite3_int64 end = f->gathered_at + static_cast<sqlite3_int64>(f->gathered.size());
  if (f->gathered.empty() || offset < f->gathered_at || offset > end) {
    // Not a continuation of (or a write into) the gathered range: that goes out first.
    if (int rc = Flush(f); rc != SQLITE_OK) return rc;
    f->gathered_at = offset;
  }
  const size_t at = static_cast<size_t>(offset - f->gathered_at);
  if (at + amount > f->gathered.size()) f->gathered.resize(at + amount);
  std::memcpy(&f->gathered[at], data, amount);
  return f->gathered.size() >= kMaxGathered ? Flush(f) : SQLITE_OK;
}

int Truncate(sqlite3_file* pf, sqlite3_int64 size) {
  File* f = AsFile(pf);
  if (int rc = Flush(f); rc != SQLITE_OK) return rc;
  return Real(f)->xTruncate(f->real, size);
}

int Sync(sqlite3_file* pf, int flags) {
  File* f = AsFile(pf);
  if (int rc = Flush(f); rc != SQLITE_OK) return rc;
  return Real(f)->xSync(f->real, flags);
}

int FileSize(sqlite3_file* pf, sqlite3_int64* size) {
  File* f = AsFile(pf);
  if (int rc = Flush(f); rc != SQLITE_OK) return rc;
  return Real(f)->xFileSize(f->real, size);
}

int Lock(sqlite3_file* pf, int level) { return Real(AsFile(pf))->xLock(AsFile(pf)->real, level); }
int Unlock(sqlite3_file* pf, int level) { return Real(AsFile(pf))->xUnlock(AsFile(pf)->real, level); }
int CheckReservedLock(sqlite3_file* pf, int* out) {
  return Real(AsFile(pf))->xCheckReservedLock(AsFile(pf)->real, out);
}

int FileControl(sqlite3_file* pf, int op, void* arg) {
  File* f = AsFile(pf);
  if (f->wal) {
    if (int rc = Flush(f); rc != SQLITE_OK) return rc;
  }
  return Real(f)->xFileControl(f->real, op, arg);
}

int SectorSize(sqlite3_file* pf) { return Real(AsFile(pf))->xSectorSize(AsFile(pf)->real); }
int DeviceCharacteristics(sqlite3_file* pf) {
  return Real(AsFile(pf))->xDeviceCharacteristics(AsFile(pf)->real);
}

int ShmMap(sqlite3_file* pf, int page, int page_size, int extend, void volatile** out) {
  return Real(AsFile(pf))->xShmMap(AsFile(pf)->real, page, page_size, extend, out);
}
int ShmLock(sqlite3_file* pf, int offset, int n, int flags) {
  return Real(AsFile(pf))->xShmLock(AsFile(pf)->real, offset, n, flags);
}
void ShmBarrier(sqlite3_file* pf) {
  File* f = AsFile(pf);
  if (f->wal_file != nullptr && Flush(f->wal_file) != SQLITE_OK) {
    // The WAL index is about to name frames that are not in the file; readers would take
    // whatever the file holds there for pages. Stop here: recovery at the next start
    // reads the WAL as it is on disk.
    std::fprintf(stderr, "llamafleet: cannot write WAL frames before publishing them; aborting\n");
    std::abort();
  }
  Real(f)->xShmBarrier(f->real);
}
int ShmUnmap(sqlite3_file* pf, int delete_flag) {
  return Real(AsFile(pf))->xShmUnmap(AsFile(pf)->real, delete_flag);
}

int Fetch(sqlite3_file* pf, sqlite3_int64 offset, int amount, void** out) {
  File* f = AsFile(pf);
  if (int rc = Flush(f); rc != SQLITE_OK) return rc;
  return Real(f)->xFetch(f->real, offset, amount, out);
}
int Unfetch(sqlite3_file* pf, sqlite3_int64 offset, void* p) {
  return Real(AsFile(pf))->xUnfetch(AsFile(pf)->real, offset, p);
}

// One table per method version the wrapped file offers (SQLite checks iVersion before
// calling the later methods).
sqlite3_io_methods MethodsOfVersion(int version) {
  sqlite3_io_methods m{};
  m.iVersion = version;
  m.xClose = Close;
  m.xRead = Read;
  m.xWrite = Write;
  m.xTruncate = Truncate;
  m.xSync = Sync;
  m.xFileSize = FileSize;
  m.xLock = Lock;
  m.xUnlock = Unlock;
  m.xCheckReservedLock = CheckReservedLock;
  m.xFileControl = FileControl;
  m.xSectorSize = SectorSize;
  m.xDeviceCharacteristics = DeviceCharacteristics;
  if (version >= 2) {
    m.xShmMap = ShmMap;
    m.xShmLock = ShmLock;
    m.xShmBarrier = ShmBarrier;
    m.xShmUnmap = ShmUnmap;
  }
  if (version >= 3) {
    m.xFetch = Fetch;
    m.xUnfetch = Unfetch;
  }
  return m;
}
const sqlite3_io_methods kMethods[3] = {MethodsOfVersion(1), MethodsOfVersion(2),
                                        MethodsOfVersion(3)};

int Open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* pf, int flags, int* out_flags) {
  File* f = AsFile(pf);
  f->base.pMethods = nullptr;
  f->real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(pf) + sizeof(File));
  f->real->pMethods = nullptr;
  const int rc = g_real->xOpen(g_real, name, f->real, flags, out_flags);
  if (rc != SQLITE_OK || f->real->pMethods == nullptr) {
    // The wrapped file closes itself when its open fails after setting pMethods.
    if (f->real->pMethods != nullptr) f->real->pMethods->xClose(f->real);
    return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
  }
  new (&f->gathered) std::string();
  f->wal = (flags & SQLITE_OPEN_WAL) != 0;
  f->wal_file = nullptr;
  f->database = nullptr;
  f->gathered_at = 0;
  if (f->wal && name != nullptr) {
    // The database file the pager opened this WAL for: through this VFS too, as the pager
    // opens both with the connection's VFS.
    sqlite3_file* db = sqlite3_database_file_object(name);
    if (db != nullptr && db->pMethods != nullptr && db->pMethods->xClose == Close) {
      f->database = AsFile(db);
      f->database->wal_file = f;
    }
  }
  const int version = std::clamp(f->real->pMethods->iVersion, 1, 3);
  f->base.pMethods = &kMethods[version - 1];
  return SQLITE_OK;
}

// Everything else is the wrapped VFS's.
int Delete(sqlite3_vfs*, const char* name, int sync_dir) { return g_real->xDelete(g_real, name, sync_dir); }
int Access(sqlite3_vfs*, const char* name, int flags, int* out) {
  return g_real->xAccess(g_real, name, flags, out);
}
int FullPathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return g_real->xFullPathname(g_real, name, n, out);
}
void* DlOpen(sqlite3_vfs*, const char* name) { return g_real->xDlOpen(g_real, name); }
void DlError(sqlite3_vfs*, int n, char* out) { g_real->xDlError(g_real, n, out); }
void (*DlSym(sqlite3_vfs*, void* handle, const char* symbol))(void) {
  return g_real->xDlSym(g_real, handle, symbol);
}
void DlClose(sqlite3_vfs*, void* handle) { g_real->xDlClose(g_real, handle); }
int Randomness(sqlite3_vfs*, int n, char* out) { return g_real->xRandomness(g_real, n, out); }
int Sleep(sqlite3_vfs*, int micros) { return g_real->xSleep(g_real, micros); }
int CurrentTime(sqlite3_vfs*, double* out) { return g_real->xCurrentTime(g_real, out); }
int GetLastError(sqlite3_vfs*, int n, char* out) { return g_real->xGetLastError(g_real, n, out); }
int CurrentTimeInt64(sqlite3_vfs*, sqlite3_int64* out) {
  return g_real->xCurrentTimeInt64(g_real, out);
}

}  // namespace

const char* CoalescingVfsName() {
  static const char* name = [] () -> const char* {
    g_real = sqlite3_vfs_find(nullptr);
    if (g_real == nullptr || g_real->iVersion < 2 || g_real->xCurrentTimeInt64 == nullptr) {
      return nullptr;
    }
    g_vfs = sqlite3_vfs{};
    g_vfs.iVersion = 2;
    g_vfs.szOsFile = static_cast<int>(sizeof(File)) + g_real->szOsFile;
    g_vfs.mxPathname = g_real->mxPathname;
    g_vfs.zName = kName;
    g_vfs.xOpen = Open;
    g_vfs.xDelete = Delete;
    g_vfs.xAccess = Access;
    g_vfs.xFullPathname = FullPathname;
    g_vfs.xDlOpen = DlOpen;
    g_vfs.xDlError = DlError;
    g_vfs.xDlSym = DlSym;
    g_vfs.xDlClose = DlClose;
    g_vfs.xRandomness = Randomness;
    g_vfs.xSleep = Sleep;
    g_vfs.xCurrentTime = CurrentTime;
    g_vfs.xGetLastError = GetLastError;
    g_vfs.xCurrentTimeInt64 = CurrentTimeInt64;
    return sqlite3_vfs_register(&g_vfs, /*makeDflt=*/0) == SQLITE_OK ? kName : nullptr;
  }();
  return name;
}

CoalescingVfsStats GetCoalescingVfsStats() {
  return {g_wal_writes.load(std::memory_order_relaxed), g_wal_pwrites.load(std::memory_order_relaxed)};
}

}  // namespace llamafleet::sqlite
