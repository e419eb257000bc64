#include "storage/job_reads.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "storage/job_store.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;

constexpr char kJobColumns[] =
    "id, owner, state, status_reason, spec, idempotency_key, create_time_us, update_time_us, "
    "attempts, last_event_seq, restarts, workers, latest_metrics";


v1::JobEvent EventFromRow(const sqlite::Statement& s) {
  v1::JobEvent e;
  e.set_job_id(JobIdString(s.ColumnInt(0)));
  e.set_seq(s.ColumnInt(1));
  *e.mutable_time() = TimeUtil::MicrosecondsToTimestamp(s.ColumnInt(2));
  e.set_type(s.ColumnText(3));
  e.set_from_state(static_cast<v1::JobState>(s.ColumnInt(4)));
  e.set_to_state(static_cast<v1::JobState>(s.ColumnInt(5)));
  e.set_reason(s.ColumnText(6));
  return e;
}

}  // namespace

const char* JobColumns() { return kJobColumns; }

absl::StatusOr<v1::Job> JobFromRow(const sqlite::Statement& s) {
  v1::Job job;
  job.set_id(JobIdString(s.ColumnInt(0)));
  job.set_owner(s.ColumnText(1));
  job.set_state(static_cast<v1::JobState>(s.ColumnInt(2)));
  job.set_status_reason(s.ColumnText(3));
  if (!job.mutable_spec()->ParseFromString(s.ColumnText(4))) {
    return absl::DataLossError(absl::StrCat("job ", s.ColumnInt(0), ": stored spec is corrupt"));
  }
  if (!s.ColumnIsNull(5)) job.set_idempotency_key(s.ColumnText(5));
  *job.mutable_create_time() = TimeUtil::MicrosecondsToTimestamp(s.ColumnInt(6));
  *job.mutable_update_time() = TimeUtil::MicrosecondsToTimestamp(s.ColumnInt(7));
  job.set_attempts(static_cast<int32_t>(s.ColumnInt(8)));
  job.set_last_event_seq(s.ColumnInt(9));
  job.set_restarts(static_cast<int32_t>(s.ColumnInt(10)));
  for (absl::string_view w : absl::StrSplit(s.ColumnText(11), ',', absl::SkipEmpty())) {
    job.add_workers(std::string(w));
  }
  if (!s.ColumnIsNull(12)) (void)job.mutable_latest_metrics()->ParseFromString(s.ColumnText(12));
  return job;
}

absl::StatusOr<std::optional<v1::Job>> ReadJobRow(sqlite::Statement& select, int64_t job_id) {
  select.Bind(1, job_id);
  absl::StatusOr<bool> row = select.Step();
  std::optional<v1::Job> result;
  if (row.ok() && *row) {
    absl::StatusOr<v1::Job> job = JobFromRow(select);
    if (!job.ok()) {
      select.Reset();
      return job.status();
    }
    result = std::move(*job);
  }
  select.Reset();
  if (!row.ok()) return row.status();
  return result;
}

std::string JobIdString(int64_t id) { return absl::StrCat(id); }

absl::StatusOr<int64_t> ParseJobId(absl::string_view text, absl::string_view field) {
  int64_t id;
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is required"));
  if (!absl::SimpleAtoi(text, &id) || id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be a job id (a positive number), got '", text.substr(0, 64), "'"));
  }
  return id;
}

// `dir` (normalized: absolute, no trailing '/', no '.' or '..') and its ancestors, "/" last.
std::vector<std::string> SelfAndAncestors(const std::string& dir) {
  std::vector<std::string> out;
  std::string d = dir;
  while (!d.empty()) {
    out.push_back(d);
    if (d == "/") break;
    const size_t slash = d.rfind('/');
    d = slash == 0 ? "/" : d.substr(0, slash);
  }
  return out;
}

absl::StatusOr<v1::Job> ReadJob(sqlite::Connection& conn, int64_t job_id) {
  // JobColumns(), then what only a single job's read returns.
  constexpr int kSubmittedSpec = 13, kDerivedFrom = 14;
  LF_ASSIGN_OR_RETURN(
      sqlite::Statement s,
      conn.Prepare(absl::StrCat("SELECT ", kJobColumns,
                                ", submitted_spec, derived_from FROM jobs WHERE id = ?1")));
  s.Bind(1, job_id);
  LF_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
  LF_ASSIGN_OR_RETURN(v1::Job job, JobFromRow(s));
  if (!s.ColumnIsNull(kSubmittedSpec) &&
      !job.mutable_submitted_spec()->ParseFromString(s.ColumnText(kSubmittedSpec))) {
    return absl::DataLossError(absl::StrCat("job ", job_id, ": stored submitted spec is corrupt"));
  }
  if (!s.ColumnIsNull(kDerivedFrom)) job.set_derived_from(JobIdString(s.ColumnInt(kDerivedFrom)));
  return job;
}

