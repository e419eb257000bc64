#ifndef LLAMAFLEET_STORAGE_JOB_READS_H_
#define LLAMAFLEET_STORAGE_JOB_READS_H_

// Reading jobs and their events from a connection (JobStore runs these on its pool of
// read connections; the writer's transactions use JobFromRow too), and the helpers that
// name jobs.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_state.h"
#include "llamafleet/v1/job.pb.h"
#include "storage/sqlite.h"

namespace llamafleet {

class JobStore;

struct ListJobsQuery {
  std::vector<v1::JobState> states;  // any of; empty = all
  std::string queue;                 // "" = any
  std::string owner;                 // "" = any
  std::vector<std::pair<std::string, std::string>> labels;  // all must match
  std::string name_contains;          // case-insensitive substring; "" = any
  // Sort column: "" or "id" (= creation order), "update_time", "name", "priority",
  // "state", "owner", "queue"; ties newest first.
  std::string order_by;
  bool descending = true;
  int page_size = 100;
  // Paging: by id order, only ids < before_id (0 = from the newest); by any other
  // order, skip `offset` rows.
  int64_t before_id = 0;
  int64_t offset = 0;
  bool count_total = false;  // fill ListJobsResult::total
};

struct ListJobsResult {
  std::vector<v1::Job> jobs;
  bool more = false;           // another page follows
  int64_t next_before_id = 0;  // id order: where the next page starts
  int64_t total = -1;          // matching jobs, when asked for
};

struct JobCounts {
  std::map<v1::JobState, int64_t> by_state;
};

// The columns JobFromRow reads, for queries composed elsewhere in storage/.
const char* JobColumns();
// Reads a job from a row that starts with JobColumns().
absl::StatusOr<v1::Job> JobFromRow(const sqlite::Statement& row);
// Runs `select` (JobColumns() ... WHERE id = ?1) for `job_id` and resets it: the job, or
// nullopt if there is none.
absl::StatusOr<std::optional<v1::Job>> ReadJobRow(sqlite::Statement& select, int64_t job_id);

// The reads behind JobStore's (see job_store.h for their contracts).
absl::StatusOr<v1::Job> ReadJob(sqlite::Connection& conn, int64_t job_id);
absl::StatusOr<ListJobsResult> ReadJobs(sqlite::Connection& conn, const ListJobsQuery& query);
absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(sqlite::Connection& conn, int64_t job_id,
                                                     int64_t after_seq, int limit);
absl::StatusOr<JobCounts> ReadJobCounts(sqlite::Connection& conn);
absl::StatusOr<std::map<std::string, JobCounts>> ReadJobCountsByQueue(sqlite::Connection& conn);

// `dir` (normalized) and its ancestors, "/" last.
std::vector<std::string> SelfAndAncestors(const std::string& dir);

// Helpers shared by the coordinator.
std::string JobIdString(int64_t id);
// Parses a job id as clients send it ("42"); INVALID_ARGUMENT names `field`.
absl::StatusOr<int64_t> ParseJobId(absl::string_view text, absl::string_view field);

}  // namespace llamafleet

#endif  // LLAMAFLEET_STORAGE_JOB_READS_H_
