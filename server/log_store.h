#ifndef LLAMAFLEET_SERVER_LOG_STORE_H_
#define LLAMAFLEET_SERVER_LOG_STORE_H_

// Trainer output, one file per job, attempt and rank under DIR/<job>/attempt-<n>/rank-<r>.log,
// each capped in size. Thread-safe.

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llamafleet {

class LogStore {
 public:
  LogStore(std::string dir, int64_t max_file_bytes) : dir_(std::move(dir)), max_bytes_(max_file_bytes) {}
  ~LogStore();

  // Appends lines of a task ("<job>-<attempt>-<node>") rank; `dropped` lines the worker
  // could not relay are recorded as one marker line. Past the size cap, lines are
  // dropped and one marker says so.
  void Append(const std::string& task_id, int rank, const std::vector<std::string>& lines,
              int64_t dropped);

  struct Source {
    int attempt = 0;
    int rank = 0;
    std::string path;
  };
  // The rank logs of a job's attempt (0 = newest), by rank.
  std::vector<Source> Sources(int64_t job_id, int attempt) const;

  // Closes the job's files and deletes DIR/<job>, for a job whose record was deleted
  // (ttl_after_finished). Errors name the directory.
  absl::Status RemoveJob(int64_t job_id);

 private:
  struct File {
    FILE* f = nullptr;
    int64_t bytes = 0;
    bool capped = false;
  };
  const std::string dir_;
  const int64_t max_bytes_;
  std::mutex mu_;
  std::map<std::string, File> files_;  // guarded by mu_
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_LOG_STORE_H_
