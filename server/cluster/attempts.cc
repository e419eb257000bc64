// The ClusterManager's attempts: how one starts from a placement, what task reports,
// metrics and start-up phases do to it, how it ends, stops its gang and releases its
// slots. Strand-only.
#include "server/cluster/cluster_manager.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/startup_phases.h"
#include "google/protobuf/util/time_util.h"
#include "server/cluster/node_loss.h"
#include "server/metrics.h"
#include "storage/metrics_store.h"
#include "spdlog/spdlog.h"

namespace llamafleet {
namespace {

using google::protobuf::util::TimeUtil;

// A worker's report of a start-up phase's detail or a dataset path: at most this many bytes.
constexpr size_t kMaxPhaseDetail = 256;
// Tokenizing progress becomes at most one event per attempt this often (workers relay one
// every 5 s; this bounds a worker that does not).
constexpr absl::Duration kTokenizingEventInterval = absl::Seconds(4);

// A worker's text: printable ASCII only, at most `max` bytes, before it goes into an event.
std::string CleanText(const std::string& s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

// A duration a worker reports for a start-up phase: finite, not negative, under a year.
bool PlausibleSeconds(double s) { return std::isfinite(s) && s >= 0 && s < 365.0 * 86400; }

// An elastic gang placed on another size than its last attempt (or than `nodes` at its
// first start): "resized 3 → 2 nodes: worker w3 lost". "" when the size did not change.
std::string ResizeNote(const SchedulableJob& j, const std::vector<sched::Allocation>& placed,
                       const std::set<std::string>& gone) {
  const int now = static_cast<int>(placed.size());
  const int before = j.job.workers_size() > 0 ? j.job.workers_size() : j.job.spec().resources().nodes();
  if (now == before) return "";
  if (j.job.workers_size() == 0) {
    return absl::StrCat("elastic: started on ", now, " of ", before, " nodes (min_nodes ",
                        j.job.spec().resources().min_nodes(), ")");
  }
  std::vector<std::string> lost;
  for (const std::string& w : j.job.workers()) {
    if (j.excluded_workers.count(w) || gone.count(w)) lost.push_back(w);
  }
  std::string note = absl::StrCat("resized ", before, " \u2192 ", now, " nodes");
  if (now > before) {  // grown back (ClusterManager::MaybeGrow): name the workers it gained
    std::vector<std::string> added;
    for (const sched::Allocation& a : placed) {
      if (std::find(j.job.workers().begin(), j.job.workers().end(), a.worker_id) == j.job.workers().end()) {
        added.push_back(a.worker_id);
      }
    }
    absl::StrAppend(&note, ": capacity returned", added.empty() ? "" : absl::StrCat(" (", absl::StrJoin(added, ", "), ")"));
  } else if (!lost.empty()) {
    absl::StrAppend(&note, ": ", lost.size() == 1 ? "worker " : "workers ", absl::StrJoin(lost, ", "), " lost");
  } else {
    absl::StrAppend(&note, ": only ", now, " matching workers free");
  }
  return note;
}

}  // namespace

std::pair<TxnFunction, std::function<void(absl::Status)>> ClusterManager::StartAttempt(
    const SchedulableJob& j, const sched::Placement& p, const std::set<std::string>& gone,
    absl::Time now) {
  ActiveAttempt a;
  a.spec = j.job.spec();
  if (a.spec.checkpoint().dir().empty() && !options_.checkpoint_root.empty()) {
    a.spec.mutable_checkpoint()->set_dir(absl::StrCat(options_.checkpoint_root, "/", p.job_id));
  }
  a.owner = j.job.owner();
  a.record.job_id = p.job_id;
  a.record.attempt = j.job.attempts() + 1;
  a.record.started = now;
  a.master_port = ports_.Allocate();
  a.record.master_port = a.master_port;
  a.record.master_addr = workers_.Address(p.allocations[0].worker_id);
  a.last_preempted = j.last_preempted;
  // Resume from the recorded checkpoints (restart), newest first: the trainer takes the
  // newest that still verifies against its recorded manifest hash and falls back to
  // older ones; resume_from names the newest for older trainers and the record.
  absl::StatusOr<std::vector<v1::Checkpoint>> ckpts = ListCheckpoints(*store_, p.job_id);
  if (ckpts.ok() && !ckpts->empty() &&
      (a.record.attempt > 1 || a.spec.checkpoint().resume() == "latest")) {
    a.record.resume_from = (*ckpts)[0].path();
    a.resume_candidates = *ckpts;
  } else if (a.spec.checkpoint().resume() != "" && a.spec.checkpoint().resume() != "latest") {
    a.record.resume_from = a.spec.checkpoint().resume();
  }
  a.record.resize_note = ResizeNote(j, p.allocations, gone);
  for (size_t rank = 0; rank < p.allocations.size(); ++rank) {
    TaskRecord t;
    t.task_id = absl::StrCat(p.job_id, "-", a.record.attempt, "-", rank);
    t.node_rank = static_cast<int>(rank);
    t.worker = p.allocations[rank].worker_id;
    t.ranks = p.allocations[rank].gpus;
    a.task_states[t.task_id] = v1::TASK_STARTING;
    a.record.tasks.push_back(t);
  }
  a.last_progress = now;
  const int64_t job_id = p.job_id;
  // Hold the resources now, so the next pass cannot place on them twice; tell the
  // workers once the attempt is durable.
  auto queued = std::make_shared<double>(0.0);  // set by the write, read after its commit
  std::pair<TxnFunction, std::function<void(absl::Status)>> start(
      StartAttemptTxn(a.record, queued), [this, job_id, queued](absl::Status s) {
    Post([this, job_id, queued, s] {
      auto it = attempts_.find(job_id);
      if (it == attempts_.end()) return;
      if (!s.ok()) {
        spdlog::info("job {}: not started: {}", job_id, s.ToString());
        ports_.Release(it->second.master_port);
        attempts_.erase(it);
        pass_.WantNow();
        publish_assignments_ = true;
        return;
      }
      it->second.committed = true;
      if (options_.metrics != nullptr) options_.metrics->RecordStartupPhase("placed", *queued);
      SendAssignments(job_id);
      // A worker drained while the start was being written: the attempt moves elsewhere.
      for (const TaskRecord& t : it->second.record.tasks) {
        if (const WorkerDrainRecord* d = workers_.DrainOf(t.worker); d != nullptr) {
          ApplyDrain(*d);
          break;
        }
      }
    });
  });
  attempts_[job_id] = std::move(a);
  return start;
}

void ClusterManager::Preempt(const sched::Preemption& p) {
  auto it = attempts_.find(p.victim_job_id);
  if (it == attempts_.end() || it->second.stopping) return;
  ActiveAttempt& victim = it->second;
  victim.stopping = true;  // counts as freeing from now on
  const std::string reason = absl::StrCat("preempted by job ", p.for_job_id, " (priority)");
  const int64_t victim_id = p.victim_job_id;
  const int victim_attempt = victim.record.attempt;
  Write(BeginPreemptionTxn(victim_id, reason), [this, victim_id, victim_attempt, reason](absl::Status s) {
    Post([this, victim_id, victim_attempt, reason, s] {
      auto it = attempts_.find(victim_id);
      if (it == attempts_.end() || it->second.record.attempt != victim_attempt) return;
      if (!s.ok()) {
        it->second.stopping = false;
        return;
      }
      StopTasks(it->second, options_.preemption_grace, reason);
      EndAttempt(it->second, AttemptOutcome::kPreempted, reason);
    });
  });
}

ClusterManager::ActiveAttempt* ClusterManager::AttemptOfTask(const std::string& task_id) {
  // Task ids are "<job>-<attempt>-<node_rank>".
  int64_t job_id;
  if (!absl::SimpleAtoi(task_id.substr(0, task_id.find('-')), &job_id)) return nullptr;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end() || !it->second.task_states.count(task_id)) return nullptr;
  return &it->second;
}

ClusterManager::ActiveAttempt* ClusterManager::BoundAttempt(const std::string& worker,
                                                           const std::string& task_id,
                                                           const char* what) {
  ActiveAttempt* a = AttemptOfTask(task_id);
  if (a == nullptr) return nullptr;  // an old attempt's late report
  const std::string assigned = a->WorkerOf(task_id);
  if (assigned != worker) {
    // A worker is trusted only for the tasks assigned to it.
    spdlog::warn("ignored {} for task {} from worker {}: the task is assigned to {}", what,
                 task_id, worker, assigned);
    return nullptr;
  }
  return a;
}

void ClusterManager::HandleTaskStatus(const std::string& worker, const v1::TaskStatus& status) {
  ActiveAttempt* a = BoundAttempt(worker, status.task_id(), "a task status");
  if (a == nullptr) return;
  const TaskReportEffect effect = a->OnTaskStatus(worker, status);
  if (!effect.applied) return;  // already final (abandoned, then a late report)
  Write(SetTaskStateTxn(status.task_id(), status), [](absl::Status) {});
  const int64_t job_id = a->record.job_id;
  if (effect.record_running) {
    a->last_progress = options_.clock->Now();
    a->trainers_started = a->last_progress;
    Write(AttemptRunningTxn(job_id, a->record.attempt), [](absl::Status) {});
    if (options_.metrics != nullptr) {
      options_.metrics->RecordStartupPhase("trainers_started",
                                           absl::ToDoubleSeconds(a->last_progress - a->record.started));
    }
  }
  if (MayBePeerLoss(*a, worker, effect)) {
    HoldOrBlame(*a, worker, effect);
  } else if (effect.end.has_value()) {
    a->held_failure.reset();  // a later, more telling outcome (permanent, success) wins
    EndAttempt(*a, *effect.end, effect.reason, effect.excluded_worker);
  }
  if (IsTerminalTask(status.state())) publish_workers_ = true;  // its slots are free again
  MaybeRelease(job_id);
}

void ClusterManager::HandleMetrics(const std::string& worker, const v1::TrainMetrics& m) {
  ActiveAttempt* a = BoundAttempt(worker, m.task_id(), "metrics");
  if (a == nullptr) return;
  a->OnStep(m.step(), m.total_steps(), options_.clock->Now());
  v1::JobMetricsPoint p;
  p.set_step(m.step());
  p.set_total_steps(m.total_steps());
  p.set_loss(m.loss());
  p.set_lr(m.lr());
  p.set_grad_norm(m.grad_norm());
  p.set_tokens_per_second(m.tokens_per_second());
  p.set_tflops(m.tflops());
  p.set_mfu(m.mfu());
  p.set_peak_memory_bytes(m.peak_memory_bytes());
  // DPO's rewards: finite values only (accuracy is a fraction).
  if (m.has_dpo()) {
    const v1::DpoRewards& d = m.dpo();
    if (std::isfinite(d.chosen()) && std::isfinite(d.rejected()) && std::isfinite(d.margin()) &&
        d.accuracy() >= 0 && d.accuracy() <= 1) {
      *p.mutable_dpo() = d;
    } else {
      spdlog::warn("ignored DPO rewards for task {} from worker {}: out of range", m.task_id(),
                   worker);
    }
  }
  *p.mutable_time() = m.has_time() ? m.time() : TimeUtil::GetCurrentTime();
  p.set_attempt(a->record.attempt);
  Write(RecordMetricsTxn(a->record.job_id, p), [](absl::Status) {});
}

void ClusterManager::HandleEval(const std::string& worker, const v1::EvalResult& e) {
  ActiveAttempt* a = BoundAttempt(worker, e.task_id(), "an evaluation");
  if (a == nullptr) return;
  if (!std::isfinite(e.loss()) || !std::isfinite(e.perplexity()) || e.loss() < 0 || e.step() < 0) {
    spdlog::warn("ignored an evaluation for task {} from worker {}: loss {}, step {}", e.task_id(), worker, e.loss(),
                 e.step());
    return;
  }
  // The set must be one the spec names (or "" for data.eval_path's); the first is the one
  // the job's latest and best eval loss follow.
  const v1::DataSpec& data = a->spec.data();
  bool known = e.set().empty() && data.eval_size() == 0;
  for (const v1::EvalSet& s : data.eval()) known = known || s.name() == e.set();
  if (!known) {
    spdlog::warn("ignored an evaluation for task {} from worker {}: eval set '{}' is not the job's",
                 e.task_id(), worker, CleanText(e.set(), 64));
    return;
  }
  const bool primary = data.eval_size() == 0 || data.eval(0).name() == e.set();
  Write(RecordEvalTxn(a->record.job_id, a->record.attempt, e.step(), e.loss(), e.perplexity(),
                      e.set(), primary),
        [](absl::Status) {});
}

void ClusterManager::HandleEarlyStop(const std::string& worker, const v1::EarlyStop& e) {
  ActiveAttempt* a = BoundAttempt(worker, e.task_id(), "an early stop");
  if (a == nullptr) return;
  // The reason becomes the job's when every rank has exited 0; the event says it now.
  a->stopped_early = e.reason().substr(0, 512);
  if (a->stopped_early.empty()) a->stopped_early = absl::StrCat("stopped early at step ", e.step());
  Write(RecordAttemptNoteTxn(a->record.job_id, a->record.attempt, "stopped_early", a->stopped_early),
        [](absl::Status) {});
}

void ClusterManager::HandlePhase(const std::string& worker, const v1::StartupPhase& phase) {
  ActiveAttempt* a = BoundAttempt(worker, phase.task_id(), "a start-up phase");
  if (a == nullptr) return;
  // A worker's report: only the trainer's own phase names, with times a start can take.
  if (!IsTrainerStartupPhase(phase.phase()) || !PlausibleSeconds(phase.seconds()) ||
      !PlausibleSeconds(phase.since_start())) {
    spdlog::warn("ignored a start-up phase for task {} from worker {}: '{}' in {} s", phase.task_id(),
                 worker, CleanText(phase.phase(), 64), phase.seconds());
    return;
  }
  // Each phase once per attempt: the first report stands (also in the store).
  if (!a->phases_reported.insert(phase.phase()).second) return;
  v1::AttemptPhase record;
  record.set_name(phase.phase());
  // When it was done: the trainers' start plus the trainer's own time since it started
  // (rank 0 reports its first phases together, once it has printed "started"), never after
  // the report arrived.
  const absl::Time now = options_.clock->Now();
  const absl::Time done =
      a->trainers_started == absl::InfinitePast()
          ? now
          : std::clamp(a->trainers_started + absl::Seconds(phase.since_start()), a->trainers_started, now);
  *record.mutable_time() = TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(done));
  record.set_seconds(phase.seconds());
  record.set_detail(CleanText(phase.detail(), kMaxPhaseDetail));
  // Rank 0 mapped a token cache entry that another rank of this attempt had just built
  // (its tokenizing event came first): the data was tokenized for this attempt.
  if (phase.phase() == "data_ready" && record.detail() == "token cache hit" && !a->tokenized_paths.empty()) {
    record.set_detail("tokenized by another rank");
  }
  std::string reason = absl::StrFormat("attempt %d start-up: %s in %.2f s (%.2f s since the trainer started)",
                                       a->record.attempt, phase.phase(), phase.seconds(), phase.since_start());
  if (!record.detail().empty()) absl::StrAppend(&reason, ", ", record.detail());
  const int64_t job_id = a->record.job_id;
  const int attempt = a->record.attempt;
  Write(RecordStartupPhaseTxn(job_id, attempt, std::move(record), reason), [](absl::Status) {});
  if (options_.metrics != nullptr) options_.metrics->RecordStartupPhase(phase.phase(), phase.seconds());
}

