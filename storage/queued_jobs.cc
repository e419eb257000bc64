#include "storage/queued_jobs.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "storage/job_reads.h"

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
  LF_ASSIGN_OR_RETURN(v1::Job job, JobFromRow(row));
  SchedulableJob j;
  j.job = std::move(job);
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

void QueuedJobs::Replace(std::map<int64_t, QueuedJobsSnapshot::Entry> jobs) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.swap(jobs);
}

QueuedJobsSnapshot::Entry QueuedJobs::Put(int64_t job_id, SchedulableJob job) {
  auto entry = std::make_shared<const SchedulableJob>(std::move(job));
  QueuedJobsSnapshot::Entry old;  // released outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  QueuedJobsSnapshot::Entry& slot = jobs_[job_id];
  old = std::move(slot);
  slot = entry;
  return entry;
}

void QueuedJobs::Erase(int64_t job_id) {
  QueuedJobsSnapshot::Entry old;  // released outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  old = std::move(it->second);
  jobs_.erase(it);
}

absl::Status QueuedJobs::Rebuild(sqlite::Connection& conn) {
  LF_ASSIGN_OR_RETURN(
      sqlite::Statement s,
      conn.Prepare(absl::StrCat("SELECT ", SchedulableJobColumns(), " FROM jobs WHERE state = ",
                                static_cast<int>(v1::QUEUED), " ORDER BY id")));
  std::map<int64_t, QueuedJobsSnapshot::Entry> jobs;
  while (true) {
    LF_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    LF_ASSIGN_OR_RETURN(SchedulableJob job, SchedulableJobFromRow(s));
    jobs[s.ColumnInt(0)] = std::make_shared<const SchedulableJob>(std::move(job));
  }
  Replace(std::move(jobs));
  stale_.store(false);
  return absl::OkStatus();
}

absl::Status QueuedJobs::Reload(sqlite::Connection& conn, int64_t job_id) {
  static const std::string* const kSql = new std::string(
      absl::StrCat("SELECT ", SchedulableJobColumns(), " FROM jobs WHERE id = ?1"));
  LF_ASSIGN_OR_RETURN(auto* select, conn.Cached(*kSql));
  sqlite::Statement& st = *select;
  st.Bind(1, job_id);
  absl::StatusOr<bool> row = st.Step();
  absl::Status status = row.status();
  if (row.ok() && *row && static_cast<v1::JobState>(st.ColumnInt(2)) == v1::QUEUED) {
    absl::StatusOr<SchedulableJob> job = SchedulableJobFromRow(st);
    if (job.ok()) {
      Put(job_id, std::move(*job));
    } else {
      status = job.status();
    }
  } else if (row.ok()) {
    Erase(job_id);  // gone from QUEUED, or deleted
  }
  st.Reset();
  return status;
}

absl::Status QueuedJobs::Refresh(sqlite::Connection& conn, const std::set<int64_t>& job_ids) {
  if (stale_.load()) {
    if (absl::Status s = Rebuild(conn); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot rebuild the view: ", s.message()));
    }
    return absl::OkStatus();
  }
  for (int64_t id : job_ids) {
    if (absl::Status s = Reload(conn, id); !s.ok()) {
      stale_.store(true);
      absl::Status rebuilt = Rebuild(conn);
      return absl::Status(s.code(), absl::StrCat("cannot refresh job ", id, ": ", s.message(),
                                                 rebuilt.ok() ? "; rebuilt the view"
                                                              : absl::StrCat("; cannot rebuild the view: ",
                                                                             rebuilt.message())));
    }
  }
  return absl::OkStatus();
}

}  // namespace llamafleet
