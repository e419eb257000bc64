#ifndef LLAMAFLEET_WORKER_RANK_PROGRESS_H_
#define LLAMAFLEET_WORKER_RANK_PROGRESS_H_

// The latest progress line (worker/trainer_events.h: "progress") of each rank of the
// worker's running tasks, and when the worker read it: relayed in every heartbeat
// (v1::Heartbeat.ranks) so that the coordinator can tell which rank of a hung gang the
// others are waiting for (a rank whose lines stopped, or that is not in their collective).
// Bounded: one entry per rank of a running task, forgotten when the task ends. Thread-safe.

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "llamafleet/v1/worker.pb.h"
#include "worker/trainer_events.h"

namespace llamafleet::worker {

class RankProgressTable {
 public:
  // Ranks per task kept at most (more than any node has GPUs): beyond, new ranks are dropped.
  static constexpr size_t kMaxRanksPerTask = 256;

  void Record(const std::string& task_id, int rank, const trainer_events::Progress& p, absl::Time now);
  void Forget(const std::string& task_id);
  // Every entry, with its age at `now` (seconds since it was read).
  std::vector<v1::RankProgress> Snapshot(absl::Time now) const;

 private:
  struct Entry {
    trainer_events::Progress progress;
    absl::Time read;
  };
  mutable std::mutex mu_;
  std::map<std::string, std::map<int, Entry>> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace llamafleet::worker

#endif  // LLAMAFLEET_WORKER_RANK_PROGRESS_H_