void ClusterManager::HandleTokenizing(const std::string& worker, const v1::TokenizingProgress& p) {
  ActiveAttempt* a = BoundAttempt(worker, p.task_id(), "tokenizing progress");
  if (a == nullptr || p.total_bytes() <= 0 || p.done_bytes() < 0 || p.done_bytes() > p.total_bytes()) return;
  // At most one event per kTokenizingEventInterval per attempt, and the one that says a
  // dataset's build finished (for a few datasets at most: a train and an eval file).
  const absl::Time now = options_.clock->Now();
  const std::string path = CleanText(p.path(), kMaxPhaseDetail);
  const bool finished = p.done_bytes() == p.total_bytes();
  const bool due = now - a->last_tokenizing_event >= kTokenizingEventInterval;
  const bool first_finish = finished && a->tokenized_paths.size() < 4 && !a->tokenized_paths.count(path);
  if (!due && !first_finish) return;
  a->last_tokenizing_event = now;
  if (finished && a->tokenized_paths.size() < 4) a->tokenized_paths.insert(path);
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const double done = static_cast<double>(p.done_bytes()), total = static_cast<double>(p.total_bytes());
  const double unit = total >= 1e9 ? 1e9 : total >= 1e6 ? 1e6 : 1e3;
  const std::string reason =
      absl::StrFormat("attempt %d: tokenizing %s %.0f%% (%.1f of %.1f %s)", a->record.attempt, name,
                      100.0 * done / total, done / unit, total / unit, unit == 1e9 ? "GB" : unit == 1e6 ? "MB" : "kB");
  Write(RecordAttemptNoteTxn(a->record.job_id, a->record.attempt, "tokenizing", reason), [](absl::Status) {});
}

