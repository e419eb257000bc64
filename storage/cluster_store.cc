#include "storage/cluster_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "storage/deleted_job_dirs.h"
#include "storage/txn_helpers.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;
using storage_internal::Exec;
using storage_internal::Query;
using storage_internal::RequireJob;

absl::Status MarkFinished(Txn& txn, int64_t job_id) {
  return Exec(txn, "UPDATE jobs SET finish_us = ?2 WHERE id = ?1",
              [&](sqlite::Statement& s) { s.Bind(1, job_id).Bind(2, txn.NowMicros()); });
}

// The job's part of an attempt's end (its columns, then its moves), as planned.
absl::Status ApplyJobPlan(Txn& txn, int64_t job_id, const AttemptEndPlan& plan, v1::Job* job) {
  const int64_t now = txn.NowMicros();
  if (plan.mark_finished) LF_RETURN_IF_ERROR(MarkFinished(txn, job_id));
  if (plan.record_preempted) {
    LF_RETURN_IF_ERROR(Exec(txn, "UPDATE jobs SET last_preempted_us = ?2 WHERE id = ?1",
                            [&](sqlite::Statement& st) { st.Bind(1, job_id).Bind(2, now); }));
  }
  if (plan.eligible_after.has_value()) {
    LF_RETURN_IF_ERROR(
        Exec(txn,
             "UPDATE jobs SET restarts = restarts + ?2, eligible_us = ?3, excluded_workers = "
             "CASE WHEN ?4 = '' THEN excluded_workers WHEN excluded_workers = '' THEN ?4 "
             "ELSE excluded_workers || ',' || ?4 END WHERE id = ?1",
             [&](sqlite::Statement& st) {
               st.Bind(1, job_id).Bind(2, int64_t{plan.count_restart ? 1 : 0});
               st.Bind(3, now + absl::ToInt64Microseconds(*plan.eligible_after));
               st.Bind(4, plan.exclude_worker);
             }));
  }
  for (const JobMove& move : plan.moves) {
    std::optional<absl::string_view> status;
    if (move.status_reason.has_value()) status = *move.status_reason;
    LF_RETURN_IF_ERROR(txn.Transition(job, move.type, move.to, move.reason, status));
  }
  return absl::OkStatus();
}

v1::AttemptState AttemptStateProto(AttemptState state) {
  switch (state) {
    case AttemptState::kActive: return v1::ATTEMPT_ACTIVE;
    case AttemptState::kSucceeded: return v1::ATTEMPT_SUCCEEDED;
    case AttemptState::kFailed: return v1::ATTEMPT_FAILED;
    case AttemptState::kStopped: return v1::ATTEMPT_STOPPED;
  }
  return v1::ATTEMPT_STATE_UNSPECIFIED;  // a value a newer schema wrote
}

}  // namespace

