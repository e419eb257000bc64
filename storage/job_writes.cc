#include "storage/job_writes.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "storage/dir_claims.h"
#include "storage/job_reads.h"
#include "storage/job_store.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;

v1::JobEvent MakeEvent(const v1::Job& job, int64_t seq, absl::string_view type, v1::JobState from,
                       v1::JobState to, absl::string_view reason, int64_t now_us) {
  v1::JobEvent e;
  e.set_job_id(job.id());
  e.set_seq(seq);
  *e.mutable_time() = TimeUtil::MicrosecondsToTimestamp(now_us);
  e.set_type(std::string(type));
  e.set_from_state(from);
  e.set_to_state(to);
  e.set_reason(std::string(reason));
  return e;
}

// Steps `s` once for an integer in column `column` (0 when there is no row), then resets it.
absl::StatusOr<int64_t> QueryInt(sqlite::Statement& s, int column = 0) {
  absl::StatusOr<bool> row = s.Step();
  const int64_t v = row.ok() && *row ? s.ColumnInt(column) : 0;
  s.Reset();
  if (!row.ok()) return row.status();
  return v;
}

// Inserts one job QUEUED with its "submitted" event; returns its id.
absl::StatusOr<int64_t> InsertJob(Txn& txn, const SubmitJobInput& in, v1::Job* job) {
  const int64_t now_us = txn.NowMicros();
  LF_ASSIGN_OR_RETURN(
      auto* insert,
      txn.Statement(
          "INSERT INTO jobs (owner, name, queue, priority, state, status_reason, spec, "
          "idempotency_key, create_time_us, update_time_us, last_event_seq, queued_since_us, "
          "checkpoint_dir, export_dir, submitted_spec, derived_from) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, 1, ?9, ?10, ?11, ?12, ?13)"));
  sqlite::Statement& s = *insert;
  std::string spec_bytes;
  in.spec.SerializeToString(&spec_bytes);
  const std::string reason = "waiting to be scheduled";
  const std::string& checkpoint_dir = in.spec.checkpoint().dir();
  s.Bind(1, in.owner).Bind(2, in.spec.name()).Bind(3, in.spec.queue());
  s.Bind(4, static_cast<int64_t>(in.spec.priority()));
  s.Bind(5, static_cast<int64_t>(v1::QUEUED)).Bind(6, reason).BindBlob(7, spec_bytes);
  if (in.idempotency_key.empty()) {
    s.BindNull(8);
  } else {
    s.Bind(8, in.idempotency_key);
  }
  s.Bind(9, now_us);
  if (checkpoint_dir.empty()) {
    s.BindNull(10);
  } else {
    s.Bind(10, checkpoint_dir);
  }
  if (in.spec.output().export_dir().empty()) {
    s.BindNull(11);
  } else {
    s.Bind(11, in.spec.output().export_dir());
  }
  std::string submitted_bytes;
  if (in.submitted_spec.has_value()) {
    in.submitted_spec->SerializeToString(&submitted_bytes);
    s.BindBlob(12, submitted_bytes);
  } else {
    s.BindNull(12);
  }
  if (in.derived_from != 0) {
    s.Bind(13, in.derived_from);
  } else {
    s.BindNull(13);
  }
  LF_RETURN_IF_ERROR(s.Run());
  const int64_t id = txn.LastInsertId();
  if (!in.spec.labels().empty()) {
    LF_ASSIGN_OR_RETURN(
        auto* label,
        txn.Statement("INSERT INTO job_labels (job_id, key, value) VALUES (?1, ?2, ?3)"));
    for (const auto& [key, value] : in.spec.labels()) {
      label->Bind(1, id).Bind(2, key).Bind(3, value);
      LF_RETURN_IF_ERROR(label->Run());
    }
  }
  // The job is born QUEUED with its first event; the event names the submitter, the
  // job's status says what happens next.
  job->set_id(JobIdString(id));
  job->set_owner(in.owner);
  job->set_idempotency_key(in.idempotency_key);
  job->set_state(v1::QUEUED);
  job->set_status_reason(reason);
  job->set_last_event_seq(1);
  *job->mutable_create_time() = TimeUtil::MicrosecondsToTimestamp(now_us);
  *job->mutable_update_time() = job->create_time();
  if (in.derived_from != 0) job->set_derived_from(JobIdString(in.derived_from));
  const std::string submitted =
      in.derived_from == 0
          ? absl::StrCat("submitted by ", in.owner)
          : absl::StrCat("submitted by ", in.owner, ", resubmitted from job ", in.derived_from);
  LF_RETURN_IF_ERROR(txn.AddEvent(id, MakeEvent(*job, 1, "submitted", v1::JOB_STATE_UNSPECIFIED,
                                                v1::QUEUED, submitted, now_us)));
  return id;
}

}  // namespace