void ClusterManager::HandleCancelled(const v1::JobEvent& e) {
  int64_t job_id;
  if (!absl::SimpleAtoi(e.job_id(), &job_id)) return;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  // The job is already CANCELLED in the database; close the attempt and stop its gang.
  EndAttempt(it->second, AttemptOutcome::kStopped, e.reason());
}

void ClusterManager::EndAttempt(ActiveAttempt& a, AttemptOutcome outcome,
                                const std::string& reason, const std::string& excluded_worker) {
  if (a.ended) return;
  a.ended = true;
  spdlog::info("job {} attempt {} ends: {}", a.record.job_id, a.record.attempt, reason);
  AttemptEnd end;
  end.job_id = a.record.job_id;
  end.attempt = a.record.attempt;
  end.outcome = outcome;
  end.reason = reason;
  end.excluded_worker = excluded_worker;
  end.pricing = options_.pricing;
  const int64_t job_id = a.record.job_id;
  const int attempt = a.record.attempt;
  // Durable first; the gang is stopped once the outcome is committed.
  Write(EndAttemptTxn(std::move(end)), [this, job_id, attempt, reason](absl::Status s) {
    if (!s.ok()) spdlog::error("job {}: cannot record the end of its attempt: {}", job_id, s.ToString());
    Post([this, job_id, attempt, reason] {
      auto it = attempts_.find(job_id);
      // The commit requeued the job: by now this attempt may be released and the next one
      // placed under the same job id, which must not be stopped for its predecessor.
      if (it == attempts_.end() || it->second.record.attempt != attempt) return;
      StopTasks(it->second, options_.cancel_grace, reason);
      MaybeRelease(job_id);
      pass_.CapacityFreed(job_id);
    });
  });
}

