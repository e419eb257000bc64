#include "storage/sample_store.h"

#include <cmath>
#include <string>
#include <utility>

#include "common/status_macros.h"
#include "common/utf8.h"
#include "google/protobuf/util/time_util.h"
#include "storage/txn_helpers.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;
using storage_internal::Exec;
using storage_internal::Query;
using storage_internal::RequireJob;

// At most `limit` bytes of `s`, never ending inside a UTF-8 character.
void CutUtf8(std::string* s, size_t limit) { s->resize(Utf8PrefixLength(*s, limit)); }

// One value of a query with one integer result (0 without a row).
absl::StatusOr<int64_t> QueryInt(Txn& txn, const std::string& sql, int64_t job_id) {
  LF_ASSIGN_OR_RETURN(sqlite::Statement * st, txn.Statement(sql));
  st->Bind(1, job_id);
  absl::StatusOr<bool> row = st->Step();
  const int64_t value = row.ok() && *row ? st->ColumnInt(0) : 0;
  st->Reset();
  if (!row.ok()) return row.status();
  return value;
}

// Drops the job's oldest step while it has more than kMaxSampleSteps steps or more than
// kMaxSampleBytesPerJob bytes over at least two steps.
absl::Status TrimSamples(Txn& txn, int64_t job_id) {
  while (true) {
    LF_ASSIGN_OR_RETURN(
        int64_t steps,
        QueryInt(txn, "SELECT COUNT(DISTINCT step) FROM job_samples WHERE job_id = ?1", job_id));
    if (steps <= 1) return absl::OkStatus();
    LF_ASSIGN_OR_RETURN(
        int64_t bytes,
        QueryInt(txn, "SELECT COALESCE(SUM(bytes), 0) FROM job_samples WHERE job_id = ?1", job_id));
    if (steps <= kMaxSampleSteps && bytes <= kMaxSampleBytesPerJob) return absl::OkStatus();
    LF_RETURN_IF_ERROR(Exec(txn,
                            "DELETE FROM job_samples WHERE job_id = ?1 AND step = "
                            "(SELECT MIN(step) FROM job_samples WHERE job_id = ?1)",
                            [&](sqlite::Statement& st) { st.Bind(1, job_id); }));
  }
}

}  // namespace

v1::Sample BoundedSample(v1::Sample sample) {
  CutUtf8(sample.mutable_prompt(), kMaxSampleTextBytes);
  CutUtf8(sample.mutable_text(), kMaxSampleTextBytes);
  CutUtf8(sample.mutable_reference(), kMaxSampleTextBytes);
  CutUtf8(sample.mutable_stop_reason(), 16);
  google::protobuf::Map<std::string, double> scores;
  for (const auto& [name, value] : sample.scores()) {
    if (static_cast<int>(scores.size()) == kMaxSampleScores) break;
    if (!std::isfinite(value)) continue;
    std::string cut = name;
    CutUtf8(&cut, 32);
    scores[cut] = value;
  }
  sample.mutable_scores()->swap(scores);
  return sample;
}

TxnFunction RecordSampleTxn(int64_t job_id, v1::Sample sample) {
  return [job_id, sample = BoundedSample(std::move(sample))](Txn& txn) -> absl::Status {
    if (sample.step() < 0 || sample.index() < 0 || sample.index() >= kMaxSamplesPerStep) {
      return absl::OkStatus();
    }
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, job_id));
    if (job.attempts() != sample.attempt() ||
        (job.state() != v1::SCHEDULED && job.state() != v1::RUNNING)) {
      return absl::OkStatus();
    }
    v1::Sample stored = sample;
    *stored.mutable_time() = TimeUtil::MicrosecondsToTimestamp(txn.NowMicros());
    const int64_t bytes = static_cast<int64_t>(stored.prompt().size() + stored.text().size() +
                                               stored.reference().size());
    LF_RETURN_IF_ERROR(
        Exec(txn,
             "INSERT OR REPLACE INTO job_samples (job_id, step, idx, attempt, time_us, "
             "bytes, sample) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
             [&](sqlite::Statement& st) {
               st.Bind(1, job_id).Bind(2, stored.step()).Bind(3, int64_t{stored.index()});
               st.Bind(4, int64_t{stored.attempt()}).Bind(5, txn.NowMicros()).Bind(6, bytes);
               st.BindBlob(7, stored.SerializeAsString());
             }));
    return TrimSamples(txn, job_id);
  };
}

absl::StatusOr<v1::ListSamplesResponse> ListSamples(JobStore& store, int64_t job_id, int64_t step,
                                                    bool latest) {
  v1::ListSamplesResponse out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_RETURN_IF_ERROR(Query(
        conn, "SELECT DISTINCT step FROM job_samples WHERE job_id = ?1 ORDER BY step",
        [&](sqlite::Statement& st) { st.Bind(1, job_id); },
        [&](sqlite::Statement& row) {
          out.add_steps(row.ColumnInt(0));
          return absl::OkStatus();
        }));
    if (latest) {
      if (out.steps().empty()) return absl::OkStatus();
      step = out.steps(out.steps_size() - 1);
    }
    return Query(
        conn,
        "SELECT sample FROM job_samples WHERE job_id = ?1 AND (?2 = 0 OR step = ?2) "
        "ORDER BY step, idx",
        [&](sqlite::Statement& st) { st.Bind(1, job_id).Bind(2, step); },
        [&](sqlite::Statement& row) {
          if (!out.add_samples()->ParseFromString(row.ColumnText(0)))
            out.mutable_samples()->RemoveLast();
          return absl::OkStatus();
        });
  }));
  return out;
}

}  // namespace llamafleet