TxnFunction StartAttemptTxn(AttemptRecord a, std::shared_ptr<double> queued_seconds) {
  return [a = std::move(a), queued_seconds](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, a.job_id));
    if (job.state() != v1::QUEUED) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", a.job_id, " is ", v1::JobState_Name(job.state()), ", not QUEUED"));
    }
    const int64_t now = txn.NowMicros();
    LF_RETURN_IF_ERROR(
        Exec(txn,
             "INSERT INTO attempts (job_id, attempt, state, start_us, master_addr, "
             "master_port, resume_from, nodes, resize_reason) "
             "VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6, ?7, ?8)",
             [&](sqlite::Statement& st) {
               st.Bind(1, a.job_id).Bind(2, int64_t{a.attempt}).Bind(3, now);
               st.Bind(4, a.master_addr).Bind(5, int64_t{a.master_port});
               st.Bind(6, a.resume_from).Bind(7, static_cast<int64_t>(a.tasks.size()));
               st.Bind(8, a.resize_note);
             }));
    // The "placed" phase: how long the job waited since it last became QUEUED (submitted,
    // or requeued by the attempt before).
    LF_ASSIGN_OR_RETURN(auto* queued,
                        txn.Statement("SELECT COALESCE(MAX(time_us), 0) FROM job_events WHERE "
                                      "job_id = ?1 AND to_state = ?2"));
    queued->Bind(1, a.job_id).Bind(2, static_cast<int64_t>(v1::QUEUED));
    LF_ASSIGN_OR_RETURN(bool row, queued->Step());
    const int64_t queued_us = row ? queued->ColumnInt(0) : 0;
    queued->Reset();
    const double waited = queued_us > 0 && queued_us < now ? static_cast<double>(now - queued_us) / 1e6 : 0.0;
    if (queued_seconds != nullptr) *queued_seconds = waited;
    LF_RETURN_IF_ERROR(
        Exec(txn,
             "INSERT INTO attempt_phases (job_id, attempt, phase, time_us, seconds) VALUES (?1, "
             "?2, 'placed', ?3, ?4)",
             [&](sqlite::Statement& st) {
               st.Bind(1, a.job_id).Bind(2, int64_t{a.attempt}).Bind(3, now).BindDouble(4, waited);
             }));
    std::vector<std::string> placed, workers;
    for (const TaskRecord& t : a.tasks) {
      LF_RETURN_IF_ERROR(
          Exec(txn,
               "INSERT INTO tasks (task_id, job_id, attempt, node_rank, worker, ranks, state) "
               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
               [&](sqlite::Statement& st) {
                 st.Bind(1, t.task_id).Bind(2, a.job_id).Bind(3, int64_t{a.attempt});
                 st.Bind(4, int64_t{t.node_rank}).Bind(5, t.worker).Bind(6, int64_t{t.ranks});
                 st.Bind(7, static_cast<int64_t>(v1::TASK_STARTING));
               }));
      placed.push_back(absl::StrCat(t.worker, " (node ", t.node_rank, ")"));
      workers.push_back(t.worker);
    }
    LF_RETURN_IF_ERROR(Exec(
        txn,
        "UPDATE jobs SET attempts = ?2, workers = ?3, "
        "first_start_us = CASE WHEN first_start_us = 0 THEN ?4 ELSE first_start_us END "
        "WHERE id = ?1",
        [&](sqlite::Statement& st) {
          st.Bind(1, a.job_id).Bind(2, int64_t{a.attempt}).Bind(3, absl::StrJoin(workers, ","));
          st.Bind(4, now);
        }));
    std::string reason = absl::StrCat(a.resize_note.empty() ? "" : absl::StrCat(a.resize_note, "; "), "attempt ",
                                      a.attempt, " placed on ", absl::StrJoin(placed, ", "));
    if (!a.resume_from.empty()) absl::StrAppend(&reason, "; resuming from ", a.resume_from);
    return txn.Transition(&job, "scheduled", v1::SCHEDULED, reason, "starting ranks");
  };
}

TxnFunction AttemptRunningTxn(int64_t job_id, int attempt) {
  return [=](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, job_id));
    if (job.state() != v1::SCHEDULED || job.attempts() != attempt) return absl::OkStatus();
    LF_RETURN_IF_ERROR(
        Exec(txn,
             "INSERT OR IGNORE INTO attempt_phases (job_id, attempt, phase, time_us, seconds) "
             "SELECT job_id, attempt, 'trainers_started', ?3, MAX(0, ?3 - start_us) / 1e6 "
             "FROM attempts WHERE job_id = ?1 AND attempt = ?2",
             [&](sqlite::Statement& st) {
               st.Bind(1, job_id).Bind(2, int64_t{attempt}).Bind(3, txn.NowMicros());
             }));
    return txn.Transition(&job, "running", v1::RUNNING,
                          absl::StrCat("attempt ", attempt, ": every rank started"), "training");
  };
}