void ClusterManager::StopTasks(ActiveAttempt& a, absl::Duration grace, const std::string& reason) {
  a.BeginStopping(options_.clock->Now(), grace, options_.stop_report_slack);
  for (const TaskRecord& t : a.record.tasks) {
    if (IsTerminalTask(a.task_states[t.task_id])) continue;
    v1::CoordinatorMessage m;
    m.mutable_cancel()->set_task_id(t.task_id);
    m.mutable_cancel()->set_grace_period_ms(absl::ToInt64Milliseconds(grace));
    m.mutable_cancel()->set_reason(reason);
    workers_.Send(t.worker, std::move(m));
  }
}

void ClusterManager::MaybeRelease(int64_t job_id) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  ActiveAttempt& a = it->second;
  if (!a.ended) return;
  // A lost worker's tasks are gone with it.
  if (!a.AllTasksDone([this](const std::string& worker) { return workers_.IsLost(worker); })) {
    return;
  }
  const int attempt = a.record.attempt;
  // Its last log lines may still be on their way (logs do not pass through the loop):
  // the binding outlives the attempt for a while.
  for (const TaskRecord& t : a.record.tasks) {
    recently_released_.emplace_back(t.task_id, t.worker);
    if (recently_released_.size() > 4096) recently_released_.pop_front();
  }
  ports_.Release(a.master_port);
  attempts_.erase(it);
  pass_.CapacityFreed(job_id);
  publish_assignments_ = true;
  publish_workers_ = true;
  if (options_.on_attempt_released) options_.on_attempt_released(job_id, attempt);
}