absl::StatusOr<ListJobsResult> ReadJobs(sqlite::Connection& conn, const ListJobsQuery& query) {
  static const auto* kOrderColumns = new std::map<std::string, std::string>{
      {"", "id"},       {"id", "id"},       {"update_time", "update_time_us"},
      {"name", "name"}, {"priority", "priority"}, {"state", "state"},
      {"owner", "owner"}, {"queue", "queue"}};
  auto column = kOrderColumns->find(query.order_by);
  if (column == kOrderColumns->end()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot order by ", query.order_by));
  }
  const bool by_id = column->second == "id";
  std::string where = " WHERE 1";
  int next = 1;
  std::vector<std::pair<int, std::string>> binds_text;
  std::vector<std::pair<int, int64_t>> binds_int;
  if (!query.states.empty()) {
    std::vector<std::string> states;
    for (v1::JobState s : query.states) states.push_back(absl::StrCat(static_cast<int>(s)));
    absl::StrAppend(&where, " AND state IN (", absl::StrJoin(states, ","), ")");
  }
  if (!query.queue.empty()) {
    absl::StrAppend(&where, " AND queue = ?", next);
    binds_text.emplace_back(next++, query.queue);
  }
  if (!query.owner.empty()) {
    absl::StrAppend(&where, " AND owner = ?", next);
    binds_text.emplace_back(next++, query.owner);
  }
  if (!query.name_contains.empty()) {
    absl::StrAppend(&where, " AND instr(lower(name), lower(?", next, ")) > 0");
    binds_text.emplace_back(next++, query.name_contains);
  }
  for (const auto& [key, value] : query.labels) {
    absl::StrAppend(&where, " AND id IN (SELECT job_id FROM job_labels WHERE key = ?", next,
                    " AND value = ?", next + 1, ")");
    binds_text.emplace_back(next++, key);
    binds_text.emplace_back(next++, value);
  }
  const int filter_params = next;
  std::string page_where = where;
  if (by_id && query.before_id > 0) {
    absl::StrAppend(&page_where, query.descending ? " AND id < ?" : " AND id > ?", next);
    binds_int.emplace_back(next++, query.before_id);
  }
  const int page_size = std::clamp(query.page_size, 1, 10000);
  const char* dir = query.descending ? "DESC" : "ASC";
  std::string sql;
  if (by_id) {
    // The rowid order: a range scan of page_size + 1 rows wherever the page is.
    sql = absl::StrCat("SELECT ", kJobColumns, " FROM jobs", page_where, " ORDER BY id ", dir,
                       " LIMIT ", page_size + 1);
  } else {
    // Columns without an index: every matching row is sorted. Sort only (key, id), then
    // read the page's rows by id, so the sorter never holds the specs of the rows an
    // OFFSET skips (page 100 of 10,000 jobs sorted 10,000 whole rows).
    const std::string order = absl::StrCat(" ORDER BY ", column->second, " ", dir, ", id DESC");
    sql = absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id IN (SELECT id FROM jobs",
                       page_where, order, " LIMIT ", page_size + 1,
                       query.offset > 0 ? absl::StrCat(" OFFSET ", query.offset) : "", ")",
                       order);
  }

  ListJobsResult result;
  if (query.count_total) {
    LF_ASSIGN_OR_RETURN(sqlite::Statement c,
                        conn.Prepare(absl::StrCat("SELECT count(*) FROM jobs", where)));
    for (const auto& [i, v] : binds_text) {
      if (i < filter_params) c.Bind(i, v);
    }
    LF_ASSIGN_OR_RETURN(bool row, c.Step());
    result.total = row ? c.ColumnInt(0) : 0;
  }
  LF_ASSIGN_OR_RETURN(sqlite::Statement s, conn.Prepare(sql));
  for (const auto& [i, v] : binds_text) s.Bind(i, v);
  for (const auto& [i, v] : binds_int) s.Bind(i, v);
  while (true) {
    LF_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    if (static_cast<int>(result.jobs.size()) == page_size) {
      result.more = true;
      (void)absl::SimpleAtoi(result.jobs.back().id(), &result.next_before_id);
      break;
    }
    LF_ASSIGN_OR_RETURN(v1::Job job, JobFromRow(s));
    result.jobs.push_back(std::move(job));
  }
  return result;
}

absl::StatusOr<std::vector<v1::JobEvent>> ReadEvents(sqlite::Connection& conn, int64_t job_id,
                                                     int64_t after_seq, int limit) {
  LF_ASSIGN_OR_RETURN(
      sqlite::Statement s,
      conn.Prepare(
          "SELECT job_id, seq, time_us, type, from_state, to_state, reason FROM job_events "
          "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"));
  s.Bind(1, job_id).Bind(2, after_seq).Bind(3, static_cast<int64_t>(limit));
  std::vector<v1::JobEvent> events;
  while (true) {
    LF_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    events.push_back(EventFromRow(s));
  }
  return events;
}

absl::StatusOr<JobCounts> ReadJobCounts(sqlite::Connection& conn) {
  LF_ASSIGN_OR_RETURN(sqlite::Statement s,
                      conn.Prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state"));
  JobCounts counts;
  while (true) {
    LF_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    counts.by_state[static_cast<v1::JobState>(s.ColumnInt(0))] = s.ColumnInt(1);
  }
  return counts;
}

absl::StatusOr<std::map<std::string, JobCounts>> ReadJobCountsByQueue(sqlite::Connection& conn) {
  LF_ASSIGN_OR_RETURN(
      sqlite::Statement s,
      conn.Prepare("SELECT queue, state, COUNT(*) FROM jobs GROUP BY queue, state"));
  std::map<std::string, JobCounts> counts;
  while (true) {
    LF_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    counts[s.ColumnText(0)].by_state[static_cast<v1::JobState>(s.ColumnInt(1))] = s.ColumnInt(2);
  }
  return counts;
}

}  // namespace llamafleet