TxnFunction RecordStartupPhaseTxn(int64_t job_id, int attempt, v1::AttemptPhase phase, std::string reason) {
  return [=](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, job_id));
    if (job.attempts() != attempt || (job.state() != v1::SCHEDULED && job.state() != v1::RUNNING)) {
      return absl::OkStatus();
    }
    LF_RETURN_IF_ERROR(Exec(
        txn,
        "INSERT OR IGNORE INTO attempt_phases (job_id, attempt, phase, time_us, seconds, detail) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        [&](sqlite::Statement& st) {
          st.Bind(1, job_id).Bind(2, int64_t{attempt}).Bind(3, phase.name());
          st.Bind(4, phase.has_time() ? TimeUtil::TimestampToMicroseconds(phase.time())
                                      : txn.NowMicros());
          st.BindDouble(5, phase.seconds()).Bind(6, phase.detail());
        }));
    if (txn.Changes() == 0) return absl::OkStatus();  // a repeat: the first report stands
    const std::string status = job.status_reason();
    return txn.Transition(&job, "startup", job.state(), reason, status);
  };
}

TxnFunction RecordAttemptNoteTxn(int64_t job_id, int attempt, std::string type, std::string reason) {
  return [=](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, job_id));
    if (job.attempts() != attempt || (job.state() != v1::SCHEDULED && job.state() != v1::RUNNING)) {
      return absl::OkStatus();
    }
    const std::string status = job.status_reason();
    return txn.Transition(&job, type, job.state(), reason, status);
  };
}

TxnFunction RecordJobNoteTxn(int64_t job_id, std::string type, std::string reason) {
  return [=](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, job_id));
    const std::string status = job.status_reason();
    return txn.Transition(&job, type, job.state(), reason, status);
  };
}

TxnFunction SetTaskStateTxn(const std::string& task_id, const v1::TaskStatus& status) {
  return [task_id, status](Txn& txn) -> absl::Status {
    return Exec(txn, "UPDATE tasks SET state = ?2, message = ?3, exits = ?4 WHERE task_id = ?1",
                [&](sqlite::Statement& st) {
                  st.Bind(1, task_id).Bind(2, static_cast<int64_t>(status.state()));
                  st.Bind(3, status.message()).BindBlob(4, status.SerializeAsString());
                });
  };
}

TxnFunction EndAttemptTxn(AttemptEnd end) {
  return [end = std::move(end)](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, end.job_id));
    const AttemptEndPlan plan = PlanAttemptEnd(
        {end.attempt, end.outcome, end.reason, end.excluded_worker}, job, job.spec().run_policy());
    LF_ASSIGN_OR_RETURN(
        auto* update,
        txn.Statement(
            "UPDATE attempts SET state = ?3, end_us = ?4, failure_class = ?5, reason = ?6 "
            "WHERE job_id = ?1 AND attempt = ?2 AND state = 0"));
    update->Bind(1, end.job_id).Bind(2, int64_t{end.attempt});
    update->Bind(3, static_cast<int64_t>(plan.attempt_state));
    update->Bind(4, txn.NowMicros()).Bind(5, plan.failure_class).Bind(6, end.reason);
    LF_RETURN_IF_ERROR(update->Run());
    if (txn.Changes() > 0) {  // its first end: what it used, recorded once
      LF_RETURN_IF_ERROR(RecordAttemptUsage(txn, end.job_id, end.attempt, end.pricing));
    }
    return ApplyJobPlan(txn, end.job_id, plan, &job);
  };
}

TxnFunction FailQueuedJobTxn(int64_t job_id, std::string reason) {
  return [job_id, reason = std::move(reason)](Txn& txn) -> absl::Status {
    absl::StatusOr<v1::Job> job = RequireJob(txn, job_id);
    if (!job.ok() || job->state() != v1::QUEUED) return absl::OkStatus();
    LF_RETURN_IF_ERROR(MarkFinished(txn, job_id));
    return txn.Transition(&*job, "failed", v1::FAILED, reason);
  };
}

TxnFunction BeginPreemptionTxn(int64_t job_id, std::string reason) {
  return [job_id, reason = std::move(reason)](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, job_id));
    if (job.state() != v1::RUNNING && job.state() != v1::SCHEDULED) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is not running"));
    }
    return txn.Transition(&job, "preempting", v1::PREEMPTING, reason,
                          "checkpointing and stopping for a higher-priority job");
  };
}

