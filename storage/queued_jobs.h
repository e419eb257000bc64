#ifndef LLAMAFLEET_STORAGE_QUEUED_JOBS_H_
#define LLAMAFLEET_STORAGE_QUEUED_JOBS_H_

// The scheduler's view of the QUEUED jobs, kept in memory (issue 13).
//
// A scheduling pass used to re-read and re-parse every queued job from SQLite; with a
// deep queue that cost grew with the queue and competed with commits. JobStore now keeps
// this view, updated on its writer thread by the same commits that change the rows,
// after the commit and before the commit's events are published (so whoever reacts to
// an event sees the view that includes it). SQLite stays the truth: the view is rebuilt
// from it when the store opens, and an entry is re-read from its row whenever a commit
// records an event that moves the job into or out of QUEUED.

#include <cstdint>
#include <deque>
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

// What changed in the view since a version (QueuedJobs::ChangesSince): lets a reader
// that keeps its own copy (the scheduler's PendingJobCache) follow the queue at the cost
// of what changed, not of the queue's length.
struct QueuedJobsChanges {
  uint64_t version = 0;  // the view's version these changes bring the reader to
  // True: `changed` is the whole view (the reader asked for version 0, was further behind
  // than the change log reaches, or the view was rebuilt): whatever the reader holds that
  // is not in it has left the queue.
  bool full = false;
  // In job id order, each id once, with its entry now; a null entry: it left the queue.
  std::vector<std::pair<int64_t, QueuedJobsSnapshot::Entry>> changed;
};

// The view itself. Reads from any thread; writes only by JobStore's writer thread.
class QueuedJobs {
 public:
  QueuedJobsSnapshot Snapshot() const;
  size_t size() const;
  // The changes after `version` (0: everything, as a full change set).
  QueuedJobsChanges ChangesSince(uint64_t version) const;
  // Changes remembered for ChangesSince; a reader further behind gets the full view.
  static constexpr size_t kMaxLog = 1 << 16;

  // --- For JobStore (writer thread).
  void Replace(std::map<int64_t, QueuedJobsSnapshot::Entry> jobs);
  // Returns the entry now in the view for `job_id`.
  QueuedJobsSnapshot::Entry Put(int64_t job_id, SchedulableJob job);
  void Erase(int64_t job_id);

 private:
  mutable std::mutex mu_;
  std::map<int64_t, QueuedJobsSnapshot::Entry> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  // (version, job id) of each Put or Erase, in version order; complete after log_start_.
  std::deque<std::pair<uint64_t, int64_t>> log_ ABSL_GUARDED_BY(mu_);
  uint64_t log_start_ ABSL_GUARDED_BY(mu_) = 1;
  void Log(int64_t job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_QUEUED_JOBS_H_
