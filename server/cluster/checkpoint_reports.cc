// The ClusterManager's recorded checkpoints: a report from rank 0 is checked against the
// job's recorded directory and recorded, then checked on the storage off the loop, which
// drives retention (keep_last) and, for an elastic gang below its size, the decision to
// grow it back. Strand-only, except what files_ runs (the storage checks, ApplyRetention).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/cluster/cluster_manager.h"
#include "server/cluster/elastic_grow.h"
#include "spdlog/spdlog.h"

namespace llamafleet {

void ClusterManager::HandleCheckpoint(const std::string& worker,
                                      const v1::CheckpointReport& report) {
  ActiveAttempt* a = BoundAttempt(worker, report.task_id(), "a checkpoint report");
  if (a == nullptr) return;
  const int64_t job_id = a->record.job_id;
  const std::string job_dir = a->spec.checkpoint().dir();
  // Only the job's own step-N directories are recorded: the coordinator deletes what it
  // records (keep_last), so a path anywhere else must never get in. Judged here on the
  // path and the job's recorded directory alone: the loop never waits on the storage (a
  // hung mount, a user's links); what the storage shows is checked off the loop, after.
  if (absl::Status s = CheckCheckpointPathLexically(job_dir, report.path()); !s.ok()) {
    spdlog::warn("job {}: checkpoint report from {} ignored: {}", job_id, worker,
                 std::string(s.message()));
    return;
  }
  v1::CheckpointReport recorded = report;
  if (recorded.has_eval_loss() &&
      !(std::isfinite(recorded.eval_loss()) && recorded.eval_loss() >= 0)) {
    spdlog::warn("job {}: checkpoint {} reports eval loss {}; recorded without it", job_id,
                 report.path(), report.eval_loss());
    recorded.clear_eval_loss();
  }
  // Recorded at once, in order with the task's later reports (a preempted job's last
  // checkpoint is there before it is placed again); then, off the loop, checked on the
  // storage, and only then an elastic grow from it and retention.
  const int keep_last = a->spec.checkpoint().keep_last();
  const int attempt = a->record.attempt;
  Write(RecordCheckpointTxn(job_id, attempt, recorded),
        [this, job_id, attempt, keep_last, job_dir, path = report.path(),
         step = report.step()](absl::Status s) {
          if (!s.ok()) return;
          Post([this, job_id, attempt, keep_last, job_dir, path, step] {
            CheckOnStorage(job_id, attempt, keep_last, job_dir, path, step);
          });
        });
  a->last_progress = options_.clock->Now();
}

void ClusterManager::CheckOnStorage(int64_t job_id, int attempt, int keep_last,
                                    const std::string& job_dir, const std::string& path,
                                    int64_t step) {
  if (storage_checks_.load() >= kMaxStorageChecks) {
    spdlog::warn(
        "job {}: checkpoint {} recorded unchecked: {} checks already wait on the storage; "
        "retention waits for the next checkpoint",
        job_id, path, kMaxStorageChecks);
    checkpoints_checked_.fetch_add(1);
    return;
  }
  storage_checks_.fetch_add(1);
  files_->Post([this, job_id, attempt, keep_last, job_dir, path, step] {
    if (absl::Status s = CheckRecordedCheckpoint(job_dir, path); !s.ok()) {
      // Its row goes again; retention waits for a checkpoint that checks out, so that this
      // one never counts among the kept.
      spdlog::warn("job {}: recorded checkpoint {} forgotten: {}", job_id, path,
                   std::string(s.message()));
      Write(ForgetCheckpointsTxn(job_id, {step}), [](absl::Status) {});
      checkpoints_checked_.fetch_add(1);
    } else {
      // Durable and complete: an elastic gang below its size may grow back from it.
      Post([this, job_id, attempt, step] {
        MaybeGrow(job_id, attempt, step);
        checkpoints_checked_.fetch_add(1);
      });
      if (keep_last > 0) ApplyRetention(job_id, keep_last, job_dir);
    }
    storage_checks_.fetch_sub(1);
  });
}

void ClusterManager::MaybeGrow(int64_t job_id, int attempt, int64_t step) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end() || it->second.record.attempt != attempt) return;
  ActiveAttempt& a = it->second;
  const absl::Time now = options_.clock->Now();
  GrowCheck check;
  check.job.job_id = job_id;
  check.job.nodes = a.spec.resources().nodes();
  check.job.min_nodes = a.spec.resources().min_nodes();
  check.nodes_now = static_cast<int>(a.record.tasks.size());
  for (const TaskRecord& t : a.record.tasks) check.workers_now.push_back(t.worker);
  check.attempt_started = a.record.started;
  check.running = a.running_recorded && !a.stopping && !a.ended;
  check.checkpoint_recorded = true;
  check.checkpoint_step = step;
  check.total_steps = a.total_steps;
  check.cooldown = absl::Seconds(a.spec.resources().elastic_cooldown_seconds());
  // Rules 1-4 first: most checkpoints are of jobs that cannot grow; they read nothing.
  if (!GrowBlocked(check, now).empty()) return;
  absl::StatusOr<QueuedJobsSnapshot> queued = store_->SnapshotQueuedJobs();
  absl::StatusOr<std::vector<SchedulableJob>> running = LoadJobsInStates(*store_, {v1::RUNNING});
  if (!queued.ok() || !running.ok()) return;
  auto self = std::find_if(running->begin(), running->end(), [&](const SchedulableJob& j) {
    return j.job.id() == JobIdString(job_id);
  });
  if (self == running->end()) return;
  const std::vector<WorkerView>& views = workers_.Views();
  check.job = MakePendingJob(job_id, *self, views);
  const SchedulerInput input = BuildSchedulerInput(*queued, views, attempts_, now);
  const GrowDecision d = DecideGrow(check, input.pending, input.workers, input.running,
                                    options_.queues, scheduler_, now);
  if (!d.grow) {
    spdlog::info("job {}: stays on {} nodes after checkpoint step {}: {}", job_id, check.nodes_now,
                 step, d.why);
    return;
  }
  // Not a failure: no restart used, no backoff, not a preemption (AttemptOutcome::kResized).
  EndAttempt(a, AttemptOutcome::kResized,
             absl::StrCat("resizing ", check.nodes_now, " \u2192 ", d.nodes_after,
                          " nodes: capacity returned (", absl::StrJoin(d.added_workers, ", "),
                          "); stopping after checkpoint step ", step));
}

void ClusterManager::ApplyRetention(int64_t job_id, int keep_last, const std::string& job_dir) {
  absl::StatusOr<std::vector<v1::Checkpoint>> all = ListCheckpoints(*store_, job_id);
  if (!all.ok()) return;
  RetentionPlan plan = PlanRetention(job_dir, *all, keep_last);
  for (size_t i = 0; i < plan.refused.size(); ++i) {
    spdlog::warn("job {}: retention leaves {} alone: {}", job_id, plan.refused[i].path(),
                 plan.refusals[i]);
  }
  std::vector<std::string> errors;
  std::vector<int64_t> forget =
      RemoveCheckpointFiles(DeletionAnchors(options_.path_roots, options_.checkpoint_root), job_dir,
                            job_id, plan.remove, &errors);
  for (const std::string& e : errors) spdlog::warn("job {}: retention: {}", job_id, e);
  if (!forget.empty()) Write(ForgetCheckpointsTxn(job_id, forget), [](absl::Status) {});
}

}  // namespace llamafleet