TxnFunction RecordCheckpointTxn(int64_t job_id, int attempt, const v1::CheckpointReport& r) {
  return [=](Txn& txn) -> absl::Status {
    return Exec(txn,
                "INSERT OR IGNORE INTO checkpoints (job_id, step, attempt, path, bytes, "
                "manifest_sha256, loss, time_us, eval_loss) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                [&](sqlite::Statement& st) {
                  st.Bind(1, job_id).Bind(2, r.step()).Bind(3, int64_t{attempt});
                  st.Bind(4, r.path()).Bind(5, r.bytes()).Bind(6, r.manifest_sha256());
                  st.BindDouble(7, r.loss()).Bind(8, txn.NowMicros());
                  if (r.has_eval_loss()) {
                    st.BindDouble(9, r.eval_loss());
                  } else {
                    st.BindNull(9);
                  }
                });
  };
}

TxnFunction ForgetCheckpointsTxn(int64_t job_id, std::vector<int64_t> steps) {
  return [=](Txn& txn) -> absl::Status {
    for (int64_t step : steps) {
      LF_RETURN_IF_ERROR(Exec(txn, "DELETE FROM checkpoints WHERE job_id = ?1 AND step = ?2",
                              [&](sqlite::Statement& st) { st.Bind(1, job_id).Bind(2, step); }));
    }
    return absl::OkStatus();
  };
}

TxnFunction UpsertWorkerTxn(const std::string& name, const v1::Inventory& inventory,
                            v1::WorkerState state) {
  return [=](Txn& txn) -> absl::Status {
    return Exec(txn,
                "INSERT INTO workers (name, inventory, state, registered_us, last_seen_us) "
                "VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT(name) DO UPDATE SET "
                "inventory = excluded.inventory, state = excluded.state, "
                "last_seen_us = excluded.last_seen_us",
                [&](sqlite::Statement& st) {
                  st.Bind(1, name).BindBlob(2, inventory.SerializeAsString());
                  st.Bind(3, static_cast<int64_t>(state)).Bind(4, txn.NowMicros());
                });
  };
}

TxnFunction SetWorkerStateTxn(const std::string& name, v1::WorkerState state) {
  return [=](Txn& txn) -> absl::Status {
    return Exec(txn, "UPDATE workers SET state = ?2, last_seen_us = ?3 WHERE name = ?1",
                [&](sqlite::Statement& st) {
                  st.Bind(1, name).Bind(2, static_cast<int64_t>(state)).Bind(3, txn.NowMicros());
                });
  };
}

TxnFunction DeleteFinishedJobTxn(int64_t job_id) {
  return [=](Txn& txn) -> absl::Status {
    LF_ASSIGN_OR_RETURN(v1::Job job, RequireJob(txn, job_id));
    if (!IsTerminal(job.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job.state()),
                       "; cancel it first (llamafleet cancel ", job_id, ")"));
    }
    LF_RETURN_IF_ERROR(RecordDeletedJobDirs(txn, job_id));
    return Exec(txn, "DELETE FROM jobs WHERE id = ?1", [&](sqlite::Statement& st) { st.Bind(1, job_id); });
  };
}

TxnFunction DeleteJobTxn(int64_t job_id) {
  return [=](Txn& txn) -> absl::Status {
    LF_RETURN_IF_ERROR(RecordDeletedJobDirs(txn, job_id));
    return Exec(txn, "DELETE FROM jobs WHERE id = ?1",
                [&](sqlite::Statement& st) { st.Bind(1, job_id); });
  };
}

