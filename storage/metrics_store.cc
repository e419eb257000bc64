#include "storage/metrics_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "storage/txn_helpers.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;
using storage_internal::Exec;
using storage_internal::Query;
using storage_internal::RequireJob;

// The job's latest_metrics as stored (empty when it has none).
absl::StatusOr<v1::JobMetricsPoint> LatestMetrics(Txn& txn, int64_t job_id) {
  LF_ASSIGN_OR_RETURN(auto* select, txn.Statement("SELECT latest_metrics FROM jobs WHERE id = ?1"));
  select->Bind(1, job_id);
  absl::StatusOr<bool> row = select->Step();
  v1::JobMetricsPoint latest;
  if (row.ok() && *row && !select->ColumnIsNull(0))
    (void)latest.ParseFromString(select->ColumnText(0));
  select->Reset();
  if (!row.ok()) return row.status();
  return latest;
}

absl::Status SetLatestMetrics(Txn& txn, int64_t job_id, const v1::JobMetricsPoint& latest) {
  return Exec(txn, "UPDATE jobs SET latest_metrics = ?2 WHERE id = ?1",
              [&](sqlite::Statement& st) { st.Bind(1, job_id).BindBlob(2, latest.SerializeAsString()); });
}

}  // namespace

TxnFunction RecordMetricsTxn(int64_t job_id, v1::JobMetricsPoint point, int max_rows) {
  return [=](Txn& txn) -> absl::Status {
    const std::string bytes = point.SerializeAsString();
    LF_RETURN_IF_ERROR(
        Exec(txn,
             "INSERT INTO job_metrics (job_id, attempt, step, time_us, point) "
             "VALUES (?1, ?2, ?3, ?4, ?5)",
             [&](sqlite::Statement& st) {
               st.Bind(1, job_id).Bind(2, int64_t{point.attempt()}).Bind(3, point.step());
               st.Bind(4, txn.NowMicros()).BindBlob(5, bytes);
             }));
    // The latest point keeps the job's evaluation figures (RecordEvalTxn's).
    LF_ASSIGN_OR_RETURN(v1::JobMetricsPoint before, LatestMetrics(txn, job_id));
    v1::JobMetricsPoint latest = point;
    if (before.has_eval_loss()) latest.set_eval_loss(before.eval_loss());
    if (before.has_eval_perplexity()) latest.set_eval_perplexity(before.eval_perplexity());
    latest.set_eval_step(before.eval_step());
    if (before.has_best_eval_loss()) latest.set_best_eval_loss(before.best_eval_loss());
    LF_RETURN_IF_ERROR(SetLatestMetrics(txn, job_id, latest));
    LF_ASSIGN_OR_RETURN(auto* count,
                        txn.Statement("SELECT COUNT(*) FROM job_metrics WHERE job_id = ?1"));
    count->Bind(1, job_id);
    LF_ASSIGN_OR_RETURN(bool row, count->Step());
    const int64_t rows = row ? count->ColumnInt(0) : 0;
    count->Reset();
    if (rows <= max_rows) return absl::OkStatus();
    // Thin the history: every other point goes, the newest always stays.
    return Exec(txn,
                "DELETE FROM job_metrics WHERE rowid IN (SELECT rowid FROM (SELECT rowid, "
                "ROW_NUMBER() OVER (ORDER BY step DESC, rowid DESC) AS n FROM job_metrics "
                "WHERE job_id = ?1) WHERE n % 2 = 0)",
                [&](sqlite::Statement& st) { st.Bind(1, job_id); });
  };
}

TxnFunction RecordEvalTxn(int64_t job_id, int attempt, int64_t step, double loss, double perplexity,
                          const std::string& set, bool primary) {
  return [=](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, job_id));
    if (job.attempts() != attempt || (job.state() != v1::SCHEDULED && job.state() != v1::RUNNING)) {
      return absl::OkStatus();
    }
    if (primary) {
      LF_ASSIGN_OR_RETURN(v1::JobMetricsPoint latest, LatestMetrics(txn, job_id));
      latest.set_eval_loss(loss);
      latest.set_eval_perplexity(perplexity);
      latest.set_eval_step(step);
      if (!latest.has_best_eval_loss() || loss < latest.best_eval_loss())
        latest.set_best_eval_loss(loss);
      LF_RETURN_IF_ERROR(SetLatestMetrics(txn, job_id, latest));
    }
    LF_RETURN_IF_ERROR(
        Exec(txn,
             "INSERT INTO job_evals (job_id, attempt, step, time_us, loss, perplexity, eval_set) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
             [&](sqlite::Statement& st) {
               st.Bind(1, job_id).Bind(2, int64_t{attempt}).Bind(3, step).Bind(4, txn.NowMicros());
               st.BindDouble(5, loss).BindDouble(6, perplexity).Bind(7, set);
             }));
    const std::string status = job.status_reason();
    return txn.Transition(
        &job, "eval", job.state(),
        absl::StrFormat("eval loss %.4f (perplexity %.4g)%s after step %d", loss, perplexity,
                        set.empty() ? "" : absl::StrCat(" on set ", set), step),
        status);
  };
}

absl::StatusOr<std::vector<v1::JobMetricsPoint>> MetricsHistory(JobStore& store, int64_t job_id,
                                                                int max_points) {
  std::vector<v1::JobMetricsPoint> all;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) {
    return Query(
        conn, "SELECT point FROM job_metrics WHERE job_id = ?1 ORDER BY step, rowid",
        [&](sqlite::Statement& st) { st.Bind(1, job_id); },
        [&](sqlite::Statement& row) {
          v1::JobMetricsPoint p;
          (void)p.ParseFromString(row.ColumnText(0));
          all.push_back(std::move(p));
          return absl::OkStatus();
        });
  }));
  if (max_points <= 0 || static_cast<int>(all.size()) <= max_points) return all;
  // Even spacing over the history, always ending with the newest point.
  std::vector<v1::JobMetricsPoint> out;
  const double stride = static_cast<double>(all.size() - 1) / (max_points - 1);
  for (int i = 0; i < max_points; ++i) out.push_back(all[static_cast<size_t>(i * stride + 0.5)]);
  return out;
}

absl::StatusOr<std::vector<v1::EvalPoint>> EvalHistory(JobStore& store, int64_t job_id, int max_points) {
  std::vector<v1::EvalPoint> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) {
    // The newest max_points, returned oldest first.
    return Query(
        conn,
        "SELECT attempt, step, time_us, loss, perplexity, eval_set FROM (SELECT rowid, * FROM "
        "job_evals "
        "WHERE job_id = ?1 "
        "ORDER BY time_us DESC, rowid DESC LIMIT ?2) ORDER BY time_us, rowid",
        [&](sqlite::Statement& st) { st.Bind(1, job_id).Bind(2, int64_t{max_points}); },
        [&](sqlite::Statement& row) {
          v1::EvalPoint& e = out.emplace_back();
          e.set_attempt(static_cast<int32_t>(row.ColumnInt(0)));
          e.set_step(row.ColumnInt(1));
          *e.mutable_time() = TimeUtil::MicrosecondsToTimestamp(row.ColumnInt(2));
          e.set_loss(row.ColumnDouble(3));
          e.set_perplexity(row.ColumnDouble(4));
          e.set_set(row.ColumnText(5));
          return absl::OkStatus();
        });
  }));
  return out;
}

}  // namespace llamafleet