absl::StatusOr<sqlite::Statement*> Txn::Statement(const std::string& sql) { return conn_.Cached(sql); }

absl::StatusOr<std::optional<v1::Job>> Txn::LoadJob(int64_t job_id) {
  static const std::string* const kSql =
      new std::string(absl::StrCat("SELECT ", JobColumns(), " FROM jobs WHERE id = ?1"));
  LF_ASSIGN_OR_RETURN(auto* s, Statement(*kSql));
  return ReadJobRow(*s, job_id);
}

absl::Status Txn::AddEvent(int64_t job_id, v1::JobEvent e) {
  LF_ASSIGN_OR_RETURN(
      auto* insert,
      Statement("INSERT INTO job_events (job_id, seq, time_us, type, from_state, to_state, reason) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
  sqlite::Statement& s = *insert;
  s.Bind(1, job_id).Bind(2, e.seq()).Bind(3, TimeUtil::TimestampToMicroseconds(e.time()));
  s.Bind(4, e.type()).Bind(5, static_cast<int64_t>(e.from_state()));
  s.Bind(6, static_cast<int64_t>(e.to_state())).Bind(7, e.reason());
  LF_RETURN_IF_ERROR(s.Run());
  events_.push_back(std::move(e));
  return absl::OkStatus();
}

absl::Status Txn::Transition(v1::Job* job, absl::string_view type, v1::JobState to,
                             absl::string_view reason,
                             std::optional<absl::string_view> status_reason) {
  const absl::string_view status = status_reason.value_or(reason);
  int64_t id = 0;
  (void)absl::SimpleAtoi(job->id(), &id);
  v1::JobEvent e = MakeEvent(*job, job->last_event_seq() + 1, type, job->state(), to, reason, now_us_);
  const int64_t seq = e.seq();
  *job->mutable_update_time() = e.time();
  LF_RETURN_IF_ERROR(AddEvent(id, std::move(e)));
  LF_ASSIGN_OR_RETURN(
      auto* update,
      Statement("UPDATE jobs SET state = ?2, status_reason = ?3, update_time_us = ?4, "
                "last_event_seq = ?5 WHERE id = ?1"));
  update->Bind(1, id).Bind(2, static_cast<int64_t>(to)).Bind(3, status).Bind(4, now_us_);
  update->Bind(5, seq);
  LF_RETURN_IF_ERROR(update->Run());
  job->set_state(to);
  job->set_status_reason(std::string(status));
  job->set_last_event_seq(seq);
  return absl::OkStatus();
}

absl::Status JobWrite::Apply(sqlite::Connection& conn) {
  events_.clear();
  queued_.clear();
  const int64_t now_us = absl::ToUnixMicros(clock_->Now());
  auto keep = [&](Txn& txn) {
    for (v1::JobEvent& e : txn.events()) events_.push_back(std::move(e));
    for (auto& q : txn.queued()) queued_.push_back(std::move(q));
  };
  if (fns_.size() == 1) {  // the writer's savepoint around the write is the function's
    Txn txn(conn, now_us);
    results_[0] = fns_[0].first(txn);
    if (results_[0].ok()) keep(txn);
    return results_[0];
  }
  auto run = [&](const char* sql) -> absl::Status {
    absl::StatusOr<sqlite::Statement*> s = conn.Cached(sql);
    return s.ok() ? (*s)->Run() : s.status();
  };
  for (size_t i = 0; i < fns_.size(); ++i) {
    LF_RETURN_IF_ERROR(run("SAVEPOINT fn"));
    Txn txn(conn, now_us);
    results_[i] = fns_[i].first(txn);
    if (!results_[i].ok()) {
      if (!conn.InTransaction()) return results_[i];  // SQLite rolled everything back
      LF_RETURN_IF_ERROR(run("ROLLBACK TO fn"));
    } else {
      keep(txn);
    }
    LF_RETURN_IF_ERROR(run("RELEASE fn"));
  }
  return absl::OkStatus();
}

void JobWrite::Complete(absl::Status status) {
  for (size_t i = 0; i < fns_.size(); ++i) fns_[i].second(status.ok() ? results_[i] : status);
}

std::vector<SubmitJobResult> SubmitBatch::TakeResults() {
  for (size_t i = 0; i < results.size() && i < inputs.size(); ++i) {
    if (results[i].created) *results[i].job.mutable_spec() = std::move(inputs[i].spec);
  }
  return std::move(results);
}

absl::StatusOr<int64_t> CountActiveJobs(Txn& txn, const std::string& owner) {
  // Every state in which a job counts against its owner's limit.
  static const std::string* const kSql = new std::string(absl::StrCat(
      "SELECT COUNT(*) FROM jobs WHERE owner = ?1 AND state IN (",
      absl::StrJoin({v1::QUEUED, v1::SCHEDULED, v1::RUNNING, v1::RESTARTING, v1::PREEMPTING}, ", "),
      ")"));
  LF_ASSIGN_OR_RETURN(auto* s, txn.Statement(*kSql));
  s->Bind(1, owner);
  return QueryInt(*s);
}

TxnFunction SubmitJobsTxn(std::shared_ptr<SubmitBatch> batch) {
  return [batch = std::move(batch)](Txn& txn) -> absl::Status {
    std::vector<SubmitJobResult>& results = batch->results;
    results.clear();
    // By owner, for those with a limit: active jobs, this submission's so far included.
    std::map<std::string, int64_t> active;
    for (const SubmitJobInput& input : batch->inputs) {
      SubmitJobResult r;
      // Parents of this submission are named by their ids from here on.
      std::optional<SubmitJobInput> with_ids;
      if (!input.batch_parents.empty()) {
        with_ids = input;
        for (const auto& [k, b] : input.batch_parents) {
          if (b < 0 || static_cast<size_t>(b) >= results.size() || k < 0 || k >= input.spec.depends_on_size()) {
            return absl::InternalError("depends_on names a job not submitted before it");
          }
          with_ids->spec.mutable_depends_on(k)->set_job(results[b].job.id());
          if (with_ids->submitted_spec.has_value() &&
              k < with_ids->submitted_spec->depends_on_size()) {
            with_ids->submitted_spec->mutable_depends_on(k)->set_job(results[b].job.id());
          }
        }
      }
      const SubmitJobInput& in = with_ids.has_value() ? *with_ids : input;
      if (!in.idempotency_key.empty()) {
        LF_ASSIGN_OR_RETURN(
            auto* find,
            txn.Statement("SELECT id FROM jobs WHERE owner = ?1 AND idempotency_key = ?2"));
        find->Bind(1, in.owner).Bind(2, in.idempotency_key);
        LF_ASSIGN_OR_RETURN(int64_t existing, QueryInt(*find));
        if (existing != 0) {
          LF_ASSIGN_OR_RETURN(std::optional<v1::Job> job, txn.LoadJob(existing));
          if (!job.has_value()) return absl::InternalError("job found by key is gone");
          r.job = std::move(*job);
          results.push_back(std::move(r));
          continue;
        }
      }
      if (in.max_active_jobs > 0) {
        auto it = active.find(in.owner);
        if (it == active.end()) {
          // The count sees this transaction's rows, this submission's earlier jobs too.
          LF_ASSIGN_OR_RETURN(int64_t n, CountActiveJobs(txn, in.owner));
          it = active.emplace(in.owner, n).first;
        }
        if (it->second + 1 > in.max_active_jobs) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "user ", in.owner, " may have at most ", in.max_active_jobs,
              " active (queued or running) jobs (limits.max_active_jobs_per_user); this "
              "submission would make ", it->second + 1));
        }
      }
      for (const auto& [field, dir] : {std::pair<absl::string_view, const std::string*>{
                                           "checkpoint.dir", &in.spec.checkpoint().dir()},
                                       {"output.export_dir", &in.spec.output().export_dir()}}) {
        if (dir->empty()) continue;
        LF_RETURN_IF_ERROR(
            CheckJobDirFree(txn, in.field_prefix, field, *dir, in.owner, in.pending_claims));
      }
      LF_ASSIGN_OR_RETURN(int64_t id, InsertJob(txn, in, &r.job));
      if (auto it = active.find(in.owner); it != active.end()) ++it->second;
      // The view's entry: the job with its spec, queued since its creation.
      SchedulableJob queued;
      queued.job = r.job;
      *queued.job.mutable_spec() = in.spec;
      queued.queued_since = absl::FromUnixMicros(txn.NowMicros());
      queued.eligible = absl::FromUnixMicros(0);
      queued.last_preempted = absl::InfinitePast();
      queued.first_start = absl::InfinitePast();
      txn.AddQueued(id, std::move(queued));
      r.created = true;
      results.push_back(std::move(r));
    }
    return absl::OkStatus();
  };
}