absl::StatusOr<std::vector<AttemptRecord>> LoadActiveAttempts(JobStore& store) {
  std::vector<AttemptRecord> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
    LF_RETURN_IF_ERROR(Query(
        conn,
        "SELECT job_id, attempt, start_us, master_addr, master_port, resume_from FROM attempts "
        "WHERE state = 0 ORDER BY job_id",
        [](sqlite::Statement&) {},
        [&](sqlite::Statement& row) {
          AttemptRecord a;
          a.job_id = row.ColumnInt(0);
          a.attempt = static_cast<int>(row.ColumnInt(1));
          a.started = absl::FromUnixMicros(row.ColumnInt(2));
          a.master_addr = row.ColumnText(3);
          a.master_port = static_cast<int>(row.ColumnInt(4));
          a.resume_from = row.ColumnText(5);
          out.push_back(std::move(a));
          return absl::OkStatus();
        }));
    for (AttemptRecord& a : out) {
      LF_RETURN_IF_ERROR(Query(
          conn,
          "SELECT task_id, node_rank, worker, ranks, state FROM tasks WHERE job_id = ?1 AND "
          "attempt = ?2 ORDER BY node_rank",
          [&](sqlite::Statement& st) { st.Bind(1, a.job_id).Bind(2, int64_t{a.attempt}); },
          [&](sqlite::Statement& row) {
            TaskRecord t;
            t.task_id = row.ColumnText(0);
            t.node_rank = static_cast<int>(row.ColumnInt(1));
            t.worker = row.ColumnText(2);
            t.ranks = static_cast<int>(row.ColumnInt(3));
            t.state = static_cast<v1::TaskState>(row.ColumnInt(4));
            a.tasks.push_back(std::move(t));
            return absl::OkStatus();
          }));
    }
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<SchedulableJob>> LoadJobsInStates(
    JobStore& store, const std::vector<v1::JobState>& states) {
  std::vector<std::string> codes;
  for (v1::JobState s : states) codes.push_back(absl::StrCat(static_cast<int>(s)));
  std::vector<SchedulableJob> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) {
    return Query(
        conn,
        absl::StrCat("SELECT ", SchedulableJobColumns(), " FROM jobs WHERE state IN (",
                     absl::StrJoin(codes, ","), ") ORDER BY id"),
        [](sqlite::Statement&) {},
        [&](sqlite::Statement& row) -> absl::Status {
          LF_ASSIGN_OR_RETURN(SchedulableJob j, SchedulableJobFromRow(row));
          out.push_back(std::move(j));
          return absl::OkStatus();
        });
  }));
  return out;
}

absl::StatusOr<std::vector<v1::Checkpoint>> ListCheckpoints(JobStore& store, int64_t job_id) {
  std::vector<v1::Checkpoint> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) {
    return Query(
        conn,
        "SELECT step, attempt, path, bytes, manifest_sha256, loss, time_us, eval_loss FROM "
        "checkpoints "
        "WHERE job_id = ?1 ORDER BY step DESC",
        [&](sqlite::Statement& st) { st.Bind(1, job_id); },
        [&](sqlite::Statement& row) {
          v1::Checkpoint c;
          c.set_job_id(JobIdString(job_id));
          c.set_step(row.ColumnInt(0));
          c.set_attempt(static_cast<int32_t>(row.ColumnInt(1)));
          c.set_path(row.ColumnText(2));
          c.set_bytes(row.ColumnInt(3));
          c.set_manifest_sha256(row.ColumnText(4));
          c.set_loss(row.ColumnDouble(5));
          *c.mutable_time() = TimeUtil::MicrosecondsToTimestamp(row.ColumnInt(6));
          if (!row.ColumnIsNull(7)) c.set_eval_loss(row.ColumnDouble(7));
          out.push_back(std::move(c));
          return absl::OkStatus();
        });
  }));
  return out;
}

