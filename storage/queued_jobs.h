#ifndef LLAMAFLEET_STORAGE_QUEUED_JOBS_H_
#define LLAMAFLEET_STORAGE_QUEUED_JOBS_H_

// The scheduler's view of the QUEUED jobs, kept in memory, so that a scheduling pass
// neither reads nor parses the queue from SQLite.
//
// JobStore keeps this view, updated on its writer thread by the same commits that change
// the rows, after the commit and before the commit's events are published (so whoever
// reacts to an event sees the view that includes it). SQLite stays the truth: the view is
// rebuilt from it when the store opens, and an entry is re-read from its row whenever a
// commit records an event that moves the job into or out of QUEUED.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "llamafleet/v1/job.pb.h"
#include "storage/sqlite.h"

namespace llamafleet {

// A job as the scheduler sees it: the stored job and its scheduling columns.
struct SchedulableJob {
  v1::Job job;
  absl::Time queued_since;
  absl::Time eligible;          // not before (restart backoff)
  absl::Time last_preempted;    // InfinitePast if never
  absl::Time first_start;       // InfinitePast if never started
  std::set<std::string> excluded_workers;
};

// The columns SchedulableJobFromRow reads (JobColumns() and the scheduling columns).
const std::string& SchedulableJobColumns();
absl::StatusOr<SchedulableJob> SchedulableJobFromRow(const sqlite::Statement& row);

// An immutable copy of the view at one moment, in job id order. Cheap to take (it shares
// the entries); iterating yields `const SchedulableJob&`, valid while the snapshot lives.
class QueuedJobsSnapshot {
 public:
  using Entry = std::shared_ptr<const SchedulableJob>;
  class const_iterator {
   public:
    explicit const_iterator(std::vector<Entry>::const_iterator it) : it_(it) {}
    const SchedulableJob& operator*() const { return **it_; }
    const SchedulableJob* operator->() const { return it_->get(); }
    const_iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator==(const const_iterator& o) const { return it_ == o.it_; }
    bool operator!=(const const_iterator& o) const { return it_ != o.it_; }

   private:
    std::vector<Entry>::const_iterator it_;
  };

  QueuedJobsSnapshot() = default;
  explicit QueuedJobsSnapshot(std::vector<Entry> jobs) : jobs_(std::move(jobs)) {}
  const_iterator begin() const { return const_iterator(jobs_.begin()); }
  const_iterator end() const { return const_iterator(jobs_.end()); }
  size_t size() const { return jobs_.size(); }
  bool empty() const { return jobs_.empty(); }
  // The entries themselves: an entry stays the same object until a commit replaces or
  // removes that job, so its address tells a reader whether the job changed.
  const std::vector<Entry>& entries() const { return jobs_; }

 private:
  std::vector<Entry> jobs_;
};

// The view itself. Reads from any thread; writes only by JobStore's writer thread.
class QueuedJobs {
 public:
  QueuedJobsSnapshot Snapshot() const;
  size_t size() const;
  // True after a read error left the view behind the database, until a rebuild succeeds.
  bool stale() const { return stale_.load(); }

  // --- For JobStore (writer thread).
  // The whole view from the QUEUED rows.
  absl::Status Rebuild(sqlite::Connection& conn);
  // After a commit: re-reads each of `job_ids` (jobs an event moved into or out of QUEUED)
  // from its committed row; a stale view is rebuilt instead. A read error leaves the view
  // stale, to be rebuilt at the next commit, and is returned.
  absl::Status Refresh(sqlite::Connection& conn, const std::set<int64_t>& job_ids);
  void Replace(std::map<int64_t, QueuedJobsSnapshot::Entry> jobs);
  // Returns the entry now in the view for `job_id`.
  QueuedJobsSnapshot::Entry Put(int64_t job_id, SchedulableJob job);
  void Erase(int64_t job_id);

 private:
  absl::Status Reload(sqlite::Connection& conn, int64_t job_id);

  mutable std::mutex mu_;
  std::map<int64_t, QueuedJobsSnapshot::Entry> jobs_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stale_{false};
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_QUEUED_JOBS_H_