namespace {

TxnFunction ChangeStateTxn(int64_t job_id, std::vector<v1::JobState> from, v1::JobState to,
                           std::string type, std::string reason, bool cancel,
                           std::shared_ptr<CancelJobResult> result) {
  return [=, from = std::move(from), type = std::move(type), reason = std::move(reason),
          result = std::move(result)](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(std::optional<v1::Job> loaded, txn.LoadJob(job_id));
    if (!loaded.has_value()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    *result = CancelJobResult{std::move(*loaded), false, ""};
    v1::Job& job = result->job;
    const bool allowed = from.empty() ? !IsTerminal(job.state())
                                      : std::find(from.begin(), from.end(), job.state()) != from.end();
    if (!allowed) {
      result->message = absl::StrCat("job ", job_id, " is already ", v1::JobState_Name(job.state()),
                                     "; nothing changed");
      if (cancel && IsTerminal(job.state())) return absl::OkStatus();
      return absl::FailedPreconditionError(result->message);
    }
    LF_RETURN_IF_ERROR(txn.Transition(&job, type, to, reason));
    if (IsTerminal(to)) {
      // ttl_after_finished counts from here (a job cancelled while QUEUED never had an
      // attempt whose end would have set it).
      LF_ASSIGN_OR_RETURN(
          auto* finish,
          txn.Statement("UPDATE jobs SET finish_us = ?2 WHERE id = ?1 AND finish_us = 0"));
      finish->Bind(1, job_id).Bind(2, txn.NowMicros());
      LF_RETURN_IF_ERROR(finish->Run());
    }
    result->changed = true;
    result->message = cancel ? "cancelled" : v1::JobState_Name(to);
    return absl::OkStatus();
  };
}

}  // namespace

TxnFunction TransitionJobTxn(int64_t job_id, std::vector<v1::JobState> from, v1::JobState to,
                             std::string type, std::string reason,
                             std::shared_ptr<CancelJobResult> result) {
  return ChangeStateTxn(job_id, std::move(from), to, std::move(type), std::move(reason),
                        /*cancel=*/false, std::move(result));
}

TxnFunction CancelJobTxn(int64_t job_id, std::string actor, std::string reason,
                         std::shared_ptr<CancelJobResult> result) {
  std::string why = reason.empty() ? absl::StrCat("cancelled by ", actor)
                                   : absl::StrCat("cancelled by ", actor, ": ", reason);
  return ChangeStateTxn(job_id, {}, v1::CANCELLED, "cancelled", std::move(why), /*cancel=*/true,
                        std::move(result));
}

}  // namespace llamafleet