absl::StatusOr<std::vector<v1::Attempt>> ListAttempts(JobStore& store, int64_t job_id) {
  std::vector<v1::Attempt> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) -> absl::Status {
    std::map<int, size_t> index;  // attempt number → position in `out`
    LF_RETURN_IF_ERROR(Query(
        conn,
        "SELECT attempt, state, start_us, end_us, resume_from, failure_class, reason, nodes, "
        "resize_reason, gpu_seconds, cost FROM attempts WHERE job_id = ?1 ORDER BY attempt DESC",
        [&](sqlite::Statement& st) { st.Bind(1, job_id); },
        [&](sqlite::Statement& row) {
          v1::Attempt a;
          a.set_job_id(JobIdString(job_id));
          a.set_attempt(static_cast<int32_t>(row.ColumnInt(0)));
          a.set_state(AttemptStateProto(static_cast<AttemptState>(row.ColumnInt(1))));
          *a.mutable_start_time() = TimeUtil::MicrosecondsToTimestamp(row.ColumnInt(2));
          if (const int64_t end_us = row.ColumnInt(3); end_us != 0) {
            *a.mutable_end_time() = TimeUtil::MicrosecondsToTimestamp(end_us);
          }
          a.set_resume_from(row.ColumnText(4));
          a.set_failure_class(row.ColumnText(5));
          a.set_reason(row.ColumnText(6));
          a.set_nodes(static_cast<int32_t>(row.ColumnInt(7)));
          a.set_resize_reason(row.ColumnText(8));
          a.set_gpu_seconds(row.ColumnDouble(9));
          if (!row.ColumnIsNull(10)) a.set_cost(row.ColumnDouble(10));
          index[a.attempt()] = out.size();
          out.push_back(std::move(a));
          return absl::OkStatus();
        }));
    // One query for every attempt's tasks (tasks_by_attempt covers it), one for their phases.
    LF_RETURN_IF_ERROR(Query(
        conn,
        "SELECT attempt, task_id, node_rank, worker, ranks, state, message FROM tasks "
        "WHERE job_id = ?1 ORDER BY attempt, node_rank",
        [&](sqlite::Statement& st) { st.Bind(1, job_id); },
        [&](sqlite::Statement& row) {
          auto it = index.find(static_cast<int>(row.ColumnInt(0)));
          if (it == index.end()) return absl::OkStatus();  // cascade keeps this from happening
          v1::AttemptTask* t = out[it->second].add_tasks();
          t->set_task_id(row.ColumnText(1));
          t->set_node_rank(static_cast<int32_t>(row.ColumnInt(2)));
          t->set_worker(row.ColumnText(3));
          t->set_ranks(static_cast<int32_t>(row.ColumnInt(4)));
          t->set_state(static_cast<v1::TaskState>(row.ColumnInt(5)));
          t->set_message(row.ColumnText(6));
          return absl::OkStatus();
        }));
    return Query(
        conn,
        "SELECT attempt, phase, time_us, seconds, detail FROM attempt_phases "
        "WHERE job_id = ?1 ORDER BY attempt, time_us, rowid",
        [&](sqlite::Statement& st) { st.Bind(1, job_id); },
        [&](sqlite::Statement& row) {
          auto it = index.find(static_cast<int>(row.ColumnInt(0)));
          if (it == index.end()) return absl::OkStatus();
          v1::AttemptPhase* p = out[it->second].add_phases();
          p->set_name(row.ColumnText(1));
          *p->mutable_time() = TimeUtil::MicrosecondsToTimestamp(row.ColumnInt(2));
          p->set_seconds(row.ColumnDouble(3));
          p->set_detail(row.ColumnText(4));
          return absl::OkStatus();
        });
  }));
  return out;
}

absl::StatusOr<std::map<std::string, int64_t>> CountAttemptFailures(JobStore& store) {
  std::map<std::string, int64_t> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) {
    // "> ''" rather than "!= ''": a range, so an index on failure_class skips successes.
    return Query(
        conn,
        "SELECT failure_class, COUNT(*) FROM attempts WHERE failure_class > '' "
        "GROUP BY failure_class",
        [](sqlite::Statement&) {},
        [&](sqlite::Statement& row) {
          out[row.ColumnText(0)] = row.ColumnInt(1);
          return absl::OkStatus();
        });
  }));
  return out;
}

absl::StatusOr<std::vector<int64_t>> ExpiredJobs(JobStore& store, absl::Time now) {
  std::vector<int64_t> out;
  LF_RETURN_IF_ERROR(store.Read([&](sqlite::Connection& conn) {
    return Query(
        conn, "SELECT id, spec, finish_us FROM jobs WHERE finish_us > 0", [](sqlite::Statement&) {},
        [&](sqlite::Statement& row) {
          v1::JobSpec spec;
          (void)spec.ParseFromString(row.ColumnText(1));
          const int64_t ttl = spec.run_policy().ttl_after_finished_seconds();
          if (ttl > 0 && absl::FromUnixMicros(row.ColumnInt(2)) + absl::Seconds(ttl) <= now) {
            out.push_back(row.ColumnInt(0));
          }
          return absl::OkStatus();
        });
  }));
  return out;
}

}  // namespace llamafleet