void ClusterManager::ForEachAttemptMayErase(const std::function<void(int64_t, ActiveAttempt&)>& fn) {
  std::vector<int64_t> ids;
  for (auto& [job_id, a] : attempts_) ids.push_back(job_id);
  for (int64_t job_id : ids) {
    auto it = attempts_.find(job_id);
    if (it != attempts_.end()) fn(job_id, it->second);
  }
}

void ClusterManager::ReleaseAbandoned(absl::Time now) {
  ForEachAttemptMayErase([&](int64_t job_id, ActiveAttempt& a) {
    if (!a.committed) return;
    const std::vector<std::string> gone = a.Abandoned(now, options_.missing_task_grace);
    if (gone.empty()) return;
    for (const std::string& task_id : gone) {
      const bool missing = a.missing_since.count(task_id) > 0;
      const std::string why =
          missing ? absl::StrCat("task ", task_id, " is no longer running on its worker ",
                                 a.WorkerOf(task_id))
                  : absl::StrCat("task ", task_id, " did not report stopping on ",
                                 a.WorkerOf(task_id), " in time; released");
      spdlog::warn("job {}: {}", job_id, why);
      a.Abandon(task_id);
      WriteTaskFailed(task_id, why);
      // A task its worker stopped listing without a final status: the worker lost it (a
      // restart), never the job's fault, so no restart is used (worker_sessions.h).
      if (!a.ended) {
        EndAttempt(a, missing ? AttemptOutcome::kNodeDrained : AttemptOutcome::kRetryable, why,
                   missing ? a.WorkerOf(task_id) : "");
      }
    }
    publish_workers_ = true;
    MaybeRelease(job_id);
  });
}

