#include "storage/queued_jobs.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "storage/job_store.h"

namespace llamafleet {
namespace {

// Columns of JobColumns(); the scheduling columns follow.
constexpr int kSchedulingBase = 13;

absl::Time FromMicrosOrPast(int64_t us) {
  return us == 0 ? absl::InfinitePast() : absl::FromUnixMicros(us);
}

}  // namespace

const std::string& SchedulableJobColumns() {
  static const std::string* const columns = new std::string(absl::StrCat(
      JobColumns(), ", queued_since_us, eligible_us, last_preempted_us, first_start_us, "
                    "excluded_workers"));
  return *columns;
}

absl::StatusOr<SchedulableJob> SchedulableJobFromRow(const sqlite::Statement& row) {
  absl::StatusOr<v1::Job> job = JobFromRow(row);
  if (!job.ok()) return job.status();
  SchedulableJob j;
  j.job = std::move(*job);
  j.queued_since = absl::FromUnixMicros(row.ColumnInt(kSchedulingBase));
  j.eligible = absl::FromUnixMicros(row.ColumnInt(kSchedulingBase + 1));
  j.last_preempted = FromMicrosOrPast(row.ColumnInt(kSchedulingBase + 2));
  j.first_start = FromMicrosOrPast(row.ColumnInt(kSchedulingBase + 3));
  for (absl::string_view w :
       absl::StrSplit(row.ColumnText(kSchedulingBase + 4), ',', absl::SkipEmpty())) {
    j.excluded_workers.insert(std::string(w));
  }
  return j;
}

QueuedJobsSnapshot QueuedJobs::Snapshot() const {
  std::vector<QueuedJobsSnapshot::Entry> jobs;
  std::lock_guard<std::mutex> lock(mu_);
  jobs.reserve(jobs_.size());
  for (const auto& [id, entry] : jobs_) jobs.push_back(entry);
  return QueuedJobsSnapshot(std::move(jobs));
}

size_t QueuedJobs::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

QueuedJobsChanges QueuedJobs::ChangesSince(uint64_t version) const {
  QueuedJobsChanges out;
  std::lock_guard<std::mutex> lock(mu_);
  out.version = version_;
  if (version == version_) return out;
  if (version < log_start_ || version > version_) {
    out.full = true;
    out.changed.reserve(jobs_.size());
    for (const auto& [id, entry] : jobs_) out.changed.emplace_back(id, entry);
    return out;
  }
  std::vector<int64_t> ids;
  for (auto it = log_.rbegin(); it != log_.rend() && it->first > version; ++it) {
    ids.push_back(it->second);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  out.changed.reserve(ids.size());
  for (int64_t id : ids) {
    auto it = jobs_.find(id);
    out.changed.emplace_back(id, it == jobs_.end() ? nullptr : it->second);
  }
  return out;
}

void QueuedJobs::Log(int64_t job_id) {
  log_.emplace_back(++version_, job_id);
  if (log_.size() > kMaxLog) {
    log_start_ = log_.front().first;
    log_.pop_front();
  }
}

void QueuedJobs::Replace(std::map<int64_t, QueuedJobsSnapshot::Entry> jobs) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.swap(jobs);
  log_.clear();
  log_start_ = ++version_;  // every reader gets the full view
}

QueuedJobsSnapshot::Entry QueuedJobs::Put(int64_t job_id, SchedulableJob job) {
  auto entry = std::make_shared<const SchedulableJob>(std::move(job));
  QueuedJobsSnapshot::Entry old;  // released outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  QueuedJobsSnapshot::Entry& slot = jobs_[job_id];
  old = std::move(slot);
  slot = entry;
  Log(job_id);
  return entry;
}

void QueuedJobs::Erase(int64_t job_id) {
  QueuedJobsSnapshot::Entry old;  // released outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  old = std::move(it->second);
  jobs_.erase(it);
  Log(job_id);
}

}  // namespace llamafleet
