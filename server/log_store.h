#ifndef LLAMAFLEET_SERVER_LOG_STORE_H_
#define LLAMAFLEET_SERVER_LOG_STORE_H_

// Trainer output, one file per job, attempt and rank under DIR/<job>/attempt-<n>/rank-<r>.log,
// each capped in size. Thread-safe. Every bound is explicit:
//   - Append never touches the disk: it queues the lines (at most kMaxQueuedBytes; beyond
//     that they are dropped and counted, and a marker line says how many) for a writer
//     thread of its own, so gRPC callback threads never wait on a file.
//   - At most `max_open_files` files are open; the least recently written is closed when
//     another must open. CloseAttempt closes an attempt's files when it ends.
//   - A line longer than kMaxLineBytes is cut there (with a marker).
//   - Readers (StreamJobLogs) run on a reader thread of their own (RunRead), read in
//     blocks, and return chunks of at most kMaxChunkBytes.
// Logs hold what trainers printed, for their job's owner and the coordinator only: DIR and
// every directory below it are mode 0700, every file 0600, made so, and tightened so at
// construction when an earlier build left them looser (DIR at once, the rest on the
// writer thread). Links are never followed.

#include <cstdint>
#include <cstdio>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "server/serial_executor.h"

namespace llamafleet {

class LogStore {
 public:
  static constexpr int64_t kMaxLineBytes = 64 * 1024;
  static constexpr int64_t kMaxChunkBytes = 1024 * 1024;
  static constexpr int kMaxChunkLines = 1000;
  static constexpr int64_t kMaxQueuedBytes = 16 * 1024 * 1024;

  LogStore(std::string dir, int64_t max_file_bytes, int max_open_files = 64);
  // Writes what was queued, then closes every file.
  ~LogStore();

  // Queues lines of a task ("<job>-<attempt>-<node>") rank; `dropped` lines the worker
  // could not relay are recorded as one marker line. Past the size cap, lines are
  // dropped and one marker says so. Never blocks on I/O.
  void Append(const std::string& task_id, int rank, const std::vector<std::string>& lines,
              int64_t dropped);
  // Closes the files of a job's attempt (after what was queued for them is written).
  void CloseAttempt(int64_t job_id, int attempt);
  // Blocks until everything queued so far is written (tests, shutdown).
  void Flush();
  // Files open now (for tests and metrics).
  int OpenFiles() const;

  struct Source {
    int attempt = 0;
    int rank = 0;
    std::string path;
  };
  // The rank logs of a job's attempt (0 = newest), by rank. Reads a directory: call it
  // from RunRead, not from a callback thread.
  std::vector<Source> Sources(int64_t job_id, int attempt) const;

  // Runs `fn` on the reader thread (log reads for StreamJobLogs).
  void RunRead(std::function<void()> fn) { readers_->Post(std::move(fn)); }

  // Block reads for readers.
  struct Cursor {
    bool opened = false;
    int64_t offset = 0;
  };
  // Offset where the last `tail_lines` lines of the file start (0: all of it).
  static int64_t TailOffset(const std::string& path, int64_t tail_lines);
  // Complete lines from the cursor, at most kMaxChunkLines and kMaxChunkBytes together
  // (a longer line is returned cut at kMaxChunkBytes); advances the cursor.
  static std::vector<std::string> ReadLines(const std::string& path, Cursor* cursor);

  // Closes the job's files and deletes DIR/<job>, for a job whose record was deleted
  // (ttl_after_finished). Errors name the directory.
  absl::Status RemoveJob(int64_t job_id);

 private:
  struct File {
    FILE* f = nullptr;
    int64_t bytes = 0;
    bool capped = false;
    std::list<std::string>::iterator lru;  // valid while f != nullptr
  };
  struct Batch {
    std::string path;
    std::vector<std::string> lines;
    int64_t dropped = 0;
    int64_t bytes = 0;
  };
  void TightenModes();                   // writer thread
  void WriteBatch(const Batch& batch);   // writer thread
  File* OpenFile(const std::string& path);  // writer thread
  void CloseFile(const std::string& path, File* file);

  const std::string dir_;
  const int64_t max_bytes_;
  const int max_open_;

  mutable std::mutex mu_;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> dropped_ ABSL_GUARDED_BY(mu_);  // path → lines not queued
  int open_files_ ABSL_GUARDED_BY(mu_) = 0;

  // Writer thread only.
  std::map<std::string, File> files_;
  std::list<std::string> lru_;  // open files, most recently written first

  // Declared last: destroyed first, finishing queued work while the members live.
  std::unique_ptr<SerialExecutor> readers_;
  std::unique_ptr<SerialExecutor> writer_;
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_LOG_STORE_H_