void ClusterManager::SendAssignments(int64_t job_id) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  ActiveAttempt& a = it->second;
  for (const TaskRecord& t : a.record.tasks) {
    v1::CoordinatorMessage m;
    v1::TaskSpec* ts = m.mutable_assign()->mutable_task();
    ts->set_task_id(t.task_id);
    ts->set_job_id(JobIdString(job_id));
    ts->set_attempt(a.record.attempt);
    ts->set_node_rank(t.node_rank);
    ts->set_nnodes(static_cast<int>(a.record.tasks.size()));
    ts->set_nproc_per_node(t.ranks);
    ts->set_master_addr(a.record.master_addr);
    ts->set_master_port(a.record.master_port);
    ts->set_resume_from(a.record.resume_from);
    for (const v1::Checkpoint& c : a.resume_candidates) {
      v1::ResumeCandidate* rc = ts->add_resume_candidates();
      rc->set_path(c.path());
      rc->set_step(c.step());
      rc->set_manifest_sha256(c.manifest_sha256());
    }
    *ts->mutable_spec() = a.spec;
    for (const std::string& root : options_.path_roots) ts->add_path_roots(root);
    ts->set_owner(a.owner);
    if (options_.identity_of) {
      if (std::optional<v1::RunIdentity> id = options_.identity_of(a.owner)) *ts->mutable_identity() = *std::move(id);
    }
    workers_.Send(t.worker, std::move(m));
  }
}

void ClusterManager::EndStalledAndOverdue(absl::Time now) {
  ForEachAttemptMayErase([&](int64_t, ActiveAttempt& a) {
    if (a.ended) return;
    const absl::Duration stall = absl::Seconds(a.spec.run_policy().stall_timeout_seconds());
    if (a.running_recorded && stall > absl::ZeroDuration() && now - a.last_progress > stall) {
      EndAttempt(a, AttemptOutcome::kRetryable,
                 absl::StrCat("stalled: no step progress for ", absl::FormatDuration(now - a.last_progress)));
      return;
    }
    const int64_t deadline = a.spec.run_policy().active_deadline_seconds();
    if (deadline > 0 && now - a.record.started > absl::Seconds(deadline)) {
      // (Counted from this attempt's start; earlier attempts' time is added by the
      // scheduling pass, which fails a queued job whose deadline has passed.)
      EndAttempt(a, AttemptOutcome::kDeadline,
                 absl::StrCat("active_deadline_seconds (", deadline, ") exceeded"));
    }
  });
}

}  // namespace llamafleet
